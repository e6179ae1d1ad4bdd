"""Edge construction on a quarter of a built graph's sources against all of them: the issue's
"4x larger input must take <= 4.5x the time" check, without rebuilding anything.

    .venv/bin/python -m benchmarks.edge_scaling [--graph work/bench-ottqa/graph] [--repeats 3]

Times candidates + signals + pruning + the edge table (extras included) for every modality pair,
i.e. the edge stage without its file I/O, and prints one JSON line. The output itself grows faster
than the input (pairs that share an entity grow with the square of the corpus until the df cap),
so candidates and edges are reported beside the seconds.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

import numpy as np

from benchmarks.machine import machine


def edge_construction(graph_dir: Path, cfg, fraction: float, repeats: int = 1, seed: int = 0) -> dict:
    """Median seconds over `repeats` on the nodes of a random `fraction` of the sources."""
    from sagegraph.build import edges as E
    from sagegraph.build.edge_records import extra_for, pair_edge_table
    from sagegraph.build.fields import entity_set
    from sagegraph.build.stages import edge_params, load_graph_inputs, present_pairs

    nodes, vectors = load_graph_inputs(graph_dir)
    sources = np.array(sorted({n.source_id for n in nodes}))
    chosen = set(np.random.default_rng(seed).choice(sources, size=max(1, int(len(sources) * fraction)), replace=False).tolist())
    idx = np.array([i for i, n in enumerate(nodes) if n.source_id in chosen])
    sub = [nodes[i] for i in idx]
    vec = {f: np.asarray(v)[idx] for f, v in vectors.items()}
    params = edge_params(cfg)
    times, candidates, edges = [], 0, 0
    for _ in range(repeats):
        t0 = time.perf_counter()
        modality = np.array([n.modality for n in sub])
        source = np.array([n.source_id for n in sub])
        Emat, names = E.entity_matrix([entity_set(n) for n in sub])
        candidates = edges = 0
        for pair in present_pairs(set(modality.tolist())):
            res = E.similarity_pair(pair, modality, source, vec, Emat, params)
            candidates += res.n_candidates
            edges += pair_edge_table(res, [n.id for n in sub], Emat, names, extra_for(pair, sub)).num_rows
        times.append(time.perf_counter() - t0)
    return {"sources": len(chosen), "nodes": len(sub), "seconds": statistics.median(times), "candidates": candidates, "edges": edges}


def scaling(graph_dir: Path, cfg, repeats: int) -> dict:
    quarter = edge_construction(graph_dir, cfg, 0.25, repeats)
    full = edge_construction(graph_dir, cfg, 1.0, repeats)
    ratio = full["seconds"] / max(quarter["seconds"], 1e-9)  # a tiny graph's quarter can take ~0 s
    return {
        "quarter": {**quarter, "seconds": round(quarter["seconds"], 3)},
        "full": {**full, "seconds": round(full["seconds"], 3)},
        "ratio_4x": round(ratio, 2),
        "candidates_ratio": round(full["candidates"] / max(1, quarter["candidates"]), 2),
        "edges_ratio": round(full["edges"] / max(1, quarter["edges"]), 2),
        "seconds_per_candidate_ratio": round(ratio * quarter["candidates"] / max(1, full["candidates"]), 2),
    }


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--config", default="conf/ottqa.yaml")
    ap.add_argument("--graph", default="work/bench-ottqa/graph")
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()
    from sagegraph.config import load_config

    cfg = load_config(args.config, metadata="heuristic")
    print(json.dumps({"benchmark": "edge_scaling", "machine": machine(), "graph": args.graph, "repeats": args.repeats, **scaling(Path(args.graph), cfg, args.repeats)}))


if __name__ == "__main__":
    main()
