"""Prefect tasks for evaluation and sweeps; logic lives in sagegraph.eval."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from prefect import task
from prefect.cache_policies import NO_CACHE

from sagegraph.config import LLMConfig
from sagegraph.eval.evaluate import evaluate_group, read_questions
from sagegraph.eval.runner import EvalConfig
from sagegraph.retrieve.graph_index import GraphIndex, open_graph
from sagegraph.retrieve.resources import open_resources
from sagegraph.tasks.console import run_log

_opts: dict[str, Any] = {"cache_policy": NO_CACHE, "persist_result": False}


@task(name="prepare-retrieval", **_opts)
def prepare(graph_dir: str, questions_path: str, out: str, cfgs: Sequence[dict[str, Any]] = ()) -> str:
    """Build the BM25 index on disk, what each configuration's retriever reads beside the graph
    (`Retriever.prepare`), and encode every question once, before the fan-out."""
    g = GraphIndex(Path(graph_dir))
    _ = g.bm25
    built: set[str] = set()
    for c in map(EvalConfig.from_record, cfgs):
        built.update(c.retriever_class.prepare(g, c.validated()))
    qs = read_questions(Path(questions_path))
    path = g.save_query_vectors([q.text for q in qs], Path(out) / "question_vectors.npz")
    run_log().info(
        "prepared %d nodes, %d questions%s", len(g), len(qs), f", {', '.join(sorted(built))}" if built else ""
    )
    return str(path)


@task(name="evaluate-group", **_opts)
def evaluate_configs(
    graph_dir: str,
    questions_path: str,
    qvec_path: str,
    cfgs: list[dict[str, Any]],
    out_root: str,
    llm: dict[str, Any] | None = None,
    concurrency: int = 1,
    timeout_s: float | None = None,
) -> list[dict[str, Any]]:
    g = open_graph(graph_dir)
    g.load_query_vectors(Path(qvec_path))
    configs = [EvalConfig.from_record(c) for c in cfgs]
    res = open_resources(g, LLMConfig.model_validate(llm) if llm else None)
    try:
        results = evaluate_group(
            res,
            configs,
            read_questions(Path(questions_path)),
            Path(out_root),
            concurrency,
            timeout_s,
            report=run_log().progress,
        )  # progress of long runs, in the flow's log and UI
    finally:
        res.close()
    for c, m in zip(configs, results):
        run_log().info(
            "%s: recall@%d=%.4f mrr=%.4f (%d questions)",
            c.label(),
            c.total,
            m[f"recall@{c.total}"],
            m["mrr"],
            m["questions"],
        )
    return [{"config": c.record(), "metrics": m} for c, m in zip(configs, results)]
