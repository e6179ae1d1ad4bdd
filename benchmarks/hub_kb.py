"""DGR's chain fallback on a KB with a hub: 2,001 nodes, one of them with 200,000 relations, and
questions that name it. The loopback model's every agent finishes at once without an answer, so
each question is answered by the fallback's chain walk from the named hub (`chain_reach`), the
work the reliability probe found unbounded (over 590 s a question). Run with the walk's default
bound (`metapaths.WalkBudget`) and, for comparison (`--unbounded`, its first question only), with
a bound no KB reaches, each question under `--timeout`. Not a quality figure: a scripted endpoint, not a model.
One JSON line.

    .venv/bin/python -m benchmarks.hub_kb --out /tmp/hub-kb
"""

from __future__ import annotations

import argparse
import json
import os
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from benchmarks.machine import machine

HUB_NAME = "Central Station"


def write_hub_kb(root: Path, hub_edges: int, seed: int = 0) -> Path:
    """nodes.jsonl, edges.jsonl and questions.jsonl of the hub KB (every hub relation distinct)."""
    rng = random.Random(seed)
    root.mkdir(parents=True, exist_ok=True)
    others = [(f"i{i}", "Item", f"item {i} {rng.choice(['red', 'blue', 'green'])}") for i in range(1000)]
    others += [(f"p{i}", "Person", f"person {i} {rng.choice(['Ann', 'Bo', 'Cy'])}") for i in range(1000)]
    nodes = [{"id": "hub", "type": "Hub", "fields": {"name": HUB_NAME}}] + [
        {"id": i, "type": t, "fields": {"name": n}} for i, t, n in others
    ]
    types = max(1, hub_edges // len(others) + 1)
    pairs = [(t, o) for t in range(types) for o in range(len(others))][:hub_edges]
    edges = [{"src": "hub", "dst": others[o][0], "type": f"LINK_{t}"} for t, o in pairs]
    edges += [
        {
            "src": others[rng.randrange(len(others))][0],
            "dst": others[rng.randrange(len(others))][0],
            "type": f"NEAR_{rng.randrange(5)}",
        }
        for _ in range(5000)
    ]
    questions = [
        {
            "id": f"q{t}",
            "question": f"Which items are linked to {HUB_NAME} by link {t}?",
            "answer_ids": [others[o][0] for tt, o in pairs if tt == t and others[o][1] == "Item"][:50] or ["i0"],
        }
        for t in range(5)
    ]
    for name, rows in (("nodes", nodes), ("edges", edges), ("questions", questions)):
        (root / f"{name}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return root


def build(kb: Path, out: Path) -> float:
    config = out.parent / f"{out.name}.yaml"
    config.write_text(
        json.dumps(
            {
                "name": "hub-kb",
                "out": str(out),
                "corpus": {"kind": "kb", "path": str(kb)},
                "store": {"backend": "none"},
                "runner": {"n_workers": 1},
            }
        ),
        encoding="utf-8",
    )
    t0 = time.perf_counter()
    subprocess.run([sys.executable, "-m", "sagegraph.cli", "build", str(config)], check=True, stdout=subprocess.DEVNULL)
    return time.perf_counter() - t0


def finish_at_once(body: dict) -> tuple[int, Any]:
    from sagegraph.loopback import completion

    return 200, completion(json.dumps({"calls": [{"tool": "finish", "args": {}}]}))


def run_dgr(graph: Path, questions: Path, unbounded: bool, timeout_s: float, work: Path) -> dict[str, Any]:
    from sagegraph.config import LLMConfig
    from sagegraph.eval.evaluate import evaluate_one, read_questions
    from sagegraph.eval.runner import EvalConfig
    from sagegraph.loopback import FakeOpenAI
    from sagegraph.retrieve.graph_index import GraphIndex
    from sagegraph.retrieve.kb import metapaths
    from sagegraph.retrieve.resources import open_resources

    if unbounded:
        metapaths.WalkBudget.__init__.__defaults__ = (10**12, 10**9, 0, 0, False)  # type: ignore[attr-defined]
    with FakeOpenAI(finish_at_once) as server:
        llm = LLMConfig(
            base_url=server.base_url,
            model="finish-at-once",
            cache_dir=work / "cache",
            price_input_per_mtok=0,
            price_output_per_mtok=0,
        )
        res = open_resources(GraphIndex(graph), llm)
        cfg = EvalConfig("dgr", 20, {"n_agents": 1})
        t0 = time.perf_counter()
        try:
            asked = read_questions(questions)[
                : 1 if unbounded else None
            ]  # one question shows the unbounded walk's cost
            metrics = evaluate_one(res, cfg, asked, work / cfg.key(), timeout_s=timeout_s)
        finally:
            res.close()
    return {
        "bound": "none" if unbounded else "default",
        "seconds": round(time.perf_counter() - t0, 1),
        "questions": metrics["questions"],
        "timeouts": metrics.get("timeouts", 0),
        "latency_p50_ms": metrics.get("latency_p50_ms"),
        "latency_p95_ms": metrics.get("latency_p95_ms"),
        "reach_capped_per_query": metrics.get("rate_reach_capped"),
        "fallback_answers_per_query": metrics.get("rate_fallback_answers"),
        "hit@1": metrics.get("hit@1"),
    }


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", type=Path, default=Path(tempfile.gettempdir()) / "sagegraph-hub-kb")
    ap.add_argument("--hub-edges", type=int, default=200_000)
    ap.add_argument("--timeout", type=float, default=120.0, help="seconds a question may take")
    ap.add_argument(
        "--unbounded", action="store_true", help="run once more with a bound no KB reaches (the walk before the bound)"
    )
    ap.add_argument("--only", choices=["default", "none"], help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.only:  # one configuration in this process (the unbounded one changes a class default)
        print(
            json.dumps(
                run_dgr(
                    args.out / "graph" / "graph",
                    args.out / "kb" / "questions.jsonl",
                    args.only == "none",
                    args.timeout,
                    Path(tempfile.mkdtemp()),
                )
            ),
            flush=True,
        )
        os._exit(0)  # a timed-out question's thread cannot be stopped, and the process would wait for it
    kb = write_hub_kb(args.out / "kb", args.hub_edges)
    build_s = build(kb, args.out / "graph")
    runs = []
    for bound in ["default", *(["none"] if args.unbounded else [])]:
        # A question past its timeout is scored and the run goes on, but its thread cannot be
        # stopped and the process waits for it at exit: the process is stopped a minute later.
        t0 = time.perf_counter()
        try:
            done = subprocess.run(
                [
                    sys.executable,
                    "-m",
                    "benchmarks.hub_kb",
                    "--out",
                    str(args.out),
                    "--timeout",
                    str(args.timeout),
                    "--only",
                    bound,
                ],
                check=True,
                capture_output=True,
                text=True,
                timeout=args.timeout * 5 + 60,
            )
            runs.append(json.loads(done.stdout.strip().splitlines()[-1]))
        except subprocess.TimeoutExpired:
            runs.append({"bound": bound, "finished": False, "stopped_after_s": round(time.perf_counter() - t0, 1)})
    print(
        json.dumps(
            {
                "benchmark": "hub_kb",
                "machine": machine(),
                "nodes": 2001,
                "hub_relations": args.hub_edges,
                "build_seconds": round(build_s, 1),
                "model": "loopback: every agent finishes at once (not a model)",
                "runs": runs,
            }
        )
    )


if __name__ == "__main__":
    main()
