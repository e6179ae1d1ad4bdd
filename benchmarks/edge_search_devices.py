"""The edge stage's neighbour search on each path a machine offers, over a built graph's vectors:
seconds per path, and whether each path proposes the neighbours the exact CPU search proposes.

    .venv/bin/python -m benchmarks.edge_search_devices --graph work/bench-ottqa/graph [--device cuda]

For every vector signal of every modality pair the graph holds, each side's nodes search the other
side (self excluded, as the stage does) by: `flat` (faiss's exact search on the CPU), `cluster`
(the CPU's default above `edges.flat_below` nodes) and `exact` on `--device` (the path `ann: auto`
takes where torch sees a GPU; `--device cpu` runs that code on the CPU: a check of the code, not a
GPU's timing). Reported per path: seconds (the stage's whole search, `edges.nearest`),
and the share of nodes whose neighbour set equals flat's (1.0 for `exact`: the re-scoring makes the
device's neighbours the CPU's; `cluster` is approximate). One JSON line, the machine named.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np

from benchmarks.machine import machine
from sagegraph.config import EdgeConfig, load_config
from sagegraph.construct import edges as edge_construction
from sagegraph.construct.stages import load_graph_inputs, present_pairs

PATHS = {"flat": "flat", "cluster": "cluster", "exact": "exact-gpu"}


def compare(graph: Path, params: EdgeConfig, device: str) -> list[dict]:
    nodes, vectors = load_graph_inputs(graph)
    return compare_vectors(np.array([n.modality for n in nodes]), vectors, params, device)


def compare_vectors(
    modality: np.ndarray, vectors: dict[str, np.ndarray], params: EdgeConfig, device: str
) -> list[dict]:
    """One row per vector signal of each modality pair present: each path's seconds and its
    share of nodes whose neighbours are flat's."""
    rows = []
    for pair in present_pairs(set(modality.tolist())):
        a_rows, b_rows = np.flatnonzero(modality == pair[0]), np.flatnonzero(modality == pair[1])
        for signal in edge_construction.PAIR_SIGNALS[pair]:
            if signal.kind != "vector":
                continue
            query, base = vectors[signal.field_a][a_rows], vectors[signal.field_b][b_rows]
            m = min(params.top_m + 1, len(base))
            found, seconds = {}, {}
            for path, method in PATHS.items():
                started = time.perf_counter()
                found[path] = edge_construction.nearest(query, base, m, method, params, device)
                seconds[path] = round(time.perf_counter() - started, 3)
            flat = np.sort(found["flat"], axis=1)
            rows.append(
                {
                    "pair": list(pair),
                    "signal": signal.name,
                    "queries": len(query),
                    "base": len(base),
                    "seconds": seconds,
                    "same_as_flat": {
                        path: round(float((np.sort(found[path], axis=1) == flat).all(axis=1).mean()), 4)
                        for path in ("cluster", "exact")
                    },
                }
            )
    return rows


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--graph", type=Path, default=Path("work/bench-ottqa/graph"))
    parser.add_argument("--config", default="conf/ottqa.yaml", help="the edge settings (top_m, cluster sizes)")
    parser.add_argument("--device", default="cuda", help="where the exact search runs (cpu: a check of the code)")
    args = parser.parse_args()
    params = load_config(args.config, metadata="heuristic").edges
    line = {
        "benchmark": "edge_search_devices",
        "machine": machine(),
        "graph": str(args.graph),
        "device": args.device,
        "signals": compare(args.graph, params, args.device),
    }
    print(json.dumps(line))


if __name__ == "__main__":
    main()
