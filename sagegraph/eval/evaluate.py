"""Evaluate retriever configurations on a built graph; a group of SAGE configurations sharing
(seed retriever, k, alpha) computes its seeds once per question and reuses them across k'."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

from sagegraph.corpus.jsonl import ErrorPolicy
from sagegraph.corpus.ottqa import load_questions
from sagegraph.corpus.records import Question
from sagegraph.errors import SageGraphError
from sagegraph.eval.runner import EvalConfig, run_eval
from sagegraph.retrieve.base import Retriever, get_retriever
from sagegraph.retrieve.graph_index import GraphIndex
from sagegraph.retrieve.sage import SageRetriever


def make_retriever(g: GraphIndex, cfg: EvalConfig) -> Retriever:
    if cfg.retriever == "sage":
        return get_retriever("sage", g, k_prime=cfg.k_prime, seed_retriever=cfg.seed_retriever, alpha=cfg.alpha, policy=cfg.policy)
    return get_retriever(cfg.retriever, g, alpha=cfg.alpha)


def default_questions(graph_dir: Path) -> Path:
    manifest = Path(graph_dir) / "manifest.json"
    if manifest.exists():
        from sagegraph.config import CorpusConfig

        corpus = CorpusConfig.model_validate(json.loads(manifest.read_text())["config"]["corpus"])
        if corpus.questions:
            return corpus.questions
        if corpus.kind == "ottqa":
            return corpus.resolved_path() / "questions.jsonl"  # the default ../shared copy when path is unset
    raise SageGraphError(f"{graph_dir}: no questions file known for this graph; pass --questions PATH")


def read_questions(path: Path) -> list[Question]:
    return load_questions(Path(path), ErrorPolicy("raise"))


def evaluate_one(g: GraphIndex, cfg: EvalConfig, questions: list[Question], out_dir: Path) -> dict[str, Any]:
    retriever = make_retriever(g, cfg)
    g.encode_queries([q.text for q in questions])
    return run_eval(g, questions, cfg, lambda q: retriever.search(q.text, cfg.k), out_dir)


def evaluate_group(g: GraphIndex, cfgs: list[EvalConfig], questions: list[Question], out_root: Path) -> list[dict[str, Any]]:
    """Configurations that differ only in k' (same seed retriever, k, alpha, policy): one seed
    retrieval per question, memoised, then one cheap expansion per k'."""
    base = cfgs[0]
    if any((c.retriever, c.seed_retriever, c.k, c.alpha, c.policy, c.edges) != (base.retriever, base.seed_retriever, base.k, base.alpha, base.policy, base.edges) for c in cfgs):
        raise ValueError("evaluate_group needs configurations that differ only in k'")
    g.encode_queries([q.text for q in questions])
    if base.retriever != "sage":
        return [evaluate_one(g, c, questions, out_root / c.key()) for c in cfgs]
    sage = make_retriever(g, base)
    assert isinstance(sage, SageRetriever)
    seeds: dict[str, tuple[Any, float]] = {}

    def search(q: Question, k_prime: int):
        if q.id in seeds:
            r, seed_ms = seeds[q.id]
            out = sage.expand(q.text, r, k_prime)
            out.trace["reused_seed_ms"] = seed_ms  # latency reports what an uncached query would cost
            return out
        t0 = time.perf_counter()
        r = sage.seed.search(q.text, base.k)
        seeds[q.id] = (r, (time.perf_counter() - t0) * 1000)
        return sage.expand(q.text, r, k_prime)

    return [run_eval(g, questions, c, lambda q, c=c: search(q, c.k_prime), out_root / c.key()) for c in cfgs]
