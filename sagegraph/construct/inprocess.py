"""A build in this process, stage after stage, with no Prefect server and no Dask cluster: what
`sagegraph.build` runs from Python (a notebook, an application's own scheduler, a small corpus).

The same stage functions as the `build_graph` flow, in the same order and under the same lock,
so both resume each other's work and publish alike; the flow fans the batches and the modality
pairs out over workers, this runs them in turn.
"""

from __future__ import annotations

import time
from typing import Any

from sagegraph.config import BuildConfig
from sagegraph.construct import generations, stages
from sagegraph.construct.artifacts import write_json
from sagegraph.runlock import hold


def build_in_process(cfg: BuildConfig) -> dict[str, Any]:
    """Builds (or resumes, or finds up to date) the graph `cfg` describes and publishes it. The
    report: the published graph, its counts, the store load, the change set and the seconds."""
    with hold(cfg.out, "build"):
        cfg, changes = stages.resolve_corpus(cfg)
        stages.preflight(cfg)
        if changes is not None and changes.empty and (done := stages.up_to_date(cfg)) is not None:
            return {
                **done,
                "published": generations.record(cfg.out),
                "up_to_date": True,
                "changes": changes.as_dict(),
                "corpus_version": cfg.corpus_version,
            }
        t0 = time.perf_counter()
        ingested = stages.ingest(cfg)
        metas, vectors = [], []
        for batch in ingested["batches"]:  # each batch through chunking, metadata and embedding, as a worker takes it
            chunks = stages.chunk_batch(cfg, batch)
            metas.append(stages.metadata_batch(cfg, chunks["path"]))
            vectors.append(stages.embed_batch(cfg, metas[-1]["path"]))
        stages.assemble(cfg, [m["path"] for m in metas], [v["path"] for v in vectors])
        pairs = [stages.edges_for_pair(cfg, p) for p in stages.present_pairs(stages.modalities_of(ingested["counts"]))]
        final = stages.finalize_edges(cfg, [p["path"] for p in pairs], ingested["kb_edges"])
        store = stages.load_store(cfg)
        stats = stages.graph_stats(cfg, [p["stats"] for p in pairs])
        published = stages.publish_graph(cfg)
        report = {
            "graph": str(cfg.out / "graph"),
            "stats": stats["path"],
            "counts": stats["summary"],
            "edges": final["edges"],
            "store": store,
            "published": published,
            "seconds": round(time.perf_counter() - t0, 2),
            "up_to_date": False,
            "changes": changes.as_dict() if changes is not None else None,
            "corpus_version": cfg.corpus_version,
        }
        if changes is not None:
            write_json(cfg.out / "stats" / "changes.json", {**changes.as_dict(), "corpus_version": cfg.corpus_version})
        return report
