"""Run one retriever configuration over a question set: per-query results (appended as they finish,
so a rerun resumes), then per-query CSV, TREC run file and metrics.json."""

from __future__ import annotations

import hashlib
import json
import logging
import threading
import time
import traceback
from collections.abc import Callable, Sequence
from concurrent.futures import FIRST_COMPLETED, ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from pydantic import BaseModel

from sagegraph.construct.artifacts import move_aside
from sagegraph.corpus.records import Question
from sagegraph.errors import ConfigError, InfraError, SageGraphError
from sagegraph.eval.metrics import (
    MRR_CONVENTION,
    RECALL_KS,
    mean_diagnostics,
    mean_metrics,
    metric_names,
    query_metrics,
    stage_diagnostics,
)
from sagegraph.progress import Progress
from sagegraph.retrieve.base import Retrieval, Retriever, param_values
from sagegraph.retrieve.graph_index import GraphIndex
from sagegraph.retrieve.registry import retriever_class, validate_params
from sagegraph.runfiles import (
    complete_lines,
    open_for_append,
    write_metrics,
    write_per_query_csv,
    write_text_whole,
    write_trec,
)
from sagegraph.runlock import hold

log = logging.getLogger("sagegraph.eval")


KEY_VERSION = 2  # run keys hash (retriever, k, params, edges, prompt); version 1 hashed SAGE's axes as fields

# Version 1's configuration fields beyond (retriever, k) with their defaults: each was a sweep axis
# shared by every retriever and went into every run key. Kept only so that runs made then resume.
LEGACY_AXES: dict[str, Any] = {"k_prime": 0, "alpha": 0.6, "seed_retriever": "hybrid", "policy": "+edge"}


@dataclass
class EvalConfig:
    """One evaluation configuration: which retriever, its k, its parameters (opaque here: the
    retriever class validates them and answers what evaluation needs to know), the graph's edge
    variant and the prompt version its replies came from."""

    retriever: str
    k: int
    params: dict[str, Any] = field(default_factory=dict)  # as given: labels show them, keys hash their validated form
    edges: str = ""  # edge-setting variant of the graph ("percentile=90"); "" = the graph as built
    prompt: str = ""  # the retriever's prompt version: a changed prompt reruns instead of resuming old rows

    @classmethod
    def from_record(cls, record: dict[str, Any]) -> EvalConfig:
        """A configuration from a run's config.json (or a task's payload), version 1's shape
        included: its axis fields become parameters of the retrievers that take them."""
        params = dict(record.get("params") or {})
        if record.get("key_version", 1) < 2 and any(a in record for a in LEGACY_AXES):
            taken = retriever_class(record["retriever"]).axes()
            params = {
                **{a: record[a] for a, d in LEGACY_AXES.items() if a in taken and a in record and record[a] != d},
                **params,
            }
        return cls(record["retriever"], int(record["k"]), params, record.get("edges", ""), record.get("prompt", ""))

    def validated(self) -> BaseModel:
        return validate_params(self.retriever, self.params)

    @property
    def retriever_class(self) -> type[Retriever]:
        return retriever_class(self.retriever)

    @property
    def total(self) -> int:
        """The result size, the recall cut-off this configuration reports."""
        return self.retriever_class.result_size(self.k, self.validated())

    def needs_llm(self) -> bool:
        return self.retriever_class.needs_llm(self.validated())

    def canonical_params(self) -> dict[str, Any]:
        """The parameters that differ from the retriever's defaults: equal runs, equal keys,
        whether a default was written out or not."""
        return param_values(self.validated(), mode="json", exclude_defaults=True)

    def key(self) -> str:
        fields = {
            "v": KEY_VERSION,
            "retriever": self.retriever,
            "k": self.k,
            "params": self.canonical_params(),
            "edges": self.edges,
            "prompt": self.prompt,
        }
        return hashlib.sha1(json.dumps(fields, sort_keys=True).encode()).hexdigest()[:10]

    def legacy_key(self) -> str:
        """This configuration's version-1 run key, so runs made under it are found and resumed."""
        cls, valid = self.retriever_class, self.validated()
        taken = [a for a in LEGACY_AXES if a in cls.axes()]
        fields: dict[str, Any] = {"retriever": self.retriever, "k": self.k}
        values = param_values(valid)  # by the names users write: a grouped model's groups flattened
        fields.update({a: (values[a] if a in taken else d) for a, d in LEGACY_AXES.items()})
        rest = {a: v for a, v in self.params.items() if a not in taken}
        fields.update({k: v for k, v in (("edges", self.edges), ("params", rest), ("prompt", self.prompt)) if v})
        return hashlib.sha1(json.dumps(fields, sort_keys=True).encode()).hexdigest()[:10]

    def record(self) -> dict[str, Any]:
        """config.json's configuration part (read back by `from_record`)."""
        return {
            "retriever": self.retriever,
            "k": self.k,
            "params": self.params,
            "edges": self.edges,
            "prompt": self.prompt,
            "key_version": KEY_VERSION,
            "total": self.total,
        }

    def label(self) -> str:
        name = self.retriever_class.label(self.k, self.params, self.validated())
        return f"{name}@{{{self.edges}}}" if self.edges else name


def run_dir(runs: Path, cfg: EvalConfig) -> Path:
    """A configuration's directory under a sweep's runs/: by its key, or by its version-1 key when
    only a run made under that exists."""
    new = Path(runs) / cfg.key()
    if not new.exists() and (old := Path(runs) / cfg.legacy_key()).exists():
        return old
    return new


def adopt_legacy_run(runs: Path, cfg: EvalConfig) -> Path:
    """Before a configuration runs: a run made under its version-1 key is renamed to its key, so
    its finished questions are resumed, not paid again."""
    new = Path(runs) / cfg.key()
    if (found := run_dir(runs, cfg)) != new:
        found.rename(new)
        log.info("%s: run %s adopted as %s (run keys version %d)", cfg.label(), found.name, new.name, KEY_VERSION)
    return new


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
    ok: list[Question] = []
    missing: list[Question] = []
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
    return {
        "qid": q.id,
        "gold": q.gold_sources,
        "ranked": docs,
        "scores": scores,
        **m,
        "latency_ms": round(latency_ms, 3),
        "neighbourhood": r.trace.get("neighbourhood"),
        "short_neighbourhood": r.trace.get("short_neighbourhood", False),
    }


def inputs_stamp(g: GraphIndex, questions: list[Question], beside: str = "") -> str:
    """What a run's results depend on besides its configuration: the graph (its build fingerprint,
    or its files' sizes and times when it has no manifest), what the configuration reads beside it
    (`Retriever.graph_inputs`) and the questions."""
    graph = g.manifest.get("fingerprint") or ":".join(
        f"{(g.dir / f).stat().st_size}-{(g.dir / f).stat().st_mtime_ns}" for f in ("nodes.parquet", "edges.parquet")
    )
    qs = hashlib.sha1(json.dumps([(q.id, q.text, sorted(q.gold_sources)) for q in questions]).encode()).hexdigest()
    graph = f"{graph}|{beside}" if beside else graph
    return hashlib.sha1(f"{graph}|{qs}".encode()).hexdigest()[:12]


def _made_on(out_dir: Path, stamp: str) -> bool:
    seen = out_dir / "inputs.txt"
    return seen.exists() and seen.read_text().strip() == stamp


def finished_summary(out_dir: Path, stamp: str) -> dict[str, Any] | None:
    """The run's metrics.json where it ran to the end (the file is written only then) on inputs
    with this stamp: what resuming it would give without running a question. Else None."""
    metrics = out_dir / "metrics.json"
    if not metrics.exists() or not _made_on(out_dir, stamp):
        return None
    return json.loads(metrics.read_text())


def _set_aside_if_stale(out_dir: Path, stamp: str) -> None:
    """Finished questions are reused only if they were run on the same graph and questions; a run
    made on other inputs is moved aside (kept, never deleted) and the configuration starts over."""
    if not (out_dir / "per_query.jsonl").exists() or _made_on(out_dir, stamp):
        return
    moved = move_aside(out_dir, "stale")
    log.warning("%s: made on another graph or question set; moved to %s and run again", out_dir, moved.name)


USAGE_KEYS = (
    "calls",
    "cached",
    "prompt_tokens",
    "completion_tokens",
    "cost_usd",
    "llm_seconds",
    "retries",
    "truncated",
    "malformed",
    "work_prompt_tokens",
    "work_completion_tokens",
    "work_seconds",
)


def _col(k: str) -> str:
    return k if k.startswith("llm_") else f"llm_{k}"


def usage_columns(r: Retrieval) -> dict[str, Any]:
    """Per-query LLM usage as flat columns (`llm_calls`, `llm_prompt_tokens`, ...)."""
    return {_col(k): r.usage.get(k, 0) for k in USAGE_KEYS}


def read_done(log_path: Path) -> dict[str, dict[str, Any]]:
    """A run's per_query.jsonl by question: the last row of each wins; a last line without its
    newline (still being written, or cut by a crash) is not read, and a line that does not parse
    ends the reading (what follows it is redone on resume)."""
    done: dict[str, dict[str, Any]] = {}
    if log_path.exists():
        for line in complete_lines(log_path):
            try:
                row = json.loads(line)
                done[row["qid"]] = row
            except json.JSONDecodeError:
                break  # a line cut by a crash: everything after it is redone
    return done


def run_eval(
    g: GraphIndex,
    questions: list[Question],
    cfg: EvalConfig,
    search: Callable[[Question], Retrieval],
    out_dir: Path,
    concurrency: int = 1,
    timeout_s: float | None = None,
    provenance: dict[str, Any] | None = None,
    report: Callable[[str], None] | None = None,
) -> dict[str, Any]:
    """Run `search` over the questions and score it; resumable, and honest about failures.

    Contract: finished questions are appended to per_query.jsonl as they finish (in completion
    order) and never rerun on the same inputs; questions run on a pool of `concurrency` threads.
    A model failure is the retriever's to handle (its fallback, counted in the trace); any other
    SageGraphError scores that question as retrieving nothing and is counted in `errors`; a
    question still running after `timeout_s` is scored the same way and counted in `timeouts`.
    An InfraError (endpoint or store down, no key, a replay miss) stops the run: the questions
    finished so far are kept, the failed ones are not written, and the error is re-raised, so a
    rerun finishes them instead of scoring an outage as empty retrievals. metrics.json is written
    only for a complete run. `provenance` (the LLM model, endpoint and reply cache) goes into
    config.json, so a run directory names the model behind its numbers. `report` receives the
    progress lines (this module's log by default; a Prefect task passes its run logger)."""
    with hold(out_dir, "evaluation"):  # a second run into this directory refuses, naming this one
        return _run_eval(g, questions, cfg, search, out_dir, concurrency, timeout_s, provenance, report)


def _run_eval(
    g: GraphIndex,
    questions: list[Question],
    cfg: EvalConfig,
    search: Callable[[Question], Retrieval],
    out_dir: Path,
    concurrency: int,
    timeout_s: float | None,
    provenance: dict[str, Any] | None,
    report: Callable[[str], None] | None,
) -> dict[str, Any]:
    stamp = inputs_stamp(g, questions, cfg.retriever_class.graph_inputs(g, cfg.validated()))
    _set_aside_if_stale(out_dir, stamp)
    out_dir.mkdir(parents=True, exist_ok=True)
    write_text_whole(out_dir / "inputs.txt", stamp)  # cut by a kill, it would read as stale and set the run aside
    write_text_whole(
        out_dir / "config.json",
        json.dumps(
            {**cfg.record(), "label": cfg.label(), "graph": str(g.dir), **(provenance or {})}, indent=1, default=str
        ),
    )
    log_path = out_dir / "per_query.jsonl"
    done = read_done(log_path)
    scorable, missing = split_questions(g, questions)
    todo = [q for q in scorable if q.id not in done]
    ks = recall_ks(cfg)
    lock = threading.Lock()
    report = report or log.info
    progress = Progress(cfg.label(), total=len(scorable), resumed=len(scorable) - len(todo))
    if line := progress.start_line():  # None when nothing is left to run
        report(line)

    def timed(q: Question) -> tuple[Retrieval, float]:
        started[q.id] = time.monotonic()
        began[q.id] = time.time()
        t0 = time.perf_counter()
        try:
            r = search(q)
        except (InfraError, ConfigError):  # an outage or a setting to fix: stop, keep what finished
            raise
        except SageGraphError as exc:  # one bad question is scored as retrieving nothing, and counted
            log.warning("question %s: %s", q.id, exc)
            r = Retrieval(np.zeros(0, np.int64), np.zeros(0, np.float32), [], {"error": str(exc)})
        except Exception as exc:  # a bug met by one question: its error, with the traceback; the run goes on
            log.warning("question %s: %s: %s (traceback in errors.jsonl)", q.id, type(exc).__name__, exc)
            r = Retrieval(
                np.zeros(0, np.int64),
                np.zeros(0, np.float32),
                [],
                {"error": f"{type(exc).__name__}: {exc}", "traceback": traceback.format_exc()},
            )
        return r, (time.perf_counter() - t0) * 1000 + r.trace.get("reused_seed_ms", 0.0)

    def record(fh, traces, q: Question, r: Retrieval, ms: float) -> None:
        row = score_query(g, q, r, ms, ks)
        row["error"] = r.trace.get("error")
        row.update(usage_columns(r))
        row["counters"] = r.trace.get("counters", {})
        if r.trace.get("stage_sets") or r.trace.get("predictions"):
            row["diagnostics"] = stage_diagnostics(r.trace, set(q.gold_sources), q.meta)
        with lock:
            if row["error"]:
                with open_for_append(out_dir / "errors.jsonl") as errors:
                    errors.write(
                        json.dumps({"qid": q.id, "error": row["error"], "traceback": r.trace.get("traceback")}) + "\n"
                    )
            fh.write(json.dumps(row) + "\n")
            fh.flush()
            if r.trace:
                head = {
                    "qid": q.id,
                    "question": q.text,
                    "started_at": began.get(q.id),
                    "latency_ms": row["latency_ms"],
                    "top": row["ranked"][:10],
                }
                traces.write(json.dumps({**head, **r.trace}, default=str) + "\n")
                traces.flush()
            done[q.id] = row
            if line := progress.tick():
                report(line)

    started: dict[str, float] = {}  # monotonic, for the timeout
    began: dict[str, float] = {}  # wall clock, for the trace
    with open_for_append(log_path) as fh, open_for_append(out_dir / "traces.jsonl") as traces:
        if concurrency <= 1 and timeout_s is None:
            for q in todo:
                r, ms = timed(q)
                record(fh, traces, q, r, ms)
        else:
            _run_pool(todo, timed, lambda q, r, ms: record(fh, traces, q, r, ms), concurrency, timeout_s, started)
    rows = [done[q.id] for q in scorable]
    return write_summary_files(out_dir, cfg, rows, missing, stamp, ks, question_groups(scorable))


def _run_pool(
    todo: list[Question], timed, record, concurrency: int, timeout_s: float | None, started: dict[str, float]
) -> None:
    pool = ThreadPoolExecutor(max(1, concurrency), thread_name_prefix="question")
    abandoned: list[ThreadPoolExecutor] = []  # pools holding a timed-out question's thread
    futures = {pool.submit(timed, q): q for q in todo}
    pending = set(futures)
    failure: BaseException | None = None
    try:
        while pending:
            finished, pending = wait(pending, timeout=0.5, return_when=FIRST_COMPLETED)
            for f in finished:
                q = futures[f]
                try:
                    r, ms = f.result()
                except (InfraError, ConfigError) as exc:
                    failure = failure or exc
                    continue
                record(q, r, ms)
            if failure is not None:
                break
            if timeout_s is not None:
                now = time.monotonic()
                lost = False
                for f in list(pending):
                    q = futures[f]
                    if q.id in started and now - started[q.id] > timeout_s:
                        pending.discard(f)  # its thread runs on; the result is ignored
                        log.warning("question %s: no answer after %.0f s", q.id, timeout_s)
                        record(
                            q,
                            Retrieval(
                                np.zeros(0, np.int64),
                                np.zeros(0, np.float32),
                                [],
                                {"error": f"timed out after {timeout_s:g} s", "timeout": True},
                            ),
                            timeout_s * 1000,
                        )
                        lost = True
                if lost:
                    # A thread cannot be stopped: the timed-out question keeps its worker, so the
                    # questions not started yet move to a fresh pool (with one worker, nothing
                    # else would ever run).
                    abandoned.append(pool)
                    pool = ThreadPoolExecutor(max(1, concurrency), thread_name_prefix="question")
                    for f in [f for f in pending if f.cancel()]:
                        q = futures.pop(f)
                        pending.discard(f)
                        moved = pool.submit(timed, q)
                        futures[moved] = q
                        pending.add(moved)
    finally:
        for f in pending:
            f.cancel()
        pool.shutdown(wait=failure is None, cancel_futures=True)
        for old in abandoned:
            old.shutdown(wait=False, cancel_futures=True)
    if failure is not None:
        raise failure


# Fields of a questions file that group its questions (PathQuestion's hops, the synthetic KB's
# family, a qtype): each gets its own metrics per value, so a method's failure on one kind of
# question is not averaged away.
GROUP_FIELDS = ("hops", "qtype", "family")
GROUP_METRICS = ("hit@1", "hit@5", "recall@20", "mrr")


def question_groups(questions: Sequence[Question]) -> dict[str, dict[str, str]]:
    """qid -> {grouping field: value} for the fields of GROUP_FIELDS a question has."""
    return {q.id: {f: str(q.meta[f]) for f in GROUP_FIELDS if q.meta.get(f) not in (None, "")} for q in questions}


def group_metrics(
    rows: list[dict[str, Any]], groups: dict[str, dict[str, str]]
) -> dict[str, dict[str, dict[str, float]]]:
    """{field: {value: {"questions": n, metric: mean, ...}}} for every grouping field with at
    least two values among the rows (one value is the whole set again)."""
    out: dict[str, dict[str, dict[str, float]]] = {}
    for f in GROUP_FIELDS:
        by: dict[str, list[dict[str, Any]]] = {}
        for r in rows:
            if (v := groups.get(r["qid"], {}).get(f)) is not None:
                by.setdefault(v, []).append(r)
        if len(by) < 2:
            continue
        out[f] = {
            v: {
                "questions": len(rs),
                **{m: round(float(np.mean([r[m] for r in rs])), 6) for m in GROUP_METRICS if m in rs[0]},
            }
            for v, rs in sorted(by.items(), key=lambda kv: (len(kv[0]), kv[0]))
        }
    return out


def group_columns(summary: dict[str, Any]) -> dict[str, float]:
    """metrics.json's per-group metrics as flat columns ('hit@1 hops=2'), for tables and MLflow."""
    return {
        f"{m} {f}={v}": val
        for f, values in (summary.get("by_group") or {}).items()
        for v, ms in values.items()
        for m, val in ms.items()
    }


def summarise(
    rows: list[dict[str, Any]],
    ks: list[int],
    missing: Sequence[str] = (),
    stamp: str = "",
    groups: dict[str, dict[str, str]] | None = None,
) -> dict[str, Any]:
    """metrics.json's content from per-query rows: quality means, latency, LLM usage, counters,
    and per-group metrics when `groups` (`question_groups`) is given."""
    keys = metric_names(ks)
    metrics = mean_metrics([{k: r[k] for k in keys} for r in rows])
    lat = np.array([r["latency_ms"] for r in rows]) if rows else np.zeros(1)
    n = max(1, len(rows))
    usage = {_col(k): sum(r.get(_col(k), 0) or 0 for r in rows) for k in USAGE_KEYS}
    counters: dict[str, float] = {}
    for r in rows:
        for name, v in (r.get("counters") or {}).items():
            counters[name] = counters.get(name, 0) + float(v)
    summary = {
        **{k: round(v, 6) for k, v in metrics.items()},
        "questions": len(rows),
        "gold_missing": len(missing),
        "short_neighbourhood": sum(1 for r in rows if r.get("short_neighbourhood")),
        "errors": sum(1 for r in rows if r.get("error")),
        "timeouts": sum(1 for r in rows if str(r.get("error") or "").startswith("timed out")),
        "latency_p50_ms": round(float(np.percentile(lat, 50)), 3),
        "latency_p95_ms": round(float(np.percentile(lat, 95)), 3),
        **{k: round(v, 6) for k, v in usage.items()},
        **{f"{k}_per_query": round(v / n, 6) for k, v in usage.items() if k != "llm_retries"},
        **{f"count_{k}": int(v) for k, v in sorted(counters.items())},
        **{f"rate_{k}": round(v / n, 6) for k, v in sorted(counters.items())},
        **mean_diagnostics(rows),
        "mrr_convention": MRR_CONVENTION,
        "inputs": stamp,
    }
    if groups and (by_group := group_metrics(rows, groups)):
        summary["by_group"] = by_group
    return summary


def failed_questions(summary: dict[str, Any]) -> int:
    """Questions a configuration scored as empty because of an error (timeouts, which a user
    asked for, not counted): a non-zero count makes the CLI exit non-zero."""
    return int(summary.get("errors", 0) or 0) - int(summary.get("timeouts", 0) or 0)


def read_partial(out_dir: Path, cfg: EvalConfig) -> dict[str, Any] | None:
    """The summary of a run still going or stopped (its finished questions only, marked
    `partial`), so a long sweep can be compared before it ends; None when nothing is done yet."""
    rows = list(read_done(out_dir / "per_query.jsonl").values())
    return {**summarise(rows, recall_ks(cfg)), "partial": True} if rows else None


def write_summary_files(
    out_dir: Path,
    cfg: EvalConfig,
    rows: list[dict[str, Any]],
    missing: list[str],
    stamp: str,
    ks: list[int],
    groups: dict[str, dict[str, str]] | None = None,
) -> dict[str, Any]:
    summary = summarise(rows, ks, missing, stamp, groups)
    keys = metric_names(ks)
    usage_cols = [_col(k) for k in USAGE_KEYS]
    write_per_query_csv(out_dir / "per_query.csv", rows, keys + usage_cols)
    write_trec(out_dir / "run.trec", ((r["qid"], r["ranked"], r["scores"]) for r in rows), cfg.label().replace(" ", ""))
    write_metrics(out_dir / "metrics.json", summary)
    return summary
