"""A build in this process, stage after stage, with no Prefect server and no Dask cluster: what
`sagegraph.build` runs from Python (a notebook, an application's own scheduler, a small corpus),
and what `sagegraph build` runs for a small change, where starting the server and the workers
would cost more than the work.

The same stage functions as the `build_graph` flow, in the same order and under the same lock,
so both resume each other's work, publish alike and report alike (`construct.report`); the flow
fans the batches and the modality pairs out over workers, this runs them in turn.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from typing import Any

from sagegraph.config import BuildConfig
from sagegraph.construct import generations, stages
from sagegraph.construct.changes import ChangeSet
from sagegraph.construct.report import StageClock, build_report, record_changes
from sagegraph.runlock import hold


def build_in_process(cfg: BuildConfig, resolved: tuple[BuildConfig, ChangeSet | None] | None = None) -> dict[str, Any]:
    """Builds (or resumes, or finds up to date) the graph `cfg` describes and publishes it. The
    report: the published graph, its counts, the store load, the change set, what was redone and
    the seconds per stage. `resolved`: what `stages.resolve_corpus` gave a caller that holds the
    build lock already (the CLI), so the corpus is not read again."""
    with hold(cfg.out, "build"), stages.corpus_read_once():
        cfg, changes = resolved or stages.resolve_corpus(cfg, keep_read=True)
        stages.preflight(cfg)
        if changes is not None and changes.empty and (done := stages.up_to_date(cfg)) is not None:
            return {
                **done,
                "published": generations.record(cfg.out),
                "up_to_date": True,
                "changes": changes.as_dict(),
                "corpus_version": cfg.corpus_version,
            }
        encodes = changes is None or changes.first_build or changes.sources_to_redo() > 0
        if encodes:
            stages.start_encoder(cfg)
        else:  # one a caller started before the change was known
            stages.stop_encoders()
        with stages.store_kept_open(cfg):
            result = _build(cfg)
        record_changes(cfg, changes, result)
        result["up_to_date"] = False
        return result


def _build(cfg: BuildConfig) -> dict[str, Any]:
    clock = StageClock()
    ingested = stages.ingest(cfg)
    clock.lap("ingest")
    batches: dict[str, list[dict[str, Any]]] = {"chunk": [], "metadata": [], "embed": []}
    with stages.BatchVectors(cfg) as vectors:
        for batch in ingested["batches"]:  # each batch through chunking and metadata, as a worker takes it
            batches["chunk"].append(stages.chunk_batch(cfg, batch))
            batches["metadata"].append(stages.metadata_batch(cfg, batches["chunk"][-1]["path"]))
            vectors.add(batches["metadata"][-1]["path"])  # its texts encoded meanwhile
        batches["embed"] = vectors.written()
    clock.lap("chunk_metadata_embed")
    stages.assemble(cfg, [m["path"] for m in batches["metadata"]], [v["path"] for v in batches["embed"]])
    clock.lap("assemble")
    pairs = [stages.edges_for_pair(cfg, p) for p in stages.present_pairs(stages.modalities_of(ingested["counts"]))]
    clock.lap("edges")
    final = stages.finalize_edges(cfg, [p["path"] for p in pairs], ingested["kb_edges"])
    clock.lap("finalize_edges")
    # The store load mostly waits on the database server: the statistics and the change against
    # the published graph are computed meanwhile.
    with ThreadPoolExecutor(1, thread_name_prefix="graph-stats") as pool:
        stats_run = pool.submit(stages.graph_stats, cfg, [p["stats"] for p in pairs])
        changes_run = pool.submit(stages.graph_changes, cfg)
        store = stages.load_store(cfg)
        stats = stats_run.result()
        graph_delta = stages.graph_delta_of(store, changes_run.result())
    clock.lap("load_store_and_stats")
    published = stages.publish_graph(cfg)
    clock.lap("publish")
    return build_report(
        cfg,
        ingested=ingested,
        batches=batches,
        final=final,
        store=store,
        stats=stats,
        published=published,
        graph_delta=graph_delta,
        clock=clock,
    )
