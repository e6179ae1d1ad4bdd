"""Deployments register against a real (temporary) Prefect server with their schedule and pool."""

import asyncio

import pytest

from prefect.testing.utilities import prefect_test_harness

from sagegraph.deployments.deploy import deploy

pytestmark = pytest.mark.e2e  # the CLI in a subprocess, a Prefect API server, Dask workers


def test_deployments_register_with_schedule_and_process_pool():
    with prefect_test_harness(server_startup_timeout=120):
        ids = deploy(pool="sagegraph-test", cron="0 4 * * 1")
        assert len(ids) == 2

        async def read():
            from prefect.client.orchestration import get_client

            async with get_client() as client:
                pool = await client.read_work_pool("sagegraph-test")
                deps = [await client.read_deployment(i) for i in ids]
                return pool, deps

        pool, deps = asyncio.run(read())
        assert pool.type == "process"
        by_name = {d.name: d for d in deps}
        assert set(by_name) == {"ottqa-rebuild", "ottqa-sweep"}
        rebuild = by_name["ottqa-rebuild"]
        assert rebuild.work_pool_name == "sagegraph-test" and rebuild.parameters == {"config": "conf/ottqa.yaml"}
        assert [s.schedule.cron for s in rebuild.schedules] == ["0 4 * * 1"]
        assert by_name["ottqa-sweep"].entrypoint == "flows/entrypoints.py:run_sweep"
