"""Deployments register against a real (temporary) Prefect server with their schedule and pool."""

import asyncio

import pytest

from sagegraph.deployments.deploy import ROOT, deploy


def test_deployments_register_with_schedule_and_process_pool(tmp_path, monkeypatch):
    """Named by the configs they run, with absolute paths (a worker does not run in the directory
    `deploy` ran in); the sweep is optional."""
    from sagegraph.flows.runtime import prefect_api

    monkeypatch.chdir(ROOT)
    monkeypatch.setenv("PREFECT_HOME", str(tmp_path / "work" / ".prefect"))  # this test's server's database
    monkeypatch.delenv("PREFECT_API_URL", raising=False)
    with prefect_api(tmp_path / "work"):  # the server a build or sweep starts, its database copied in
        ids = deploy(
            pool="sagegraph-test", cron="0 4 * * 1", build_config="conf/ottqa.yaml", sweep_file="conf/sweep_ottqa.yaml"
        )
        assert len(ids) == 2
        only = deploy(pool="sagegraph-test", cron="0 5 * * *", build_config="conf/kb_synth.yaml", sweep_file=None)

        async def read():
            from prefect.client.orchestration import get_client

            async with get_client() as client:
                pool = await client.read_work_pool("sagegraph-test")
                deps = [await client.read_deployment(i) for i in [*ids, *only]]
                return pool, deps

        pool, deps = asyncio.run(read())
        assert pool.type == "process"
        by_name = {d.name: d for d in deps}
        assert set(by_name) == {"ottqa", "ottqa-fig4", "kb-synth"}
        rebuild = by_name["ottqa"]
        assert rebuild.work_pool_name == "sagegraph-test" and rebuild.parameters == {
            "config": str(ROOT / "conf/ottqa.yaml")
        }
        assert [s.schedule.cron for s in rebuild.schedules] == ["0 4 * * 1"]
        assert by_name["ottqa-fig4"].entrypoint == "flows/entrypoints.py:run_sweep"
        assert by_name["ottqa-fig4"].parameters == {"sweep_file": str(ROOT / "conf/sweep_ottqa.yaml")}
        assert [s.schedule.cron for s in by_name["kb-synth"].schedules] == ["0 5 * * *"]


def test_a_bad_config_stops_deploy_before_the_server_is_asked(tmp_path):
    bad = tmp_path / "conf" / "bad.yaml"
    bad.parent.mkdir()
    bad.write_text("name: x\ncorpus: {kind: kb}\nedges: {logic: maybe}\n")
    with pytest.raises(Exception, match="bad.yaml"):
        deploy(pool="never-created", build_config=bad, sweep_file=None)  # no server runs here: it must fail first


def test_deploy_without_a_server_to_deploy_to_says_so(tmp_path, monkeypatch):
    """Without PREFECT_API_URL, Prefect would register the deployments in a temporary server of its
    own that no worker reads: one line, exit 2, nothing started."""
    from sagegraph.cli import main

    monkeypatch.delenv("PREFECT_API_URL", raising=False)
    assert main(["deploy", "--config", str(ROOT / "conf/kb_synth.yaml")]) == 2
