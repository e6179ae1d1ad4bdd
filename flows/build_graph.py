"""The `build_graph` flow: ingest -> chunk -> metadata -> embed (fanned out per source batch on Dask,
each batch moving through the three on its own) -> assemble -> edges (fanned out per modality pair)
-> store + statistics -> publish (readers switch to the new graph only then)."""

from __future__ import annotations

import time
from typing import Any

from prefect import flow, unmapped
from prefect.futures import PrefectFutureList, as_completed

from sagegraph.config import BuildConfig
from sagegraph.construct.artifacts import write_json
from sagegraph.construct.changes import ChangeSet, store_written, work_lines
from sagegraph.construct.stages import (
    graph_changes,
    modalities_of,
    preflight,
    present_pairs,
    publish_graph,
    resolve_corpus,
    up_to_date,
)
from sagegraph.progress import Progress
from sagegraph.runlock import hold
from sagegraph.tasks import build as build_tasks
from sagegraph.tasks.console import run_log


@flow(name="build_graph", log_prints=True)
def build_graph(cfg: BuildConfig) -> dict[str, Any]:
    with hold(cfg.out, "build"):  # the CLI holds it already; a scheduled deployment run takes it here
        # Under the lock: which corpus state to build is read from what the last build left; then
        # its inputs are checked (deployments and sweeps start here, not in the CLI).
        cfg, changes = resolve_corpus(cfg)
        preflight(cfg)
        if changes is not None:
            run_log().info("%s", changes.line())
        if changes is not None and changes.empty and (done := up_to_date(cfg)) is not None:
            run_log().info("the graph, its statistics and its store are up to date: no stage runs")
            _report(cfg, changes, {})
            return {**done, "changes": changes.as_dict(), "corpus_version": cfg.corpus_version}
        result = _build(cfg)
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
            _report(cfg, changes, result["stage_seconds"], result["work"])
            run_log().info("%s", "; ".join(f"{k}: {v}" for k, v in work_lines(result["work"])))
        return result


def _report(
    cfg: BuildConfig, changes: ChangeSet, stage_seconds: dict[str, float], work: dict[str, Any] | None = None
) -> None:
    """The change set, what the build redid and the seconds per stage as a Markdown artifact in the
    Prefect UI."""
    from prefect.artifacts import create_markdown_artifact

    key = "".join(c if c.isalnum() else "-" for c in f"build-{cfg.name}".lower())
    create_markdown_artifact(
        markdown=f"## {cfg.name}: {changes.line()}\n\n{changes.markdown(stage_seconds, work)}",
        key=key,
        description=f"what changed in the corpus of {cfg.out} and the seconds per stage",
    )


def _follow(futures: PrefectFutureList[Any], label: str, unit: str) -> None:
    """One progress line for a mapped stage: its batches done, the pace and the time left."""
    if not len(futures):
        return
    progress, report = Progress(label, total=len(futures), every_s=30.0, unit=unit), run_log().progress
    for _ in as_completed(list(futures)):
        if line := progress.tick():
            report(line)


def _build(cfg: BuildConfig) -> dict[str, Any]:
    t0 = time.perf_counter()
    stage_wall: dict[str, float] = {}

    def lap(name: str, since: float) -> float:
        now = time.perf_counter()
        stage_wall[name] = round(now - since, 2)
        return now

    t = t0
    ing = build_tasks.ingest(cfg)
    t = lap("ingest", t)
    estimate = None
    if cfg.metadata.mode == "llm":
        # The cost estimate is logged before the first paid call, so LLM mode waits for all chunks.
        chunks = build_tasks.chunk.map(unmapped(cfg), ing["batches"])
        estimate = build_tasks.estimate_cost(cfg, chunks.result())
        metas = build_tasks.metadata.map(unmapped(cfg), chunks)
        vecs = build_tasks.embed.map(unmapped(cfg), metas)
        _follow(vecs, "chunk, metadata, embed", "batches")
        chunk_results, meta_results, vec_results = chunks.result(), metas.result(), vecs.result()
    else:
        # Each batch goes through the three on its own, in one task: no worker idles at a stage
        # barrier while the other finishes the stage's last batch.
        batches = build_tasks.batch.map(unmapped(cfg), ing["batches"])
        _follow(batches, "chunk, metadata, embed", "batches")
        done = batches.result()
        chunk_results, meta_results, vec_results = ([b[part] for b in done] for part in ("chunk", "metadata", "embed"))
    t = lap("chunk_metadata_embed", t)
    task_seconds = {
        name: round(sum(r.get("seconds", 0.0) for r in results), 2)
        for name, results in (("chunk", chunk_results), ("metadata", meta_results), ("embed", vec_results))
    }
    build_tasks.assemble(cfg, meta_results, vec_results)
    t = lap("assemble", t)
    pairs = present_pairs(modalities_of(ing["counts"]))
    pair_results = build_tasks.edges.map(unmapped(cfg), pairs).result()
    t = lap("edges", t)
    fin = build_tasks.finalize_edges(cfg, pair_results, ing["kb_edges"])
    t = lap("finalize_edges", t)
    # The store load mostly waits on the database server: statistics run beside it on a worker.
    store_run = build_tasks.load_store.submit(cfg)
    stats_run = build_tasks.graph_stats.submit(cfg, pair_results)
    store, stats = store_run.result(), stats_run.result()
    t = lap("load_store_and_stats", t)
    graph_delta = store.get("difference") if store.get("mode") == "difference" else graph_changes(cfg)
    # Only now, with the graph and its store load complete, do readers switch to it.
    published = publish_graph(cfg)
    run_log().info("published %s (previous: %s)", published["current"], published.get("previous"))
    t = lap("publish", t)
    task_seconds.update(load_store=round(store["seconds"], 2), stats=round(stats["seconds"], 2))
    llm = [m.get("llm", {}) for m in meta_results]
    llm_usage = (
        {
            k: round(sum(u.get(k, 0) for u in llm), 6)
            for k in ("calls", "cached", "prompt_tokens", "completion_tokens", "cost_usd", "fallbacks", "retries")
        }
        if cfg.metadata.mode == "llm"
        else None
    )
    encode_seconds = round(sum(r.get("encode_seconds", 0.0) for r in chunk_results + vec_results), 2)
    work = {
        "graph": graph_delta,
        "encoded": sum(r.get("encoded", 0) for r in chunk_results + vec_results),
        "encode_seconds": encode_seconds,
        "llm_metadata": llm_usage,
        "store": store_written(store),
    }
    return {
        "graph": str(cfg.out / "graph"),
        "stats": stats["path"],
        "plots": stats["plots"],
        "store": store,
        "counts": stats["summary"],
        "edges": fin["edges"],
        "published": published,
        "stage_seconds": stage_wall,
        "task_seconds": task_seconds,
        "encode_seconds": encode_seconds,
        "work": work,
        "seconds": round(time.perf_counter() - t0, 2),
        "llm_estimate": estimate,
        "llm_usage": llm_usage,
        "skipped_records": ing["skipped_records"],
        "resumed_batches": sum(1 for r in chunk_results + meta_results + vec_results if r.get("resumed")),
    }
