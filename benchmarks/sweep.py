"""Time a sweep of the shared OTT-QA questions x N configurations through the real sweep flow
(Prefect + Dask + MLflow), from a built graph.

    .venv/bin/python -m benchmarks.sweep [--sweep conf/sweep_ottqa.yaml] [--graph DIR] [--fresh]

Prints one JSON line: configurations, questions, wall seconds (including Prefect and Dask start),
and the Fig. 4 rows.
"""

from __future__ import annotations

import argparse
import json
import shutil
import time
from pathlib import Path

from benchmarks.machine import machine


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--sweep", type=Path, default=Path("conf/sweep_ottqa.yaml"))
    ap.add_argument("--fresh", action="store_true", help="delete previous sweep output first (no resume)")
    ap.add_argument("--graph", type=Path, help="a built graph to sweep (default: the sweep file's)")
    ap.add_argument("--out", type=Path, default=Path("work/sweeps/bench"))
    args = ap.parse_args()

    from sagegraph.config import RunnerConfig
    from sagegraph.eval.sweep import configurations, load_sweep
    from sagegraph.flows.runtime import dask_runner, prefect_api
    from sagegraph.flows.sweep import sweep

    cfg = load_sweep(args.sweep)
    cfg.out = args.out.resolve()
    if args.graph:
        cfg.graph = args.graph.resolve()
    if args.fresh and Path(cfg.out).exists():
        shutil.rmtree(cfg.out)
    n = len(configurations(cfg))
    t0 = time.perf_counter()
    with prefect_api(cfg.out):
        result = sweep.with_options(task_runner=dask_runner(RunnerConfig()))(cfg)
    wall = time.perf_counter() - t0
    metrics = json.loads(
        (
            Path(cfg.out)
            / "runs"
            / next(iter(sorted(p.name for p in (Path(cfg.out) / "runs").iterdir())))
            / "metrics.json"
        ).read_text()
    )
    print(
        json.dumps(
            {
                "benchmark": "sweep",
                "machine": machine(),
                "configurations": n,
                "questions": metrics["questions"],
                "seconds": round(wall, 1),
                "flow_seconds": result["seconds"],
                "figure4": result["figure4"],
            }
        )
    )


if __name__ == "__main__":
    main()
