"""Build the full OTT-QA dev graph (heuristic metadata, embedded defaults) through the Prefect flow,
then time edge construction on a quarter of the nodes against all of them (the 4x scaling check).

    .venv/bin/python -m benchmarks.build_ottqa [--out work/bench-ottqa] [--max-sources N]

Prints one JSON line: machine, nodes by modality, edges by type, seconds per stage, share of worker
time in model encode, peak memory (this process and its children), SAGE's figures beside ours.
"""

from __future__ import annotations

import argparse
import json
import shutil
import time
from pathlib import Path

import numpy as np

from benchmarks.machine import PeakMemory, machine

SAGE_PAPER = {"doc_chunks": 21912, "table_chunks": 974, "edges": 751836}


def edge_construction_seconds(graph_dir: Path, cfg, fraction: float, seed: int = 0) -> tuple[float, int]:
    """Candidates + signals + pruning + edge records for every modality pair on a node subset."""
    from sagegraph.build import edges as E
    from sagegraph.build.fields import entity_set
    from sagegraph.build.stages import edge_params, load_graph_inputs, present_pairs

    nodes, vectors = load_graph_inputs(graph_dir)
    rng = np.random.default_rng(seed)
    idx = np.sort(rng.choice(len(nodes), size=int(len(nodes) * fraction), replace=False)) if fraction < 1 else np.arange(len(nodes))
    sub = [nodes[i] for i in idx]
    vec = {f: np.asarray(v)[idx] for f, v in vectors.items()}
    t0 = time.perf_counter()
    modality = np.array([n.modality for n in sub])
    source = np.array([n.source_id for n in sub])
    Emat, names = E.entity_matrix([entity_set(n) for n in sub])
    n_edges = 0
    for pair in present_pairs(set(modality.tolist())):
        res = E.similarity_pair(pair, modality, source, vec, Emat, edge_params(cfg))
        n_edges += len(E.pair_edges(res, [n.id for n in sub], Emat, names))
    return time.perf_counter() - t0, n_edges


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--config", default="conf/ottqa.yaml")
    ap.add_argument("--out", default="work/bench-ottqa")
    ap.add_argument("--max-sources", type=int)
    ap.add_argument("--keep", action="store_true", help="resume a previous benchmark build instead of starting fresh")
    args = ap.parse_args()

    from flows.build_graph import build_graph
    from flows.runtime import dask_runner, prefect_api
    from sagegraph.config import load_config

    cfg = load_config(args.config, out=Path(args.out), max_sources=args.max_sources, metadata="heuristic")
    if cfg.out.exists() and not args.keep:
        shutil.rmtree(cfg.out)  # a fresh build: empty embedding cache, nothing reused
    t0 = time.perf_counter()
    with PeakMemory() as mem:
        with prefect_api(cfg.out):
            result = build_graph.with_options(task_runner=dask_runner(cfg.runner))(cfg)
    wall = time.perf_counter() - t0
    quarter_s, quarter_edges = edge_construction_seconds(cfg.out / "graph", cfg, 0.25)
    full_s, full_edges = edge_construction_seconds(cfg.out / "graph", cfg, 1.0)
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
        "flow_seconds": result["seconds"],
        "total_seconds": round(wall, 1),
        "encode_seconds": result["encode_seconds"],
        "encode_share_of_worker_time": round(result["encode_seconds"] / (workers * wall), 3),
        "peak_rss_mb": round(mem.peak_mb),
        "edge_construction": {"quarter_s": round(quarter_s, 2), "full_s": round(full_s, 2), "ratio_4x": round(full_s / quarter_s, 2), "quarter_edges": quarter_edges, "full_edges": full_edges},
        "sage_paper": SAGE_PAPER,
    }
    print(json.dumps(summary))


if __name__ == "__main__":
    main()
