"""AF-Retriever's non-LLM steps per query (parse, symbol candidates, grounding, VSS keep and fill)
on a built KB graph: p50 and p95, and each step's share. Target: p50 <= 50 ms on the default
synthetic KB (the paper's steps take ~0.2 s median per query on PRIME, its Table 8).

    .venv/bin/python -m benchmarks.af_steps [--graph work/kb-synth/graph] [--replies RUN_DIR]

The two LLM replies each question needs come either from the questions' gold (target type and
gold Cypher, the ORACLE replies: every question then grounds, the heavier case) or, with
`--replies`, from a run directory's traces.jsonl (what a real model wrote). No LLM is called.
Question vectors are encoded up front, as evaluate and sweeps do; the constants' names are encoded
inside the step (one batched encoder call per query), and a second pass reports the steps with
those names already encoded, i.e. without any model time. Prints one JSON line.
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
from sagegraph.retrieve.af.parse import return_names
from sagegraph.retrieve.graph_index import GraphIndex


def pct(xs: list[float]) -> dict[str, float]:
    a = np.array(xs)
    return {
        "p50_ms": round(float(np.percentile(a, 50)), 3),
        "p95_ms": round(float(np.percentile(a, 95)), 3),
        "mean_ms": round(float(a.mean()), 3),
    }


def oracle_replies(questions) -> list[tuple[str, str | None, str]]:
    return [
        (q.text, q.meta.get("target_type"), return_names(q.meta.get("gold_cypher") or ""))
        for q in questions
        if q.meta.get("gold_cypher")
    ]


def recorded_replies(run_dir: Path) -> list[tuple[str, str | None, str]]:
    out = []
    for line in (run_dir / "traces.jsonl").read_text().splitlines():
        t = json.loads(line)
        steps = t.get("steps") or {}
        if "cypher" in steps:
            out.append((t["question"], steps.get("target_type"), steps.get("cypher") or ""))
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--graph", type=Path, default=Path("work/kb-synth/graph"))
    ap.add_argument("--questions", type=Path, help="default: the graph's KB questions (test split)")
    ap.add_argument(
        "--replies", type=Path, help="a run directory of `af`: use its recorded model replies instead of the oracle's"
    )
    ap.add_argument("--k", type=int, default=20)
    ap.add_argument("--l-max", type=int, default=100)
    args = ap.parse_args()
    g = GraphIndex(args.graph)
    if args.replies:
        items, source = recorded_replies(args.replies), f"recorded replies in {args.replies}"
    else:
        qs = [
            q
            for q in read_questions(args.questions or default_questions(args.graph))
            if q.meta.get("split", "test") == "test"
        ]
        items, source = oracle_replies(qs), "ORACLE replies (gold target type and gold Cypher)"
    g.encode_queries([q for q, _, _ in items])
    af = get_retriever("af", g, reranker="none", l_max=args.l_max)
    t0 = time.perf_counter()
    _ = af.view.fields, af.view.name_index, af.view.patterns, g.vectors, g.name_vectors, af.view._by_relation
    load_s = time.perf_counter() - t0
    af.steps_3_to_7(items[0][0], args.k, items[0][1], items[0][2], {}, {})  # column caches warm
    lat, grounded = [], 0
    for q, y_type, cypher in items:  # first pass: each query encodes its names (one batched call)
        t = time.perf_counter()
        out = af.steps_3_to_7(q, args.k, y_type, cypher, {}, {})
        lat.append((time.perf_counter() - t) * 1000)
        grounded += bool(out.grounded)
    warm = []
    for q, y_type, cypher in items:  # second pass: names memoised, so no model time at all
        t = time.perf_counter()
        af.steps_3_to_7(q, args.k, y_type, cypher, {}, {})
        warm.append((time.perf_counter() - t) * 1000)
    print(
        json.dumps(
            {
                "benchmark": "af_steps",
                "machine": machine(),
                "graph": str(args.graph),
                "nodes": len(g),
                "questions": len(items),
                "replies": source,
                "k": args.k,
                "l_max": args.l_max,
                "grounded_share": round(grounded / max(1, len(items)), 3),
                "load_s": round(load_s, 2),
                "steps_3_to_7": pct(lat),
                "steps_3_to_7_names_preencoded": pct(warm),
                "target_p50_ms": 50,
            }
        )
    )


if __name__ == "__main__":
    main()
