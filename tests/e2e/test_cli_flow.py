"""The main job through its real entry point: `sagegraph build` runs the Prefect flow on a Dask
LocalCluster with one local API server, and a rerun resumes everything."""

import json
import re
import shutil

import pytest

from tests.fixtures import sagegraph, write_config


def test_build_flow_end_to_end_and_resume(ottqa_dir, tmp_path):
    corpus = tmp_path / "ottqa"
    shutil.copytree(ottqa_dir, corpus)
    # one Dask worker: the flow's path is the same, and a second worker's start-up (about 15 CPU s)
    # would only slow the rest of the suite on a 2-core runner; test_workers_start... starts two
    cfg = write_config(
        tmp_path / "c.yaml", {"kind": "ottqa", "path": str(corpus)}, tmp_path / "out", runner={"n_workers": 1}
    )
    first = sagegraph("build", str(cfg), "--max-sources", "20")
    assert first.returncode == 0, first.stderr[-3000:]
    summary = json.loads(first.stdout.strip().splitlines()[-1])
    assert summary["counts"]["nodes"] > 0 and summary["edges"] > 0 and summary["encode_seconds"] > 0
    assert set(summary["stage_seconds"]) >= {"chunk_metadata_embed", "edges", "load_store_and_stats"}
    assert (
        set(summary["task_seconds"]) == {"chunk", "metadata", "embed", "load_store", "stats"}
        and summary["task_seconds"]["chunk"] > 0
    )
    assert "graph store:     FalkorDB (embedded)" in first.stdout and "degree_histogram.png" in first.stdout
    assert (tmp_path / "out" / "graph" / "nodes.parquet").exists()
    # the stage's progress is one line (per-batch lines are Prefect's task log, shown with -v)
    assert re.search(r"chunk, metadata, embed: (\d+)/\1 batches, .*, done", first.stdout + first.stderr)
    assert not re.search(r"chunk src-[0-9a-f]{16}\.json done", first.stdout + first.stderr)
    # one output missing and the last passage built edited: a change this small is rebuilt in the
    # CLI's own process (no server, no workers), which resumes the batches the edit did not touch
    # and says what changed
    (tmp_path / "out" / "stats" / "graph_stats.json").unlink()
    lines = [json.loads(x) for x in (corpus / "passages.jsonl").read_text().splitlines()]
    last = 17  # --max-sources 20 builds the 2 tables and the first 18 passages; the last of them sits in the last batch
    lines[last] = {**lines[last], "text": lines[last]["text"] + " It was renamed in 1990."}
    (corpus / "passages.jsonl").write_text("".join(json.dumps(p) + "\n" for p in lines))
    second = sagegraph("build", str(cfg), "--max-sources", "20")
    assert second.returncode == 0, second.stderr[-3000:]
    again = json.loads(second.stdout.strip().splitlines()[-1])
    assert (
        again["resumed_batches"] > 0
        and not again["up_to_date"]
        and (tmp_path / "out" / "stats" / "graph_stats.json").exists()
    )
    assert "in this process (a small change" in second.stdout and "Prefect API" not in second.stdout
    assert "first build" in first.stdout and "~1 changed" in second.stdout
    changes = json.loads((tmp_path / "out" / "stats" / "changes.json").read_text())
    assert (
        changes["counts"]["changed"] == {"documents": 1}
        and not changes["counts"]["added"]
        and changes["corpus_version"]
    )
    assert "stage_seconds" in changes and again["counts"]["nodes"] >= summary["counts"]["nodes"] - 1
    # what the rebuild redid: the edited passage's chunks re-encoded and re-created in the graph
    # (their ids are content hashes: removed and added), the store written as the difference or whole
    work = changes["work"]
    assert work["encoded"] > 0 and work["graph"]["nodes_added"] > 0 and work["graph"]["nodes_removed"] > 0
    assert work["store"] in ("loaded whole",) or work["store"].startswith("difference")
    assert "rebuilt:         graph nodes +" in second.stdout and "texts encoded" in second.stdout
    # nothing changed and nothing missing: no server, no workers, the same counts
    idle = sagegraph("build", str(cfg), "--max-sources", "20")
    assert idle.returncode == 0, idle.stderr[-3000:]
    same = json.loads(idle.stdout.strip().splitlines()[-1])
    assert same["up_to_date"] and same["counts"] == again["counts"] and "Prefect API" not in idle.stdout
    assert "up to date; nothing to build" in idle.stdout and "graph store:     FalkorDB (embedded)" in idle.stdout


def test_bad_config_is_a_clear_error(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("edges:\n  logic: maybe\n")
    res = sagegraph("build", str(bad))
    assert res.returncode == 2 and "edges.logic" in res.stderr and "Traceback" not in res.stderr
    from tests.fixtures import write_config

    gone = write_config(
        tmp_path / "gone.yaml",
        {"kind": "ottqa", "path": str(tmp_path / "moved")},
        tmp_path / "out",
        store={"backend": "none"},
    )
    res = sagegraph("build", str(gone))
    assert res.returncode == 2 and "moved does not exist" in res.stderr and "Traceback" not in res.stderr
    assert not (tmp_path / "out").exists()  # refused before any server, worker or stage started


def _record_worker(folder: str) -> None:
    import os
    from pathlib import Path

    (Path(folder) / f"{os.getpid()}.txt").write_text(os.environ.get("PREFECT_API_URL", ""))


def test_workers_start_and_warm_up_beside_the_api_server(tmp_path, monkeypatch):
    """The cluster starts while the local API server does; every worker has run the warm-up and
    knows the server's address before the flow gets the task runner."""
    import functools
    import os

    from sagegraph.config import RunnerConfig
    from sagegraph.flows.runtime import flow_runtime

    monkeypatch.delenv("PREFECT_API_URL", raising=False)
    marks = tmp_path / "marks"
    marks.mkdir()
    with flow_runtime(
        tmp_path / "work",
        RunnerConfig(n_workers=2, threads_per_worker=1),
        warm=functools.partial(_record_worker, str(marks)),
    ) as (api, runner):
        seen = [p.read_text() for p in marks.glob("*.txt")]
        assert len(seen) == 2 and set(seen) == {api} and api.startswith("http://127.0.0.1:")
        assert runner.address and os.environ["PREFECT_API_URL"] == api
    assert "PREFECT_API_URL" not in os.environ


def _worker_settings() -> tuple[object, str | None]:
    import os

    import dask.config

    return dask.config.get("distributed.worker.profile.enabled"), os.environ.get("MALLOC_TRIM_THRESHOLD_")


@pytest.mark.parametrize("exported", [None, "1048576"])
def test_the_local_cluster_s_workers_run_without_the_profiler_and_with_glibc_s_own_malloc_trimming(
    monkeypatch, exported
):
    """What the spawned workers themselves read, not what this process exported: a worker takes its
    nanny's Dask config over its environment. The nanny's own MALLOC_TRIM_THRESHOLD_ is left out,
    and a value the user exported is passed on. Both of sagegraph's ways to start a cluster use it."""
    import dask.config
    from distributed import Client

    from sagegraph.config import RunnerConfig
    from sagegraph.flows.runtime import dask_runner, local_cluster

    if exported is None:
        monkeypatch.delenv("MALLOC_TRIM_THRESHOLD_", raising=False)
    else:
        monkeypatch.setenv("MALLOC_TRIM_THRESHOLD_", exported)
    before = dask.config.get("distributed")
    with local_cluster(n_workers=1, threads_per_worker=1, processes=True, dashboard_address=None) as cluster:
        with Client(cluster) as client:
            assert list(client.run(_worker_settings).values()) == [(False, exported)]
    assert dask.config.get("distributed") == before  # this process's own config is as it was
    assert dask_runner(RunnerConfig()).cluster_class is local_cluster


def test_the_build_flow_itself_checks_its_inputs_first(tmp_path):
    """Deployments call the flow directly, without the CLI's check."""
    from sagegraph.config import load_config
    from sagegraph.errors import ConfigError
    from sagegraph.flows.build_graph import build_graph
    from tests.fixtures import write_config

    cfg = load_config(
        write_config(
            tmp_path / "c.yaml",
            {"kind": "ottqa", "path": str(tmp_path / "moved")},
            tmp_path / "out",
            store={"backend": "none"},
        )
    )
    with pytest.raises(ConfigError, match="moved does not exist"):
        build_graph.fn(cfg)
    assert not (tmp_path / "out").exists()


def test_a_new_out_dirs_prefect_database_is_a_copy_of_an_empty_migrated_one(tmp_path, monkeypatch):
    """Seven of the local API server's eleven seconds were Prefect migrating a new home's database;
    a new home gets a copy of one migrated once per Prefect version, and anything unusual leaves
    the home to Prefect."""
    import sqlite3

    from sagegraph.flows import prefect_db

    home = tmp_path / "out" / ".prefect"
    assert prefect_db.seed_home(home)
    with sqlite3.connect(home / "prefect.db") as db:
        assert db.execute("select version_num from alembic_version").fetchone()[0]
        assert db.execute("select count(*) from flow_run").fetchone()[0] == 0  # empty: no other run's history
    assert not prefect_db.seed_home(home)  # a home that has its database keeps it
    assert not [p.name for p in home.iterdir() if p.name.startswith(".")]  # no staged copy left behind
    monkeypatch.setenv("PREFECT_SERVER_DATABASE_CONNECTION_URL", "postgresql+asyncpg://elsewhere/prefect")
    assert not prefect_db.seed_home(tmp_path / "theirs") and not (tmp_path / "theirs").exists()
    monkeypatch.delenv("PREFECT_SERVER_DATABASE_CONNECTION_URL")
    (tmp_path / "file").write_text("")
    monkeypatch.setattr(prefect_db, "template_path", lambda: tmp_path / "file" / "empty.db")  # an unwritable cache
    assert not prefect_db.seed_home(tmp_path / "other") and not (tmp_path / "other" / "prefect.db").exists()
