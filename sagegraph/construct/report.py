"""What a build reports: the same record whether its stages ran as a Prefect flow on Dask or one
after another in this process, so the CLI, `sagegraph.build` and `stats/changes.json` read alike."""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any

from sagegraph.config import BuildConfig
from sagegraph.construct.artifacts import write_json
from sagegraph.construct.changes import ChangeSet, store_written

LLM_USAGE_KEYS = ("calls", "cached", "prompt_tokens", "completion_tokens", "cost_usd", "fallbacks", "retries")


class StageClock:
    """Wall seconds per stage, in the order the stages ran."""

    def __init__(self) -> None:
        self.started = self.lap_start = time.perf_counter()
        self.seconds: dict[str, float] = {}

    def lap(self, stage: str) -> None:
        now = time.perf_counter()
        self.seconds[stage] = round(now - self.lap_start, 2)
        self.lap_start = now

    def total(self) -> float:
        return round(time.perf_counter() - self.started, 2)


def build_report(
    cfg: BuildConfig,
    *,
    ingested: Mapping[str, Any],
    batches: Mapping[str, list[dict[str, Any]]],
    final: Mapping[str, Any],
    store: Mapping[str, Any],
    stats: Mapping[str, Any],
    published: Mapping[str, Any],
    graph_delta: Mapping[str, int] | None,
    clock: StageClock,
    estimate: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """The build's record. `batches`: the chunk, metadata and embed results of every source batch
    (keys "chunk", "metadata", "embed")."""
    chunk_results, meta_results, vec_results = batches["chunk"], batches["metadata"], batches["embed"]
    task_seconds = {name: round(sum(r.get("seconds", 0.0) for r in results), 2) for name, results in batches.items()}
    task_seconds.update(load_store=round(store.get("seconds", 0.0), 2), stats=round(stats["seconds"], 2))
    llm = [m.get("llm", {}) for m in meta_results]
    llm_usage = (
        {k: round(sum(u.get(k, 0) for u in llm), 6) for k in LLM_USAGE_KEYS} if cfg.metadata.mode == "llm" else None
    )
    encode_seconds = round(sum(r.get("encode_seconds", 0.0) for r in [*chunk_results, *vec_results]), 2)
    work = {
        "graph": graph_delta,
        "encoded": sum(r.get("encoded", 0) for r in [*chunk_results, *vec_results]),
        "encode_seconds": encode_seconds,
        "llm_metadata": llm_usage,
        "store": store_written(store),
    }
    return {
        "graph": str(cfg.out / "graph"),
        "stats": stats["path"],
        "plots": stats["plots"],
        "store": dict(store),
        "counts": stats["summary"],
        "edges": final["edges"],
        "published": dict(published),
        "stage_seconds": dict(clock.seconds),
        "task_seconds": task_seconds,
        "encode_seconds": encode_seconds,
        "work": work,
        "seconds": clock.total(),
        "llm_estimate": estimate,
        "llm_usage": llm_usage,
        "skipped_records": ingested["skipped_records"],
        "resumed_batches": sum(1 for r in [*chunk_results, *meta_results, *vec_results] if r.get("resumed")),
    }


def record_changes(cfg: BuildConfig, changes: ChangeSet | None, result: dict[str, Any]) -> None:
    """The change set, what the build redid and its stage seconds, into the result and
    `stats/changes.json`."""
    result["changes"] = changes.as_dict() if changes is not None else None
    result["corpus_version"] = cfg.corpus_version
    if changes is not None:
        write_json(
            cfg.out / "stats" / "changes.json",
            {
                **changes.as_dict(),
                "corpus_version": cfg.corpus_version,
                "work": result["work"],
                "stage_seconds": result["stage_seconds"],
            },
        )
