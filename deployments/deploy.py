"""Register sagegraph's deployments with the Prefect server at PREFECT_API_URL.

    .venv/bin/python -m sagegraph.deployments.deploy [--pool sagegraph-local] [--cron "0 3 * * 0"]

Creates the process work pool when missing, then two deployments from this checkout:
`rebuild-graph/ottqa-rebuild` (on the cron schedule) and `run-sweep/ottqa-sweep` (on demand).
Start a worker with `.venv/bin/prefect worker start --pool sagegraph-local`.
"""

from __future__ import annotations

import argparse
import asyncio
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


async def ensure_pool(name: str) -> None:
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.actions import WorkPoolCreate
    from prefect.exceptions import ObjectAlreadyExists

    async with get_client() as client:
        try:
            await client.create_work_pool(WorkPoolCreate(name=name, type="process"))
        except ObjectAlreadyExists:
            pass


def deploy(pool: str = "sagegraph-local", cron: str = "0 3 * * 0", build_config: str = "conf/ottqa.yaml", sweep_file: str = "conf/sweep_ottqa.yaml") -> list[str]:
    from prefect import flow

    asyncio.run(ensure_pool(pool))
    ids = []
    rebuild = flow.from_source(source=str(ROOT), entrypoint="flows/entrypoints.py:rebuild")
    ids.append(rebuild.deploy(name="ottqa-rebuild", work_pool_name=pool, cron=cron, parameters={"config": build_config}, build=False, print_next_steps=False))
    sweep = flow.from_source(source=str(ROOT), entrypoint="flows/entrypoints.py:run_sweep")
    ids.append(sweep.deploy(name="ottqa-sweep", work_pool_name=pool, parameters={"sweep_file": sweep_file}, build=False, print_next_steps=False))
    return [str(i) for i in ids]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--pool", default="sagegraph-local")
    ap.add_argument("--cron", default="0 3 * * 0", help="rebuild schedule (default: Sundays 03:00)")
    ap.add_argument("--config", default="conf/ottqa.yaml")
    ap.add_argument("--sweep", default="conf/sweep_ottqa.yaml")
    args = ap.parse_args()
    for i in deploy(args.pool, args.cron, args.config, args.sweep):
        print(i)


if __name__ == "__main__":
    main()
