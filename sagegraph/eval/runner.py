"""Run one retriever configuration over a question set: per-query results (appended as they finish,
so a rerun resumes), then per-query CSV, TREC run file and metrics.json."""

from __future__ import annotations

import hashlib
import json
import logging
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import numpy as np

from sagegraph.corpus.records import Question
from sagegraph.errors import SageGraphError
from sagegraph.eval.metrics import MRR_CONVENTION, RECALL_KS, mean_metrics, metric_names, query_metrics
from sagegraph.eval.runfiles import write_metrics, write_per_query_csv, write_trec
from sagegraph.retrieve.base import Retrieval
from sagegraph.retrieve.graph_index import GraphIndex

log = logging.getLogger("sagegraph.eval")


@dataclass
class EvalConfig:
    retriever: str
    k: int
    k_prime: int = 0
    alpha: float = 0.6
    seed_retriever: str = "hybrid"
    policy: str = "+edge"
    edges: str = ""  # edge-setting variant of the graph ("percentile=90"); "" = the graph as built

    @property
    def total(self) -> int:
        return self.k + (self.k_prime if self.retriever == "sage" else 0)

    def key(self) -> str:
        fields = {k: v for k, v in self.__dict__.items() if k != "edges" or v}  # keys of runs made before variants stay valid
        return hashlib.sha1(json.dumps(fields, sort_keys=True).encode()).hexdigest()[:10]

    def label(self) -> str:
        if self.retriever == "sage":
            name = f"sage[{self.seed_retriever},k={self.k},k'={self.k_prime},a={self.alpha},{self.policy}]"
        else:
            name = f"{self.retriever}[k={self.k},a={self.alpha}]" if self.retriever == "hybrid" else f"{self.retriever}[k={self.k}]"
        return f"{name}@{{{self.edges}}}" if self.edges else name


def dedupe_sources(g: GraphIndex, r: Retrieval) -> tuple[list[str], list[float]]:
    """Chunk ranking -> source ranking (first occurrence), for run files."""
    seen: dict[str, float] = {}
    for i, s in zip(r.idx, r.scores):
        src = g.source_ids[i]
        if src not in seen:
            seen[src] = float(s)
    return list(seen), list(seen.values())


def split_questions(g: GraphIndex, questions: list[Question]) -> tuple[list[Question], list[str]]:
    """Questions none of whose gold sources is in the graph cannot be scored: counted, not run."""
    sources = set(g.source_ids.tolist())
    ok, missing = [], []
    for q in questions:
        (ok if any(s in sources for s in q.gold_sources) else missing).append(q)
    return ok, [q.id for q in missing]


def recall_ks(cfg: EvalConfig) -> list[int]:
    """The standard cut-offs plus the configuration's own k (+ k')."""
    return sorted(set(RECALL_KS) | {cfg.total})


def score_query(g: GraphIndex, q: Question, r: Retrieval, latency_ms: float, ks: list[int]) -> dict[str, Any]:
    ranked_sources = [g.source_ids[i] for i in r.idx]
    m = query_metrics(ranked_sources, set(q.gold_sources), ks)
    docs, scores = dedupe_sources(g, r)
    return {"qid": q.id, "gold": q.gold_sources, "ranked": docs, "scores": scores, **m, "latency_ms": round(latency_ms, 3),
            "neighbourhood": r.trace.get("neighbourhood"), "short_neighbourhood": r.trace.get("short_neighbourhood", False)}


def inputs_stamp(g: GraphIndex, questions: list[Question]) -> str:
    """What a run's results depend on besides its configuration: the graph (its build fingerprint,
    or its files' sizes and times when it has no manifest) and the questions."""
    graph = g.manifest.get("fingerprint") or ":".join(f"{(g.dir / f).stat().st_size}-{(g.dir / f).stat().st_mtime_ns}" for f in ("nodes.parquet", "edges.parquet"))
    qs = hashlib.sha1(json.dumps([(q.id, q.text, sorted(q.gold_sources)) for q in questions]).encode()).hexdigest()
    return hashlib.sha1(f"{graph}|{qs}".encode()).hexdigest()[:12]


def _set_aside_if_stale(out_dir: Path, stamp: str) -> None:
    """Finished questions are reused only if they were run on the same graph and questions; a run
    made on other inputs is moved aside (kept, never deleted) and the configuration starts over."""
    if not (out_dir / "per_query.jsonl").exists():
        return
    seen = out_dir / "inputs.txt"
    if seen.exists() and seen.read_text().strip() == stamp:
        return
    n = 1
    while out_dir.with_name(f"{out_dir.name}.stale-{n}").exists():
        n += 1
    out_dir.rename(out_dir.with_name(f"{out_dir.name}.stale-{n}"))
    log.warning("%s: made on another graph or question set; moved to %s.stale-%d and run again", out_dir, out_dir.name, n)


def run_eval(g: GraphIndex, questions: list[Question], cfg: EvalConfig, search: Callable[[Question], Retrieval], out_dir: Path) -> dict[str, Any]:
    stamp = inputs_stamp(g, questions)
    _set_aside_if_stale(out_dir, stamp)
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "inputs.txt").write_text(stamp)
    (out_dir / "config.json").write_text(json.dumps({**cfg.__dict__, "label": cfg.label(), "graph": str(g.dir)}, indent=1))
    log_path = out_dir / "per_query.jsonl"
    done: dict[str, dict[str, Any]] = {}
    if log_path.exists():
        for line in log_path.read_text(encoding="utf-8").splitlines():
            try:
                row = json.loads(line)
                done[row["qid"]] = row
            except json.JSONDecodeError:
                break  # a line cut by a crash: everything after it is redone
    scorable, missing = split_questions(g, questions)
    with log_path.open("a", encoding="utf-8") as fh:
        for q in scorable:
            if q.id in done:
                continue
            t0 = time.perf_counter()
            try:
                r = search(q)
            except SageGraphError as exc:  # one bad question is scored as retrieving nothing, and counted
                log.warning("question %s: %s", q.id, exc)
                r = Retrieval(np.zeros(0, np.int64), np.zeros(0, np.float32), [], {"error": str(exc)})
            row = score_query(g, q, r, (time.perf_counter() - t0) * 1000 + r.trace.get("reused_seed_ms", 0.0), recall_ks(cfg))
            row["error"] = r.trace.get("error")
            fh.write(json.dumps(row) + "\n")
            done[q.id] = row
    rows = [done[q.id] for q in scorable]
    keys = metric_names(recall_ks(cfg))
    metrics = mean_metrics([{k: r[k] for k in keys} for r in rows])
    lat = np.array([r["latency_ms"] for r in rows]) if rows else np.zeros(1)
    summary = {
        **{k: round(v, 6) for k, v in metrics.items()},
        "questions": len(rows),
        "gold_missing": len(missing),
        "short_neighbourhood": sum(1 for r in rows if r.get("short_neighbourhood")),
        "errors": sum(1 for r in rows if r.get("error")),
        "latency_p50_ms": round(float(np.percentile(lat, 50)), 3),
        "latency_p95_ms": round(float(np.percentile(lat, 95)), 3),
        "mrr_convention": MRR_CONVENTION,
        "inputs": stamp,
    }
    write_per_query_csv(out_dir / "per_query.csv", rows, keys)
    write_trec(out_dir / "run.trec", ((r["qid"], r["ranked"], r["scores"]) for r in rows), cfg.label().replace(" ", ""))
    write_metrics(out_dir / "metrics.json", summary)
    return summary
