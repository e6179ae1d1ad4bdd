"""Per-query latency on a built OTT-QA graph: p50/p95 per retriever end to end, and SAGE's expansion
step alone (one-hop on the CSR adjacency + reranking the neighbourhood).

    .venv/bin/python -m benchmarks.query_latency [--graph work/ottqa/graph] [--questions PATH] [--k 10 --k-prime 10]

Question vectors are encoded up front (as `evaluate` and sweeps do), so figures are retrieval time;
the encode time per question is reported separately. Prints one JSON line.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np

from benchmarks.machine import machine
from sagegraph.eval.evaluate import default_questions, read_questions
from sagegraph.retrieve import get_retriever
from sagegraph.retrieve.graph_index import GraphIndex


def pct(xs: list[float]) -> dict[str, float]:
    a = np.array(xs)
    return {
        "p50_ms": round(float(np.percentile(a, 50)), 3),
        "p95_ms": round(float(np.percentile(a, 95)), 3),
        "mean_ms": round(float(a.mean()), 3),
    }


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--graph", type=Path, default=Path("work/ottqa/graph"))
    ap.add_argument("--questions", type=Path)
    ap.add_argument("--k", type=int, default=10)
    ap.add_argument("--k-prime", type=int, default=10)
    args = ap.parse_args()
    g = GraphIndex(args.graph)
    qs = [q.text for q in read_questions(args.questions or default_questions(args.graph))]
    t0 = time.perf_counter()
    g.encode_queries(qs)
    encode_ms = (time.perf_counter() - t0) * 1000 / len(qs)
    _ = g.bm25, g.dense, g.adjacency  # index loading is not query latency
    out: dict = {
        "benchmark": "query_latency",
        "machine": machine(),
        "graph": str(args.graph),
        "nodes": len(g),
        "questions": len(qs),
        "k": args.k,
        "k_prime": args.k_prime,
        "query_encode_ms_batched": round(encode_ms, 3),
        "retrievers": {},
    }
    for name in ("bm25", "dense", "hybrid"):
        r = get_retriever(name, g)
        r.search(qs[0], args.k)
        lat = []
        for q in qs:
            t = time.perf_counter()
            r.search(q, args.k)
            lat.append((time.perf_counter() - t) * 1000)
        out["retrievers"][name] = pct(lat)
    sage = get_retriever("sage", g, k_prime=args.k_prime)
    end2end, expand, hood = [], [], []
    for q in qs:
        t = time.perf_counter()
        seeds = sage.seed.search(q, args.k)
        t1 = time.perf_counter()
        res = sage.expand(q, seeds, args.k_prime)
        t2 = time.perf_counter()
        end2end.append((t2 - t) * 1000)
        expand.append((t2 - t1) * 1000)
        hood.append(res.trace["neighbourhood"])
    out["retrievers"]["hybrid+sage"] = pct(end2end)
    out["retrievers"]["sage_expansion_only"] = pct(expand)
    out["neighbourhood"] = {"mean": round(float(np.mean(hood)), 1), "p95": float(np.percentile(hood, 95))}
    print(json.dumps(out))


if __name__ == "__main__":
    main()
