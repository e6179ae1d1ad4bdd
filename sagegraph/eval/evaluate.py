"""Evaluate retriever configurations on a built graph; a group of SAGE configurations sharing
(seed retriever, k, alpha) computes its seeds once per question and reuses them across k'."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from sagegraph.corpus.jsonl import ErrorPolicy
from sagegraph.corpus.questions import load_questions
from sagegraph.corpus.records import Question
from sagegraph.errors import SageGraphError
from sagegraph.eval.runner import EvalConfig, run_eval
from sagegraph.retrieve.base import Resources, Retriever
from sagegraph.retrieve.registry import get_retriever, retriever_class
from sagegraph.retrieve.graph_index import GraphIndex
from sagegraph.retrieve.sage import SageRetriever

AXES = ("k_prime", "seed_retriever", "alpha", "policy")  # EvalConfig fields a retriever takes when its Params has them


def retriever_params(cfg: EvalConfig) -> dict[str, Any]:
    """The sweep axes this retriever declares, then its own `params` (which win)."""
    cls = retriever_class(cfg.retriever)
    fields = cls.Params.model_fields
    axes = AXES if cls.shared_axes is None else cls.shared_axes
    return {**{a: getattr(cfg, a) for a in axes if a in fields}, **cfg.params}


def prompt_version(cfg: EvalConfig) -> str:
    """The prompt version of the retriever, or of sage's seed retriever: part of the run key."""
    own = retriever_class(cfg.retriever).prompt_version
    return own or (retriever_class(cfg.seed_retriever).prompt_version if cfg.retriever == "sage" else "")


def make_retriever(res: Resources | GraphIndex, cfg: EvalConfig) -> Retriever:
    return get_retriever(cfg.retriever, res, **retriever_params(cfg))


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


def _resources(x: Resources | GraphIndex) -> Resources:
    return x if isinstance(x, Resources) else Resources(x)


def needs_llm(cfg: EvalConfig) -> bool:
    return retriever_class(cfg.retriever).uses_llm or (cfg.retriever == "sage" and retriever_class(cfg.seed_retriever).uses_llm)


def provenance(res: Resources, cfg: EvalConfig) -> dict[str, Any]:
    """What config.json records beside the configuration: which model answered, where, and the
    reply cache that holds its replies (`sagegraph llm export` reads it)."""
    if not res.has_llm or not needs_llm(cfg):
        return {}
    llm = res.llm
    return {"llm": {"model": llm.cfg.model, "base_url": llm.base_url, "temperature": llm.cfg.temperature, "cache": str(llm.cache.path)}}


def evaluate_one(res: Resources | GraphIndex, cfg: EvalConfig, questions: list[Question], out_dir: Path,
                 concurrency: int = 1, timeout_s: float | None = None, report: Callable[[str], None] | None = None) -> dict[str, Any]:
    res = _resources(res)
    retriever = make_retriever(res, cfg)
    res.graph.encode_queries([q.text for q in questions])
    return run_eval(res.graph, questions, cfg, lambda q: retriever.search(q.text, cfg.k), out_dir, concurrency, timeout_s, provenance(res, cfg), report)


def group_key(c: EvalConfig) -> tuple:
    """Configurations with equal keys share their seeds: they differ in k' alone."""
    return (c.retriever, c.seed_retriever, c.k, c.alpha, c.policy, c.edges, json.dumps(c.params, sort_keys=True), c.prompt)


def evaluate_group(res: Resources | GraphIndex, cfgs: list[EvalConfig], questions: list[Question], out_root: Path,
                   concurrency: int = 1, timeout_s: float | None = None, report: Callable[[str], None] | None = None) -> list[dict[str, Any]]:
    """Configurations that differ only in k' (same seed retriever, k, alpha, policy, params): one
    seed retrieval per question, memoised, then one cheap expansion per k'."""
    res = _resources(res)
    g = res.graph
    base = cfgs[0]
    if any(group_key(c) != group_key(base) for c in cfgs):
        raise ValueError("evaluate_group needs configurations that differ only in k'")
    g.encode_queries([q.text for q in questions])
    if base.retriever != "sage":
        return [evaluate_one(res, c, questions, out_root / c.key(), concurrency, timeout_s, report) for c in cfgs]
    sage = make_retriever(res, base)
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

    return [run_eval(g, questions, c, lambda q, c=c: search(q, c.k_prime), out_root / c.key(), concurrency, timeout_s, provenance(res, c), report) for c in cfgs]
