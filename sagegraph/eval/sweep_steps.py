"""A sweep's two steps, from paths and records (what a Dask task receives, or a sweep run in one
process passes): prepare what every configuration reads, then evaluate one group of
configurations. `report` takes the lines a person follows the run by."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from sagegraph.config import LLMConfig
from sagegraph.eval.evaluate import evaluate_group, read_questions
from sagegraph.eval.runner import EvalConfig
from sagegraph.retrieve.graph_index import GraphIndex, open_graph
from sagegraph.retrieve.resources import open_resources

Report = Callable[[str], None]


def prepare(graph_dir: str, questions_path: str, out: str, cfgs: Sequence[dict[str, Any]], report: Report) -> str:
    """Build the BM25 index on disk, what each configuration's retriever reads beside the graph
    (`Retriever.prepare`), and encode every question once, before the fan-out. The question
    vectors' file is returned."""
    g = GraphIndex(Path(graph_dir))
    _ = g.bm25
    built: set[str] = set()
    for c in map(EvalConfig.from_record, cfgs):
        built.update(c.retriever_class.prepare(g, c.validated()))
    qs = read_questions(Path(questions_path))
    path = g.save_query_vectors([q.text for q in qs], Path(out) / "question_vectors.npz")
    report(f"prepared {len(g)} nodes, {len(qs)} questions" + (f", {', '.join(sorted(built))}" if built else ""))
    return str(path)


def evaluate_configs(
    graph_dir: str,
    questions_path: str,
    qvec_path: str,
    cfgs: list[dict[str, Any]],
    out_root: str,
    llm: dict[str, Any] | None,
    concurrency: int,
    timeout_s: float | None,
    report: Report,
    progress: Report,
) -> list[dict[str, Any]]:
    """One group of configurations (`eval.evaluate.groups`) on the graph, its questions' vectors
    read from `prepare`'s file; each configuration's record and metrics. `progress`: the lines of
    a long run's progress."""
    g = open_graph(graph_dir)
    g.load_query_vectors(Path(qvec_path))
    configs = [EvalConfig.from_record(c) for c in cfgs]
    res = open_resources(g, LLMConfig.model_validate(llm) if llm else None)
    try:
        results = evaluate_group(
            res, configs, read_questions(Path(questions_path)), Path(out_root), concurrency, timeout_s, report=progress
        )
    finally:
        res.close()
    for c, m in zip(configs, results):
        recall = m[f"recall@{c.total}"]
        report(f"{c.label()}: recall@{c.total}={recall:.4f} mrr={m['mrr']:.4f} ({int(m['questions'])} questions)")
    return [{"config": c.record(), "metrics": m} for c, m in zip(configs, results)]
