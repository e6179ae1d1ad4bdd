"""Resources for a built graph: its store as the build loaded it (opened lazily, once per process)
and an LLM client whose reply cache lives beside the graph, so `evaluate`, `query` and sweeps over
one graph share their replies and a rerun pays for nothing twice."""

from __future__ import annotations

from pathlib import Path

from sagegraph.config import LLMConfig, StoreConfig
from sagegraph.llm import LLMClient
from sagegraph.retrieve.base import Resources
from sagegraph.retrieve.graph_index import GraphIndex
from sagegraph.store.loaded import check_loaded, loaded_place


def store_factory(g: GraphIndex):
    """Opens the store named in the graph's manifest, checked to hold this graph; None when the
    build loaded none."""
    cfg = g.manifest.get("config") or {}
    store = StoreConfig.model_validate(cfg.get("store") or {})
    if store.backend == "none":
        return None
    out = Path(cfg.get("out") or g.out)
    path = Path(store.path) if store.path else out / "store"

    def open_it():
        from sagegraph.store import open_store

        # the store graph of this graph's own generation: a rebuild loads beside it, never into it
        key, marker = loaded_place(store.backend, out, path, store.graph, g.manifest.get("fingerprint", ""))
        opened = open_store(store.backend, path, key, url=store.url)
        try:
            check_loaded(opened, marker, g.manifest)
        except BaseException:
            opened.close()
            raise
        return opened

    return open_it


def llm_cache_path(g: GraphIndex, llm: LLMConfig) -> Path:
    return (Path(llm.cache_dir) if llm.cache_dir else g.out / "cache") / "llm.sqlite"


def open_resources(g: GraphIndex, llm: LLMConfig | None = None) -> Resources:
    client = LLMClient(llm, llm_cache_path(g, llm)) if llm is not None else None
    return Resources(g, client, store_factory(g))
