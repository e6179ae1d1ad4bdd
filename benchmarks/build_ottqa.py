"""Build the full OTT-QA dev graph (heuristic metadata, embedded defaults) through the Prefect flow,
then time edge construction on a quarter of the nodes against all of them (benchmarks.edge_scaling).

    .venv/bin/python -m benchmarks.build_ottqa [--out work/bench-ottqa] [--max-sources N]

Prints one JSON line: machine, nodes by modality, edges by type, seconds per stage, share of worker
time in model encode, peak memory (this process and its children), SAGE's figures beside ours.
"""

from __future__ import annotations

import argparse
import functools
import json
import shutil
import time
from pathlib import Path

from benchmarks.edge_scaling import scaling
from benchmarks.machine import PeakMemory, machine

SAGE_PAPER = {"doc_chunks": 21912, "table_chunks": 974, "edges": 751836}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--config", default="conf/ottqa.yaml")
    ap.add_argument("--out", default="work/bench-ottqa")
    ap.add_argument("--max-sources", type=int)
    ap.add_argument("--keep", action="store_true", help="resume a previous benchmark build instead of starting fresh")
    args = ap.parse_args()

    from sagegraph.config import load_config
    from sagegraph.construct.stages import warm_up
    from sagegraph.flows.build_graph import build_graph
    from sagegraph.flows.runtime import flow_runtime

    cfg = load_config(args.config, out=Path(args.out), max_sources=args.max_sources, metadata="heuristic")
    if cfg.out.exists() and not args.keep:
        shutil.rmtree(cfg.out)  # a fresh build: empty embedding cache, nothing reused
    t0 = time.perf_counter()
    with PeakMemory() as mem:
        with flow_runtime(cfg.out, cfg.runner, warm=functools.partial(warm_up, cfg)) as (_, runner):
            result = build_graph.with_options(task_runner=runner)(cfg)
    wall = time.perf_counter() - t0
    edge_scaling = scaling(cfg.out / "graph", cfg, repeats=5)
    counts = result["counts"]
    workers = cfg.runner.n_workers * cfg.runner.threads_per_worker
    summary = {
        "benchmark": "build_ottqa",
        "machine": machine(),
        "workers": workers,
        "sources": args.max_sources or "all",
        "nodes_by_modality": counts["nodes_by_modality"],
        "nodes": counts["nodes"],
        "edges": counts["edges"],
        "edges_by_type": counts["edges_by_type"],
        "stage_seconds": result["stage_seconds"],
        "task_seconds": result["task_seconds"],
        "flow_seconds": result["seconds"],
        "total_seconds": round(wall, 1),
        "encode_seconds": result["encode_seconds"],
        "encode_share_of_worker_time": round(result["encode_seconds"] / (workers * wall), 3),
        "peak_rss_mb": round(mem.peak_mb),
        "edge_construction": edge_scaling,
        "sage_paper": SAGE_PAPER,
    }
    print(json.dumps(summary))


if __name__ == "__main__":
    main()
