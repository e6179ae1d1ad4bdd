"""SPARK's harness under load, with the LLM taken out of the measurement.

1. Throughput: N SPARK questions at concurrency C against a loopback endpoint that answers every
   request after a fixed delay (default 300 ms). Ideal wall time is N x delay / C; the target is
   within 1.3x of it. The endpoint answers with plans built from the synthetic questions' gold
   Cypher (the oracle), served from its own process, because the point is to run real plans through the store,
   not to score
   them: no quality number comes out of this benchmark.
2. Non-LLM time per query: the same questions again at concurrency 1 with every reply already in
   the cache (replay mode), so a query's latency is plan parsing, the read-only Cypher run and the
   hybrid ranking and fill. Target: p50 <= 20 ms on the default synthetic KB.

    .venv/bin/python -m benchmarks.llm_throughput [--graph work/kb-synth/graph] [--questions
    data/kb-synth/questions.jsonl]
        [--n 500] [--concurrency 16] [--delay 0.3]

Prints one JSON line.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import multiprocessing
import tempfile
import threading
import time
from pathlib import Path

import numpy as np

from benchmarks.machine import machine
from sagegraph.config import LLMConfig
from sagegraph.eval.evaluate import evaluate_one, read_questions
from sagegraph.eval.oracle import Oracle
from sagegraph.eval.runner import EvalConfig
from sagegraph.loopback import FakeOpenAI, delayed
from sagegraph.retrieve.graph_index import GraphIndex
from sagegraph.retrieve.resources import open_resources


def _serve(qs, delay: float, port_q, count) -> None:
    server = FakeOpenAI(delayed(Oracle(qs), delay))

    def counting(body, inner=server.responder):
        with count.get_lock():
            count.value += 1
        return inner(body)

    server.responder = counting
    with server:
        port_q.put(server.base_url)
        threading.Event().wait()


@contextlib.contextmanager
def endpoint_process(qs, delay: float):
    """The fake endpoint in its own process, as a real one would be: its threads and JSON work do
    not compete with the harness for the interpreter lock."""
    ctx = multiprocessing.get_context("spawn")
    port_q, count = ctx.Queue(), ctx.Value("i", 0)
    proc = ctx.Process(target=_serve, args=(qs, delay, port_q, count), daemon=True)
    proc.start()
    try:
        yield port_q.get(timeout=120), lambda: count.value
    finally:
        proc.terminate()
        proc.join(10)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--graph", type=Path, default=Path("work/kb-synth/graph"))
    ap.add_argument("--questions", type=Path, default=Path("data/kb-synth/questions.jsonl"))
    ap.add_argument("--n", type=int, default=500)
    ap.add_argument("--concurrency", type=int, default=16)
    ap.add_argument("--delay", type=float, default=0.3)
    args = ap.parse_args()
    qs = read_questions(args.questions)[: args.n]
    g = GraphIndex(args.graph)
    g.encode_queries([q.text for q in qs])
    _ = g.bm25, g.dense  # index loading is not query time
    cfg = EvalConfig("spark", k=20, prompt="spark-1")
    with tempfile.TemporaryDirectory() as tmp, endpoint_process(qs, args.delay) as (base_url, served):
        llm = LLMConfig(
            base_url=base_url,
            model="loopback-fixed-delay",
            concurrency=args.concurrency,
            cache_dir=Path(tmp) / "cache",
            price_input_per_mtok=0,
            price_output_per_mtok=0,
        )
        res = open_resources(g, llm)
        try:
            res.store.introspect()  # the store is opened, the schema card built and the openai
            _ = res.llm.client  # package imported (2.4 s, once per process) before the clock starts
            t0 = time.perf_counter()
            live = evaluate_one(res, cfg, qs, Path(tmp) / "live", concurrency=args.concurrency)
            wall = time.perf_counter() - t0
            requests = served()
            llm.cache_mode = "replay"
            cached = evaluate_one(res, cfg, qs, Path(tmp) / "cached", concurrency=1)
            lat = np.array(
                [
                    json.loads(line)["latency_ms"]
                    for line in (Path(tmp) / "cached" / "per_query.jsonl").read_text().splitlines()
                ]
            )
        finally:
            res.close()
    ideal = len(qs) * args.delay / args.concurrency
    out = {
        "benchmark": "llm_throughput",
        "machine": machine(),
        "graph": str(args.graph),
        "nodes": len(g),
        "questions": len(qs),
        "endpoint": f"loopback, fixed {args.delay * 1000:.0f} ms per request (oracle plans: not a quality measurement)",
        "concurrency": args.concurrency,
        "requests": requests,
        "wall_s": round(wall, 2),
        "ideal_s": round(ideal, 2),
        "ratio_to_ideal": round(wall / ideal, 3),
        "target_ratio": 1.3,
        "throughput_ok": wall <= 1.3 * ideal,
        "non_llm_ms": {
            "p50": round(float(np.percentile(lat, 50)), 2),
            "p95": round(float(np.percentile(lat, 95)), 2),
            "mean": round(float(lat.mean()), 2),
        },
        "non_llm_target_p50_ms": 20,
        "non_llm_ok": float(np.percentile(lat, 50)) <= 20,
        "replay_new_calls": int(cached["llm_calls"] - cached["llm_cached"]),
        "fallback_rate": live.get("rate_fallback"),
    }
    print(json.dumps(out))


if __name__ == "__main__":
    main()
