"""Edge construction on a quarter of a built graph's nodes against all of them: the issue's
"4x larger input must take <= 4.5x the time" check, without rebuilding anything.

    .venv/bin/python -m benchmarks.edge_scaling [--graph work/bench-ottqa/graph] [--repeats 5] [--threads N]

Times candidates + signals + pruning + the edge table (extras included) for every modality pair,
i.e. the edge stage without its file I/O, and prints one JSON line. The quarter is whole sources
(their chunks stay together, as same-source pairs are filtered), drawn per modality until each
holds a quarter of that modality's chunks, so the input grows 4x in every modality alike. It runs
with the threads a build gives each modality pair (runner.threads_per_worker: each pair is one
task on a Dask worker), unless --threads says otherwise. Quarter
and full runs alternate, so a machine whose speed drifts (this one's does, by up to 40% between
runs) slows both sides of the ratio alike. The output itself grows faster than the input (pairs
that share an entity grow with the square of the corpus until the df cap; neighbour lists overlap
less in a larger corpus), so candidates and edges are reported beside the seconds.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from collections import Counter
from pathlib import Path

import numpy as np

from benchmarks.machine import machine


def quarter_sources(nodes, fraction: float, seed: int = 0) -> set[str]:
    """Whole sources, shuffled per modality, taken until they hold `fraction` of its chunks."""
    rng = np.random.default_rng(seed)
    chosen: set[str] = set()
    for modality in sorted({n.modality for n in nodes}):
        sizes = Counter(n.source_id for n in nodes if n.modality == modality)
        names = sorted(sizes)
        order = [names[i] for i in rng.permutation(len(names))]
        held = np.cumsum([sizes[s] for s in order])
        chosen.update(order[: int(np.searchsorted(held, fraction * held[-1])) + 1])
    return chosen


def construct(sub, vec, params) -> tuple[float, int, int]:
    """One edge construction over the given nodes: (seconds, candidates, edges)."""
    from sagegraph.construct import edges as edge_construction
    from sagegraph.construct.edge_records import extra_for, pair_edge_table
    from sagegraph.construct.fields import entity_set
    from sagegraph.construct.stages import present_pairs

    t0 = time.perf_counter()
    modality = np.array([n.modality for n in sub])
    source = np.array([n.source_id for n in sub])
    Emat, names = edge_construction.entity_matrix([entity_set(n) for n in sub])
    candidates = edges = 0
    for pair in present_pairs(set(modality.tolist())):
        res = edge_construction.similarity_pair(pair, modality, source, vec, Emat, params)
        candidates += res.n_candidates
        edges += pair_edge_table(res, [n.id for n in sub], Emat, names, extra_for(pair, sub)).num_rows
    return time.perf_counter() - t0, candidates, edges


def use_threads(n: int) -> None:
    """The thread count the pair tasks see in a build's Dask workers (OMP_NUM_THREADS there)."""
    import faiss
    import torch

    torch.set_num_threads(n)
    faiss.omp_set_num_threads(n)


def scaling(graph_dir: Path, cfg, repeats: int, seed: int = 0, threads: int | None = None) -> dict:
    from sagegraph.construct.stages import edge_params, load_graph_inputs

    threads = threads or cfg.runner.threads_per_worker
    use_threads(threads)

    nodes, vectors = load_graph_inputs(graph_dir)
    params = edge_params(cfg)
    chosen = quarter_sources(nodes, 0.25, seed)
    idx = np.array([i for i, n in enumerate(nodes) if n.source_id in chosen])
    sides = {
        "quarter": ([nodes[i] for i in idx], {f: np.asarray(v)[idx] for f, v in vectors.items()}),
        "full": (nodes, {f: np.asarray(v) for f, v in vectors.items()}),
    }
    runs: dict[str, list[tuple[float, int, int]]] = {"quarter": [], "full": []}
    construct(*sides["quarter"], params)  # untimed: the first call pays library and thread-pool start-up
    for _ in range(repeats):
        for side, (sub, vec) in sides.items():
            runs[side].append(construct(sub, vec, params))
    out = {}
    for side, (sub, _) in sides.items():
        seconds = [r[0] for r in runs[side]]
        by_modality = Counter(n.modality for n in sub)
        out[side] = {
            "sources": len({n.source_id for n in sub}),
            "nodes": len(sub),
            "nodes_by_modality": dict(sorted(by_modality.items())),
            "seconds": statistics.median(seconds),
            "seconds_all": [round(x, 3) for x in seconds],
            "candidates": runs[side][-1][1],
            "edges": runs[side][-1][2],
        }
    q, f = out["quarter"], out["full"]
    ratio = f["seconds"] / max(q["seconds"], 1e-9)  # a tiny graph's quarter can take ~0 s
    paired = [fs / max(qs, 1e-9) for qs, fs in zip(q["seconds_all"], f["seconds_all"])]
    return {
        "threads": threads,
        "quarter": {**q, "seconds": round(q["seconds"], 3)},
        "full": {**f, "seconds": round(f["seconds"], 3)},
        "input_ratio": round(f["nodes"] / max(1, q["nodes"]), 3),
        "ratio_4x": round(ratio, 2),
        "ratio_per_repeat": [round(x, 2) for x in paired],
        "candidates_ratio": round(f["candidates"] / max(1, q["candidates"]), 2),
        "edges_ratio": round(f["edges"] / max(1, q["edges"]), 2),
        "seconds_per_candidate_ratio": round(ratio * q["candidates"] / max(1, f["candidates"]), 2),
    }


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--config", default="conf/ottqa.yaml")
    ap.add_argument("--graph", default="work/bench-ottqa/graph")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--threads", type=int, help="default: the config's runner.threads_per_worker, as in a build")
    args = ap.parse_args()
    from sagegraph.config import load_config

    cfg = load_config(args.config, metadata="heuristic")
    print(
        json.dumps(
            {
                "benchmark": "edge_scaling",
                "machine": machine(),
                "graph": args.graph,
                "repeats": args.repeats,
                **scaling(Path(args.graph), cfg, args.repeats, threads=args.threads),
            }
        )
    )


if __name__ == "__main__":
    main()
