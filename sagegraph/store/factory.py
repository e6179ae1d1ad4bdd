"""Opens the store a config names: the one place a store backend is added (the interface in
`base` knows none of its implementations)."""

from __future__ import annotations

import os
from pathlib import Path

from sagegraph.store.base import GraphStore


def open_store(backend: str, path: Path | None = None, graph: str = "sagegraph", url: str | None = None) -> GraphStore:
    if backend == "falkordb":
        from sagegraph.store.falkor import FalkorStore

        if path is None:
            raise ValueError("falkordb store needs a data directory")
        return FalkorStore(Path(path), graph)
    if backend == "falkordb-server":
        from sagegraph.store.falkor import FalkorServerStore

        return FalkorServerStore(url or os.environ.get("FALKORDB_URL") or "", graph)
    if backend == "neo4j":
        from sagegraph.store.neo4j import Neo4jStore

        return Neo4jStore.from_env(database=os.environ.get("NEO4J_DATABASE"))
    raise ValueError(f"unknown store backend {backend!r} (falkordb, neo4j)")
