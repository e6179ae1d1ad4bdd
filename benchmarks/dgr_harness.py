"""DGR's harness time outside the LLM: each tool call (global search, neighbourhood search,
add_to_answer) and the reading of an action reply, per call. Target: p50 <= 20 ms per tool call on
the default synthetic KB (20,000 nodes, ~117k typed edges).

    .venv/bin/python -m benchmarks.dgr_harness [--graph work/kb-synth/graph] [--questions N] [--run RUN_DIR]

No LLM is called: for each of N test questions it makes the calls an agent typically makes, from
the question text alone (no gold): search_in_graph(question, 5) and (question, 30), then from each
of the top 3 results search_in_neighborhood unfiltered, ranked by the question, and filtered to the
neighbours' commonest node type, and add_to_answer of the top 5. The indexes load first and are
timed separately (a sweep pays that once per process); BM25 scores are not memoised between
calls here, so each call pays its query's scoring. With `--run`, the tool times recorded in a
real run's traces are summarised too. Then the fallback's chain ranking (`fallback: chain`) from
the named nodes of up to `--rank-questions` questions, with `chain_order` off and at its default.
Prints one JSON line.
"""

from __future__ import annotations

import argparse
import json
import time
from collections import Counter, defaultdict
from pathlib import Path

import numpy as np

from benchmarks.machine import machine
from sagegraph.eval.evaluate import default_questions, read_questions
from sagegraph.retrieve.dgr.agent import AgentRun, read_text_actions
from sagegraph.retrieve.dgr.tools import GraphTools
from sagegraph.retrieve.graph_index import GraphIndex
from sagegraph.retrieve.registry import get_retriever
from sagegraph.runfiles import read_traces


def pct(xs: list[float]) -> dict[str, float]:
    a = np.array(xs) if xs else np.zeros(1)
    return {
        "n": len(xs),
        "p50_ms": round(float(np.percentile(a, 50)), 3),
        "p95_ms": round(float(np.percentile(a, 95)), 3),
        "max_ms": round(float(a.max()), 3),
    }


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--graph", type=Path, default=Path("work/kb-synth/graph"))
    ap.add_argument("--questions", type=int, default=100, help="test questions to script calls from")
    ap.add_argument(
        "--rank-questions", type=int, default=20, help="questions naming a node whose fallback chain ranking is timed"
    )
    ap.add_argument("--run", type=Path, help="a dgr run directory: also summarise its recorded tool times")
    args = ap.parse_args()
    t0 = time.perf_counter()
    g = GraphIndex(args.graph)
    tools = GraphTools(g)
    tools.search_in_graph("warm up", 5)
    tools.search_in_neighborhood(0)
    load_s = time.perf_counter() - t0
    qs = read_questions(default_questions(args.graph))[: args.questions]
    times: dict[str, list[float]] = defaultdict(list)

    def timed(name: str, fn, *a, **kw):
        g._memo.clear()  # every call scores its query from scratch (an agent's queries rarely repeat)
        t = time.perf_counter()
        out = fn(*a, **kw)
        times[name].append((time.perf_counter() - t) * 1000)
        return out

    for q in qs:
        timed("search_in_graph", tools.call, "search_in_graph", {"query": q.text, "size": 5})
        top = timed("search_in_graph", tools.call, "search_in_graph", {"query": q.text, "size": 30}).shown
        for r in top[:3]:
            out = timed(
                "search_in_neighborhood", tools.call, "search_in_neighborhood", {"node_index": r, "query": q.text}
            )
            commonest = Counter(g.types[o] for o in out.shown).most_common(1)
            if commonest:
                timed(
                    "search_in_neighborhood",
                    tools.call,
                    "search_in_neighborhood",
                    {"node_index": r, "query": q.text, "node_type": commonest[0][0]},
                )
        if top:
            timed(
                "add_to_answer",
                tools.call,
                "add_to_answer",
                {"answer_nodes": [{"node_index": r, "reasoning": "fits"} for r in top[:5]]},
            )
        reply = json.dumps(
            {
                "calls": [
                    {"tool": "search_in_neighborhood", "args": {"node_index": top[0] if top else 0, "query": q.text}}
                ]
            }
        )
        timed("read_actions", read_text_actions, reply)
    # The fallback's chain ranking (`fallback: chain`) for an agent that walked nowhere: the KB's
    # chains of up to three relations from the nodes the question names, read against it, with
    # `chain_order` off (dgr-10) and at the default (dgr-11, which also reads each relation against
    # bands of the question's words); fp32 vectors not memoised between calls, so each pays its encoding.
    rank_ms: dict[str, list[float]] = defaultdict(list)
    rankers = {"off": get_retriever("dgr", g, chain_order=0.0), "default": get_retriever("dgr", g)}
    named_qs = [(q, tools.linked(q.text).shown) for q in qs[: args.rank_questions]]
    g.exact_vectors(["warm up"])  # the fp32 encoder loads on first use, outside the timing
    for q, named in named_qs:
        if not named:
            continue
        for key, dgr in rankers.items():
            g._memo.clear()
            t = time.perf_counter()
            dgr.rank_chains(q.text, AgentRun(agent=0, sample=0), named)
            rank_ms[key].append((time.perf_counter() - t) * 1000)
    every = [x for k, v in times.items() if k != "read_actions" for x in v]
    out = {
        "benchmark": "dgr_harness",
        "machine": machine(),
        "graph": str(args.graph),
        "nodes": len(g),
        "questions": len(qs),
        "load_s": round(load_s, 2),
        "tool_call": pct(every),
        **{k: pct(v) for k, v in sorted(times.items())},
        "target_p50_ms": 20.0,
        "chain_rank": {f"chain_order_{k}": pct(v) for k, v in rank_ms.items()},
    }
    if args.run:
        recorded = [
            ms
            for row in read_traces(args.run / "traces.jsonl")
            for a in row.get("agents") or []
            for ms in a.get("tool_ms", [])
        ]
        out["recorded_tool_call"] = pct(recorded)
    print(json.dumps(out))


if __name__ == "__main__":
    main()
