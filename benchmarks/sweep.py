"""Time a sweep of the shared OTT-QA questions x N configurations through the real sweep flow
(Prefect + Dask + MLflow), or in this process as a small `sagegraph sweep` runs it, from a built graph.

    .venv/bin/python -m benchmarks.sweep [--sweep conf/sweep_ottqa.yaml] [--graph DIR] [--fresh] [--in-process]

Prints one JSON line: the mode, configurations, questions, wall seconds (including Prefect and
Dask start for the flow), and the Fig. 4 rows.
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
    ap.add_argument("--in-process", action="store_true", help="no Prefect server or Dask worker (sagegraph.sweeps)")
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
    if args.in_process:
        from sagegraph.sweeps import sweep_in_process

        result = sweep_in_process(cfg)
    else:
        with prefect_api(cfg.out):
            result = sweep.with_options(task_runner=dask_runner(RunnerConfig()))(cfg)
    wall = time.perf_counter() - t0
    first_run = min(p for p in (Path(cfg.out) / "runs").glob("*/metrics.json"))  # run dirs, not their locks
    metrics = json.loads(first_run.read_text())
    print(
        json.dumps(
            {
                "benchmark": "sweep",
                "mode": "in-process" if args.in_process else "flow",
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
