"""Evaluate retriever configurations on a built graph. Configurations whose retriever starts
from another's results (`ExpandsSeeds`, e.g. SAGE) and whose seeds are the same configuration
compute those seeds once per question and reuse them."""

from __future__ import annotations

import functools
import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from sagegraph.corpus.jsonl import ErrorPolicy
from sagegraph.corpus.questions import load_questions
from sagegraph.corpus.records import Question
from sagegraph.errors import SageGraphError
from sagegraph.eval.runner import EvalConfig, adopt_legacy_run, run_eval
from sagegraph.retrieve.base import ExpandsSeeds, Resources, Retrieval, Retriever
from sagegraph.retrieve.graph_index import GraphIndex
from sagegraph.retrieve.registry import get_retriever


def prompt_version(cfg: EvalConfig) -> str:
    """The prompt version behind the configuration's replies: part of its run key."""
    return cfg.retriever_class.prompt_for(cfg.validated())


def make_retriever(res: Resources | GraphIndex, cfg: EvalConfig) -> Retriever:
    return get_retriever(cfg.retriever, res, **cfg.params)


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


def provenance(res: Resources, cfg: EvalConfig) -> dict[str, Any]:
    """What config.json records beside the configuration: which model answered, where, and the
    reply cache that holds its replies (`sagegraph llm export` reads it)."""
    if not res.has_llm or not cfg.needs_llm():
        return {}
    llm = res.llm
    return {
        "llm": {
            "model": llm.cfg.model,
            "base_url": llm.base_url,
            "temperature": llm.cfg.temperature,
            "cache": str(llm.cache.path),
        }
    }


def evaluate_one(
    res: Resources | GraphIndex,
    cfg: EvalConfig,
    questions: list[Question],
    out_dir: Path,
    concurrency: int = 1,
    timeout_s: float | None = None,
    report: Callable[[str], None] | None = None,
) -> dict[str, Any]:
    res = _resources(res)
    retriever = make_retriever(res, cfg)
    res.graph.encode_queries([q.text for q in questions])
    return run_eval(
        res.graph,
        questions,
        cfg,
        lambda q: retriever.search(q.text, cfg.k),
        out_dir,
        concurrency,
        timeout_s,
        provenance(res, cfg),
        report,
    )


def seed_config_of(c: EvalConfig) -> tuple[str, int, dict[str, Any]] | None:
    """(retriever, k, parameters) of the configuration a seed-expanding retriever (`ExpandsSeeds`)
    starts from; None for any other retriever."""
    cls = c.retriever_class
    return cls.seed_config(c.k, c.validated()) if issubclass(cls, ExpandsSeeds) else None


def group_key(c: EvalConfig) -> tuple:
    """Configurations with equal keys share their seeds: those of a seed-expanding retriever whose
    seed configuration is the same (SAGE's k' and policy axes); every other is a group of one."""
    if (seed := seed_config_of(c)) is None:
        return ("config", c.key())
    name, k, params = seed
    return ("seeds", c.retriever, name, k, json.dumps(params, sort_keys=True, default=str), c.edges, c.prompt)


def evaluate_group(
    res: Resources | GraphIndex,
    cfgs: list[EvalConfig],
    questions: list[Question],
    out_root: Path,
    concurrency: int = 1,
    timeout_s: float | None = None,
    report: Callable[[str], None] | None = None,
) -> list[dict[str, Any]]:
    """Configurations of one `group_key`: one seed retrieval per question, memoised, then each
    configuration's own expansion of it. A run made under a version-1 run key is adopted first."""
    res = _resources(res)
    g = res.graph
    if len({group_key(c) for c in cfgs}) > 1:
        raise ValueError("evaluate_group needs configurations of one group (group_key)")
    g.encode_queries([q.text for q in questions])
    dirs = [adopt_legacy_run(out_root, c) for c in cfgs]
    if group_key(cfgs[0])[0] != "seeds":
        return [evaluate_one(res, c, questions, d, concurrency, timeout_s, report) for c, d in zip(cfgs, dirs)]
    retrievers = [make_retriever(res, c) for c in cfgs]
    seeds: dict[str, tuple[Retrieval, float]] = {}

    def search(q: Question, r: Any) -> Retrieval:
        if q.id in seeds:
            found, seed_ms = seeds[q.id]
            out = r.expand(q.text, found)
            out.trace["reused_seed_ms"] = seed_ms  # latency reports what an uncached query would cost
            return out
        t0 = time.perf_counter()
        found = r.seed_search(q.text, cfgs[0].k)
        seeds[q.id] = (found, (time.perf_counter() - t0) * 1000)
        return r.expand(q.text, found)

    return [
        run_eval(g, questions, c, functools.partial(search, r=r), d, concurrency, timeout_s, provenance(res, c), report)
        for c, r, d in zip(cfgs, retrievers, dirs)
    ]
