"""Every question under hostile model output: each LLM retriever (its default and the paper's
settings) over a KB's questions with a loopback endpoint that answers every request with a broken
or hostile reply, chosen by the request's hash (so a rerun is the same run): no JSON, broken JSON,
Cypher that deletes, reads files or creates users, a query that walks the whole graph, invented
tools and node indices, tool calls with unreadable arguments, a reply cut at the token limit, no
choice at all, a refusal, a 200,000-character reply.

What it checks: no question raises out of a retriever (`errors` 0: a question's exception would be
recorded and counted, not raised, so this counts them), each method falls back as it says it does,
and the store is unchanged (its node and edge counts before and after). Not a quality figure: a
test of the harness on every question, not only the tests' hand-made ones. One JSON line.

    .venv/bin/python -m benchmarks.hostile_replies --graph work/kb-synth/graph --questions
    data/kb-synth/questions-test.jsonl
    .venv/bin/python -m benchmarks.hostile_replies --graph work/kb-pathquestion/graph --split test
"""

from __future__ import annotations

import argparse
import hashlib
import json
import random
import tempfile
import time
from pathlib import Path
from typing import Any

from benchmarks.machine import machine
from sagegraph.config import LLMConfig
from sagegraph.eval.evaluate import default_questions, evaluate_one, read_questions
from sagegraph.eval.runner import EvalConfig, failed_questions
from sagegraph.loopback import FakeOpenAI, completion
from sagegraph.retrieve.graph_index import GraphIndex
from sagegraph.retrieve.resources import open_resources

# Each LLM method at its default and at the paper's settings (the README's rows).
CONFIGS: list[tuple[str, dict[str, Any]]] = [
    ("spark", {}),
    (
        "spark",
        {
            "card_examples": False,
            "link": False,
            "ground": False,
            "card_similarity": True,
            "semantic_text": False,
            "named_last": False,
        },
    ),
    ("af", {"reranker": "none"}),
    ("af", {"reranker": "none", "ground": False, "unnamed": "resolve"}),
    ("graphraft", {}),
    ("graphraft", {"selector": "grammar", "three_hop": False, "unnamed": "resolve"}),
    ("graphraft", {"selector": "listed", "three_hop": False}),
    ("dgr", {"n_agents": 1, "t_max": 10}),
    (
        "dgr",
        {
            "n_agents": 1,
            "t_max": 10,
            "link": False,
            "relation_kinds": False,
            "relax_filters": False,
            "read_before_finish": False,
            "fallback": "last",
        },
    ),
]


def _cut(text: str) -> dict:
    body = completion(text)
    body["choices"][0]["finish_reason"] = "length"
    return body


def hostile_replies(rng: random.Random) -> list[tuple[int, Any]]:
    """The menu one request draws from; the numbers in it are drawn too, so indices and names vary."""
    big = rng.randint(10**6, 10**12)
    return [
        (200, completion("")),
        (200, completion("I cannot help with that. {{{ [ ")),
        (200, completion('{"cypher": "MATCH (n) DETACH DELETE n"}')),
        (200, completion('{"cypher": "LOAD CSV FROM \'file:///etc/passwd\' AS row RETURN row"}')),
        (200, completion("{\"cypher\": \"CALL dbms.security.createUser('x', 'y', false)\"}")),
        (200, completion("MATCH (p:Person {name: 'O'Neill'}) LOAD CSV FROM 'rows.csv' AS r RETURN r")),
        (200, completion('{"cypher": "MATCH (a)-[*1..12]-(b) RETURN a, b"}')),
        (
            200,
            completion('{"cypher": "MATCH (x:Nope)-[:NOT_A_RELATION]->(y) RETURN y.id AS id", "target_type": "Nope"}'),
        ),
        (
            200,
            completion(
                json.dumps(
                    {
                        "calls": [
                            {
                                "tool": "search_in_neighborhood",
                                "args": {"node_index": big, "edge_type": "[:X]->", "node_type": None},
                            },
                            {
                                "tool": "add_to_answer",
                                "args": {
                                    "answer_nodes": [{"node_index": -5}, {"node_index": "abc"}, {"node_index": big}]
                                },
                            },
                            {"tool": "drop_database", "args": {}},
                            {"tool": "search_in_graph", "args": {"query": "", "size": -3}},
                        ]
                    }
                )
            ),
        ),
        (
            200,
            completion(
                json.dumps(
                    {
                        "choices": [999, -1, "a", None],
                        "choice": big,
                        "conditions": [{"field": "x\u0000", "op": "DROP"}],
                        "plan": None,
                        "answer": [{"node_index": big}],
                    }
                )
            ),
        ),
        (200, _cut('{"calls": [{"tool": "search_in_graph", "args": {"query": "a')),
        (
            200,
            {
                "id": "x",
                "object": "chat.completion",
                "created": 0,
                "model": "m",
                "choices": [],
                "usage": {"prompt_tokens": 1, "completion_tokens": 0, "total_tokens": 1},
            },
        ),
        (
            200,
            completion(
                "",
                tool_calls=[
                    {"name": "search_in_graph", "arguments": "{not json"},
                    {"name": "nonexistent", "arguments": "{}"},
                    {"name": "add_to_answer", "arguments": json.dumps({"answer_nodes": "all of them"})},
                ],
            ),
        ),
        (200, completion("x" * 200_000)),
        (
            400,
            {
                "error": {
                    "message": "This model's maximum context length is 4096 tokens",
                    "type": "invalid_request_error",
                }
            },
        ),
    ]


def responder(body: dict) -> tuple[int, Any]:
    seed = hashlib.sha256(json.dumps(body, sort_keys=True).encode()).hexdigest()
    rng = random.Random(seed)
    return rng.choice(hostile_replies(rng))


def run_configs(res, questions, out_dir: Path, timeout_s: float) -> list[dict[str, Any]]:
    """Each of CONFIGS over the questions on `res` (whose LLM is the hostile endpoint): its errors,
    timeouts, seconds, calls and the rates of its counters that were not zero."""
    rows = []
    for name, params in CONFIGS:
        cfg = EvalConfig(name, 20, params)
        t0 = time.perf_counter()
        metrics = evaluate_one(res, cfg, questions, out_dir / cfg.key(), timeout_s=timeout_s)
        rates = {
            k: round(v, 3) for k, v in metrics.items() if k.startswith("rate_") and isinstance(v, (int, float)) and v
        }
        rows.append(
            {
                "config": cfg.label(),
                "questions": metrics["questions"],
                "errors": failed_questions(metrics),
                "timeouts": metrics.get("timeouts", 0),
                "seconds": round(time.perf_counter() - t0, 1),
                "llm_calls_per_query": metrics.get("llm_calls_per_query"),
                "rates": rates,
            }
        )
    return rows


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--graph", type=Path, required=True)
    ap.add_argument("--questions", type=Path)
    ap.add_argument("--split", help="only questions of this split")
    ap.add_argument("--limit", type=int, help="the first N questions (after --split)")
    ap.add_argument(
        "--timeout", type=float, default=120.0, help="seconds a question may take (a timeout is counted apart)"
    )
    args = ap.parse_args()
    g = GraphIndex(args.graph)
    questions = read_questions(args.questions or default_questions(args.graph))
    if args.split:
        questions = [q for q in questions if q.meta.get("split") == args.split]
    questions = questions[: args.limit] if args.limit else questions
    out: dict[str, Any] = {
        "benchmark": "hostile_replies",
        "machine": machine(),
        "graph": str(args.graph),
        "questions": len(questions),
        "model": "hostile loopback (not a model: every reply broken or hostile)",
        "configurations": [],
    }
    with FakeOpenAI(responder) as server, tempfile.TemporaryDirectory() as tmp:
        llm = LLMConfig(
            base_url=server.base_url,
            model="hostile",
            max_retries=1,
            cache_dir=Path(tmp) / "cache",
            timeout_s=30,
            price_input_per_mtok=0,
            price_output_per_mtok=0,
        )
        res = open_resources(g, llm)
        try:
            before = (res.store.count_nodes(), res.store.count_edges())
            out["configurations"] = run_configs(res, questions, Path(tmp), args.timeout)
            after = (res.store.count_nodes(), res.store.count_edges())
        finally:
            res.close()
    out["store_unchanged"] = before == after
    out["store_nodes_edges"] = list(after)
    out["errors"] = sum(c["errors"] for c in out["configurations"])
    out["requests"] = len(server.requests)
    print(json.dumps(out))


if __name__ == "__main__":
    main()
