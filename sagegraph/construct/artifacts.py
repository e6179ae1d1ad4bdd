"""Where each build stage writes, and how a rerun knows a stage is finished.

Each stage writes into a directory named by the fingerprint of the config it depends on (and its
upstream stages'), files are written atomically, so: an existing file is a finished piece of work;
a changed config writes a new directory and never overwrites what was built before.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sagegraph.config import BuildConfig
from sagegraph.model import content_id
from sagegraph.runfiles import replaced, write_text_whole

# A stage's code version, bumped when a change alters what the stage writes: an upgraded sagegraph
# then redoes that stage and the ones after it, in a resumed build or a sweep, instead of keeping
# what the old code wrote. Version 1 adds nothing to a fingerprint, so stage outputs written before
# versions existed stay valid. edges 2: the spread behind `confidence` is summed in float64; edges
# 3: no `confidence` in an edge's metadata; edges 4: neighbours near the top-M boundary re-scored
# (`edges.top_neighbours`); edges 5: a pair within one modality runs from its lower node id
# (`edge_records.pair_edge_table`). store 2: KB fields are typed node properties and KB names get a
# full-text index (a store loaded by version 1 is reloaded once).
CODE_VERSIONS = {"edges": 5, "store": 2}
# Part of every stage's name: changing it renames, and so rebuilds, every stage of every built graph.
LAYOUT_SALT = "2"


def versioned(fingerprint: str, stage: str) -> str:
    version = CODE_VERSIONS.get(stage, 1)
    return fingerprint if version == 1 else content_id(fingerprint, f"{stage}-code-v{version}")


@dataclass(frozen=True)
class Layout:
    out: Path
    cfg_fp: dict[str, str]

    @classmethod
    def of(cls, cfg: BuildConfig) -> Layout:
        base = cfg.stage_fingerprint("corpus", "max_sources") + content_id(str(cfg.runner.batch_size), LAYOUT_SALT)
        if cfg.subset != "prefix":  # added later: builds made before it keep their fingerprints
            base = content_id(base, cfg.subset)
        # The corpus state (construct.changes) names what is made of the whole corpus: its ingest,
        # the assembled nodes and the edges. Chunks, metadata and vectors are per source batch, and
        # a batch is named by its members' contents (construct.batches): every corpus state shares
        # those directories, and a rebuild finds the batches it did not change already done.
        version = f"corpus-{cfg.corpus_version}" if cfg.corpus_version else ""
        src = content_id(base, version) if version else base
        chunks = content_id(base, cfg.stage_fingerprint("chunking", "tables"), cfg.embedding.resolved_name())
        meta = content_id(
            chunks, cfg.stage_fingerprint("metadata"), cfg.llm.model if cfg.metadata.mode == "llm" else ""
        )
        vecs = content_id(meta, cfg.embedding.resolved_name())
        nodes = content_id(vecs, version) if version else vecs
        edges = versioned(content_id(nodes, cfg.stage_fingerprint("edges")), "edges")
        return cls(
            cfg.out,
            {"sources": src, "chunks": chunks, "metadata": meta, "vectors": vecs, "nodes": nodes, "edges": edges},
        )

    def stage_path(self, stage: str) -> Path:
        """Where a stage's outputs live, without creating it (for checks that must not write)."""
        return self.out / "stages" / f"{stage}-{self.cfg_fp[stage]}"

    def stage_dir(self, stage: str) -> Path:
        d = self.stage_path(stage)
        d.mkdir(parents=True, exist_ok=True)
        return d

    @property
    def graph(self) -> Path:
        """This build's graph generation: written here, published as `out/graph` when complete
        (`sagegraph.construct.generations`)."""
        return self.out / "graphs" / self.cfg_fp["edges"][:16]

    @property
    def published(self) -> Path:
        """The graph readers get: a link to the generation published last."""
        return self.out / "graph"

    @property
    def stats(self) -> Path:
        return self.out / "stats"

    @property
    def cache(self) -> Path:
        return self.out / "cache"


def write_json(path: Path, obj: Any, indent: int | None = 1) -> Path:
    """Atomic. indent=None for bulk files nobody reads by eye: only then does json use its C encoder
    (the sources of a full OTT-QA ingest: 0.9 s indented)."""
    return write_text_whole(path, json.dumps(obj, indent=indent, ensure_ascii=False, default=str))


def move_aside(path: Path, tag: str) -> Path:
    """Rename `path` to the first free `<name>.<tag>-N` beside it (kept, never deleted)."""
    n = 1
    while path.with_name(f"{path.name}.{tag}-{n}").exists():
        n += 1
    return path.rename(path.with_name(f"{path.name}.{tag}-{n}"))


def read_json(path: Path) -> Any:
    return json.loads(path.read_text(encoding="utf-8"))


def save_npz(path: Path, **arrays) -> Path:
    import numpy as np

    with replaced(path, suffix=".npz") as tmp:
        np.savez(tmp, **arrays)
    return path
