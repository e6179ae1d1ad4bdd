"""Register sagegraph's deployments with the Prefect server at PREFECT_API_URL.

    sagegraph deploy --config conf/mykb.yaml [--sweep conf/sweep_mykb.yaml] [--cron "0 3 * * 0"] [--pool
    sagegraph-local]

(or `python -m sagegraph.deployments.deploy` with the same options). Creates the process work pool
when missing, then deployments from this checkout: `rebuild-graph/<config name>` on the cron
schedule and, given a sweep file, `run-sweep/<sweep name>` on demand. Start a worker with
`.venv/bin/prefect worker start --pool sagegraph-local`.
"""

from __future__ import annotations

import argparse
import asyncio
import os
from pathlib import Path
from typing import Any

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


def deploy(
    pool: str = "sagegraph-local",
    cron: str = "0 3 * * 0",
    build_config: str | Path = "conf/ottqa.yaml",
    sweep_file: str | Path | None = "conf/sweep_ottqa.yaml",
) -> list[str]:
    """A scheduled rebuild of `build_config` (deployment `rebuild-graph/<config name>`) and, given a sweep
    file, an on-demand sweep (`run-sweep/<sweep name>`). Both files are read and validated here, before
    the server is asked for anything, and passed as absolute paths: a worker runs the flow from
    this checkout, not from the directory this command ran in."""
    from prefect import flow

    from sagegraph.config import load_config
    from sagegraph.eval.sweep import load_sweep

    build_config = Path(build_config).resolve()
    name = load_config(build_config).name
    sweep = (Path(sweep_file).resolve(), load_sweep(Path(sweep_file)).name) if sweep_file else None
    asyncio.run(ensure_pool(pool))
    ids = []
    # from_source is sync-compatible: outside an event loop it returns the Flow itself
    rebuild: Any = flow.from_source(source=str(ROOT), entrypoint="flows/entrypoints.py:rebuild")
    ids.append(
        rebuild.deploy(
            name=name,
            work_pool_name=pool,
            cron=cron,
            parameters={"config": str(build_config)},
            build=False,
            print_next_steps=False,
        )
    )
    if sweep:
        run: Any = flow.from_source(source=str(ROOT), entrypoint="flows/entrypoints.py:run_sweep")
        ids.append(
            run.deploy(
                name=sweep[1],
                work_pool_name=pool,
                parameters={"sweep_file": str(sweep[0])},
                build=False,
                print_next_steps=False,
            )
        )
    return [str(i) for i in ids]


def add_arguments(ap: argparse.ArgumentParser) -> None:
    ap.add_argument(
        "--config", default="conf/ottqa.yaml", help="build config to rebuild on the schedule (default: conf/ottqa.yaml)"
    )
    ap.add_argument("--sweep", default=None, help="sweep file to deploy for on-demand runs (default: none)")
    ap.add_argument("--cron", default="0 3 * * 0", help="rebuild schedule, cron syntax (default: Sundays 03:00)")
    ap.add_argument("--pool", default="sagegraph-local", help="Prefect process work pool, created when missing")


def run(args: argparse.Namespace) -> list[str]:
    """Refuses without a server to deploy to: Prefect would otherwise register the deployments in
    a temporary server of its own, where no worker ever picks them up."""
    if not os.environ.get("PREFECT_API_URL"):
        from sagegraph.errors import ConfigError

        raise ConfigError(
            "PREFECT_API_URL is not set: start a server (`prefect server start`) and export "
            "PREFECT_API_URL=http://127.0.0.1:4200/api, or point it at your team's server"
        )
    from sagegraph.flows.runtime import require_prefect_api

    require_prefect_api(os.environ["PREFECT_API_URL"])
    ids = deploy(args.pool, args.cron, args.config, args.sweep)
    for i in ids:
        print(i)
    return ids


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_arguments(ap)
    run(ap.parse_args())


if __name__ == "__main__":
    main()
