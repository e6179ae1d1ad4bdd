"""The `build_graph` flow: ingest -> chunk -> metadata -> embed (fanned out per source batch on Dask,
each batch moving through the three on its own) -> assemble -> edges (fanned out per modality pair)
-> store + statistics -> publish (readers switch to the new graph only then)."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from typing import Any

from prefect import flow, unmapped
from prefect.futures import PrefectFutureList, as_completed

from sagegraph.config import BuildConfig
from sagegraph.construct.changes import ChangeSet, work_lines
from sagegraph.construct.report import StageClock, build_report, record_changes
from sagegraph.construct.stages import (
    corpus_read_once,
    graph_changes,
    graph_delta_of,
    modalities_of,
    preflight,
    present_pairs,
    publish_graph,
    resolve_corpus,
    store_kept_open,
    up_to_date,
)
from sagegraph.progress import Progress
from sagegraph.runlock import hold
from sagegraph.tasks import build as build_tasks
from sagegraph.tasks.console import run_log


@flow(name="build_graph", log_prints=True)
def build_graph(cfg: BuildConfig) -> dict[str, Any]:
    # The CLI holds the lock already; a scheduled deployment run takes it here.
    with hold(cfg.out, "build"), corpus_read_once():
        # Under the lock: which corpus state to build is read from what the last build left; then
        # its inputs are checked (deployments and sweeps start here, not in the CLI).
        cfg, changes = resolve_corpus(cfg, keep_read=True)
        preflight(cfg)
        if changes is not None:
            run_log().info("%s", changes.line())
        if changes is not None and changes.empty and (done := up_to_date(cfg)) is not None:
            run_log().info("the graph, its statistics and its store are up to date: no stage runs")
            _report(cfg, changes, {})
            return _adapted(cfg, {**done, "changes": changes.as_dict(), "corpus_version": cfg.corpus_version})
        with store_kept_open(cfg):
            result = _build(cfg)
        record_changes(cfg, changes, result)
        if changes is not None:
            _report(cfg, changes, result["stage_seconds"], result["work"])
            run_log().info("%s", "; ".join(f"{k}: {v}" for k, v in work_lines(result["work"])))
        return _adapted(cfg, result)


def _adapted(cfg: BuildConfig, result: dict[str, Any]) -> dict[str, Any]:
    """The build's last stage where the config asks for it (`adapt.enabled`): the generation
    published now adapted to its KB, as `sagegraph adapt` does."""
    from sagegraph.retrieve.kb.adaptation import with_adaptation

    return with_adaptation(cfg, result, report=lambda line: run_log().info("%s", line))


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
    clock = StageClock()
    ing = build_tasks.ingest(cfg)
    clock.lap("ingest")
    estimate = None
    if cfg.metadata.mode == "llm":
        # The cost estimate is logged before the first paid call, so LLM mode waits for all chunks.
        chunks = build_tasks.chunk.map(unmapped(cfg), ing["batches"])
        estimate = build_tasks.estimate_cost(cfg, chunks.result())
        metas = build_tasks.metadata.map(unmapped(cfg), chunks)
        vecs = build_tasks.embed.map(unmapped(cfg), metas)
        _follow(vecs, "chunk, metadata, embed", "batches")
        batches = {"chunk": chunks.result(), "metadata": metas.result(), "embed": vecs.result()}
    else:
        # Each batch goes through the three on its own, in one task: no worker idles at a stage
        # barrier while the other finishes the stage's last batch.
        runs = build_tasks.batch.map(unmapped(cfg), ing["batches"])
        _follow(runs, "chunk, metadata, embed", "batches")
        done = runs.result()
        batches = {part: [b[part] for b in done] for part in ("chunk", "metadata", "embed")}
    clock.lap("chunk_metadata_embed")
    build_tasks.assemble(cfg, batches["metadata"], batches["embed"])
    clock.lap("assemble")
    pairs = present_pairs(modalities_of(ing["counts"]))
    pair_results = build_tasks.edges.map(unmapped(cfg), pairs).result()
    clock.lap("edges")
    fin = build_tasks.finalize_edges(cfg, pair_results, ing["kb_edges"])
    clock.lap("finalize_edges")
    # The store load mostly waits on the database server: statistics run beside it on a worker,
    # and the change against the published graph here.
    store_run = build_tasks.load_store.submit(cfg)
    stats_run = build_tasks.graph_stats.submit(cfg, pair_results)
    with ThreadPoolExecutor(1, thread_name_prefix="graph-changes") as pool:
        changes_run = pool.submit(graph_changes, cfg)
        store, stats = store_run.result(), stats_run.result()
        graph_delta = graph_delta_of(store, changes_run.result())
    clock.lap("load_store_and_stats")
    # Only now, with the graph and its store load complete, do readers switch to it.
    published = publish_graph(cfg)
    run_log().info("published %s (previous: %s)", published["current"], published.get("previous"))
    clock.lap("publish")
    return build_report(
        cfg,
        ingested=ing,
        batches=batches,
        final=fin,
        store=store,
        stats=stats,
        published=published,
        graph_delta=graph_delta,
        clock=clock,
        estimate=estimate,
    )
