"""What a build loaded into a store, and the check that a store opened for reading holds it.

An evaluation against a store that could not be opened, or that a crashed build left half
loaded, used to score every question as an empty retrieval and exit 0."""

from __future__ import annotations

import json
from pathlib import Path

from sagegraph.errors import StoreUnavailable


def loaded_marker(backend: str, out: Path, store_path: Path, graph: str) -> Path:
    """Where a build records what it loaded into a store (its counts and the graph's fingerprint)."""
    return store_path / f"loaded-{graph}.json" if backend == "falkordb" else out / f"loaded-{backend}-{graph}.json"


MULTI_GRAPH = ("falkordb", "falkordb-server")  # engines that hold many graphs side by side


def store_key(backend: str, graph: str, fingerprint: str) -> str:
    """The store graph one build generation is loaded into: its own, in FalkorDB, so a rebuild
    loads beside the graph readers use and a rollback finds the one before still there
    (`sagegraph.construct.generations`). Neo4j's one database per server (Community) holds one
    graph: there a load replaces the graph in place."""
    return f"{graph}-{fingerprint[:12]}" if backend in MULTI_GRAPH else graph


def loaded_place(backend: str, out: Path, store_path: Path, graph: str, fingerprint: str) -> tuple[str, Path]:
    """(store graph, marker) of the load of the graph with this fingerprint; a load made before
    generations (one store graph named `graph`) is found when it holds this graph."""
    key = store_key(backend, graph, fingerprint)
    marker = loaded_marker(backend, out, store_path, key)
    if key != graph and not marker.exists():
        legacy = loaded_marker(backend, out, store_path, graph)
        if legacy.exists() and json.loads(legacy.read_text(encoding="utf-8")).get("graph_fingerprint") == fingerprint:
            return graph, legacy
    return key, marker


def check_loaded(store, marker: Path, manifest: dict) -> None:
    """The store holds the graph of this manifest, whole: its load finished (the marker), for
    this graph (the fingerprint), and the counts the load wrote are there now. Anything else is an
    outage of the store, not an empty answer: scoring a half-loaded store would turn it into a
    result."""
    if (why := load_mismatch(store, marker, manifest)) is not None:
        raise StoreUnavailable(f"{why}; rerun `sagegraph build`")


def load_mismatch(store, marker: Path, manifest: dict) -> str | None:
    """Why the store does not hold the graph of this manifest whole (`check_loaded`), or None.
    A store that cannot be read raises its own StoreError."""
    if not marker.exists():
        return (
            f"{marker.parent}: the store holds no finished load of "
            f"{manifest.get('config', {}).get('name', 'this graph')} "
            f"({marker.name} missing: a build stopped while loading it)"
        )
    loaded = json.loads(marker.read_text(encoding="utf-8"))
    want = loaded.get("graph_fingerprint")
    if want is not None and manifest.get("fingerprint") and want != manifest["fingerprint"]:
        return (
            f"{marker.parent}: the store holds another build of the graph than "
            f"{manifest.get('config', {}).get('out', 'this one')} (fingerprints differ)"
        )
    have = {"nodes": store.count_nodes(), "edges": store.count_edges()}
    expected = {k: loaded.get(k) for k in have}
    if have != expected:
        return (
            f"{marker.parent}: the store holds {have['nodes']} nodes and {have['edges']} edges, its load wrote "
            f"{expected['nodes']} and {expected['edges']}"
        )
    return None
