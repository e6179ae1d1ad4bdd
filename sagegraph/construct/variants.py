"""Edge-setting variants of a built graph: the same nodes, vectors and BM25 index, other edges.

A sweep over the edge percentile (or logic, top_m, ...) needs one graph per setting. Everything
before the edge stage (chunking, metadata, embeddings: most of an OTT-QA build) does not depend on
edge settings, so a variant hard-links those files from the base graph and reruns only the edge
stage into <out>/variants/edges-<fingerprint>/graph, beside its own stats/. Variants are resumable
like every stage: a finished one is found by its manifest and reused.
"""

from __future__ import annotations

import itertools
import os
import shutil
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from sagegraph.config import BuildConfig, EdgeConfig
from sagegraph.construct.artifacts import Layout, read_json
from sagegraph.errors import ConfigError

NODE_FILES = ("nodes.parquet", "nodes.fingerprint", "vectors", "bm25")


def edge_grid(axes: dict[str, list[Any]]) -> list[dict[str, Any]]:
    """Every combination of the given edge settings, each checked against EdgeConfig."""
    unknown = sorted(set(axes) - set(EdgeConfig.model_fields))
    if unknown:
        raise ConfigError(
            f"edges: unknown setting(s) {', '.join(unknown)}; known: {', '.join(EdgeConfig.model_fields)}"
        )
    names = sorted(axes)
    combos = [dict(zip(names, values)) for values in itertools.product(*(axes[n] for n in names))]
    for combo in combos:
        try:
            EdgeConfig.model_validate(combo)
        except ValidationError as exc:
            err = exc.errors()[0]
            raise ConfigError(
                f"edges.{'.'.join(map(str, err['loc']))}: {err['msg']} (value {err.get('input')!r})"
            ) from None
    return combos


def label(overrides: dict[str, Any]) -> str:
    """'logic=or,percentile=90': how a variant is named in run labels, summaries and MLflow."""
    return ",".join(f"{k}={overrides[k]}" for k in sorted(overrides))


def parse_label(text: str) -> dict[str, str]:
    return dict(part.split("=", 1) for part in text.split(",") if "=" in part)


def variant_config(base: BuildConfig, overrides: dict[str, Any]) -> BuildConfig:
    edges = EdgeConfig.model_validate({**base.edges.model_dump(), **overrides})
    return base.model_copy(update={"edges": edges})


def variant_graph_dir(base: BuildConfig, overrides: dict[str, Any]) -> Path:
    """The base graph itself when the overrides change nothing, else its variant directory."""
    cfg = variant_config(base, overrides)
    fp = Layout.of(cfg).cfg_fp["edges"]
    if fp == Layout.of(base).cfg_fp["edges"]:
        return Layout.of(base).published
    return cfg.out / "variants" / f"edges-{fp}" / "graph"


def base_config_of(graph_dir: Path) -> BuildConfig:
    """The build config a graph was made with, from its manifest."""
    manifest = Path(graph_dir) / "manifest.json"
    if not manifest.exists():
        raise ConfigError(f"{manifest}: missing; edge variants need a graph built by `sagegraph build`")
    return BuildConfig.model_validate(read_json(manifest)["config"])


def _link_tree(src: Path, dst: Path) -> None:
    """Hard links (a copy where the file system refuses them): no extra disk, and a later rebuild of
    the base writes new files by rename, so the variant keeps the version it was made from."""
    if src.is_dir():
        dst.mkdir(parents=True, exist_ok=True)
        for child in src.iterdir():
            _link_tree(child, dst / child.name)
        return
    dst.parent.mkdir(parents=True, exist_ok=True)
    if dst.exists():
        dst.unlink()
    try:
        os.link(src, dst)
    except OSError:
        shutil.copy2(src, dst)


def built_variant(base: BuildConfig, overrides: dict[str, Any]) -> Path | None:
    """The variant's graph dir when it is built from these settings (or is the base graph itself,
    built), else None: what `build_variant` would return without building anything."""
    cfg = variant_config(base, overrides)
    layout = Layout.of(cfg)
    graph = variant_graph_dir(base, overrides)
    if graph == layout.published:
        return graph if (graph / "edges.parquet").exists() else None
    manifest = graph / "manifest.json"
    stats_json = graph.parent / "stats" / "graph_stats.json"
    if manifest.exists() and stats_json.exists() and read_json(manifest).get("fingerprint") == layout.cfg_fp["edges"]:
        return graph
    return None


def build_variant(base: BuildConfig, overrides: dict[str, Any]) -> Path:
    """Edges (and stats) of `base` rebuilt with the overridden edge settings; returns the graph dir."""
    from sagegraph.construct import stages  # the build stages import encoders; labels above stay light

    if (built := built_variant(base, overrides)) is not None:
        return built
    cfg = variant_config(base, overrides)
    layout = Layout.of(cfg)
    graph = variant_graph_dir(base, overrides)
    if graph == layout.published:
        raise ConfigError(f"{graph}: the base graph is not built; run `sagegraph build` first")
    base_graph = Layout.of(base).graph
    marker = base_graph / "nodes.fingerprint"
    if not marker.exists() or marker.read_text() != layout.cfg_fp["nodes"]:
        raise ConfigError(f"{base_graph}: nodes of this build config are not assembled; run `sagegraph build` first")
    for name in NODE_FILES:
        if (base_graph / name).exists():
            _link_tree(base_graph / name, graph / name)
    ingest = stages.ingest(cfg)
    pairs = stages.present_pairs(stages.modalities_of(ingest["counts"]))
    results = [stages.edges_for_pair(cfg, p, nodes_dir=base_graph) for p in pairs]
    stages.finalize_edges(cfg, [r["path"] for r in results], ingest["kb_edges"], graph_dir=graph)
    stages.graph_stats(cfg, [r["stats"] for r in results], graph_dir=graph)
    return graph
