"""The store interface. What both engines share is in its own modules (mapping: records to nodes;
writes: bulk-write Cypher; schema: introspection); what differs (indexes, vector search, vector
literals, read-only execution) is isolated in each backend."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Iterable, Iterator
from typing import Any

import numpy as np
import pyarrow as pa

from sagegraph.errors import GraphMissing
from sagegraph.model import Edge, Node, edges_to_table
from sagegraph.store.diff import GraphDiff, edge_key_batches
from sagegraph.store.mapping import NODE_LABEL, node_label, node_row, safe_label
from sagegraph.store.readonly import assert_read_only, guard_untrusted
from sagegraph.store.schema import GraphSchema, introspect_schema
from sagegraph.store.writes import (
    Write,
    batched,
    edge_delete_query,
    edge_write_query,
    node_update_query,
    node_write_query,
)


class GraphStore(ABC):
    """Load, introspect and query a chunk graph. Subclasses implement the engine-specific parts."""

    backend: str = "abstract"
    vector_literal: str = "row.embedding"

    # ---- engine-specific ----
    @abstractmethod
    def write(self, query: str, params: dict[str, Any] | None = None) -> list[dict[str, Any]]: ...

    @abstractmethod
    def _read(
        self, query: str, params: dict[str, Any], timeout_ms: int, max_rows: int
    ) -> tuple[list[dict[str, Any]], bool]: ...

    @abstractmethod
    def ensure_indexes(self, dim: int | None, wait: bool = True) -> None:
        """The id index, and the vector index when dim is given. Both engines populate an index over
        existing nodes in the background: wait=False lets a bulk load go on meanwhile; call
        `await_indexes` before the vector index is queried."""

    @abstractmethod
    def await_indexes(self, timeout_s: float = 600.0) -> None: ...

    @abstractmethod
    def drop_vector_index(self) -> None:
        """The vector index gone, where there is one (its embeddings stay on the nodes)."""

    _indexes_ready = False

    def await_indexes_once(self) -> None:
        """Before the first vector query of this connection: an index may still be filling in the
        background (a fresh load declares it without waiting; FalkorDB rebuilds it on every start)."""
        if not self._indexes_ready:
            self.await_indexes()
            self._indexes_ready = True

    @abstractmethod
    def vector_search(self, vector: np.ndarray, k: int) -> list[tuple[str, float]]: ...

    def introspect(self) -> GraphSchema:
        return introspect_schema(self)

    @abstractmethod
    def explain(self, query: str, params: dict[str, Any]) -> None:
        """Ask the engine to plan the query without running it; raise CypherInvalid with the
        engine's message for a query it cannot parse or plan."""

    def ensure_fulltext(self) -> None:  # noqa: B027 - optional: engines without a full-text index keep this no-op
        """A full-text index over KB names and titles, so `CONTAINS`-style name lookups and entity
        resolution do not scan every node. Engines without one skip it."""

    @abstractmethod
    def close(self) -> None: ...

    def clear(self) -> None:
        self.write("MATCH (n) DETACH DELETE n")

    def graphs(self) -> list[str]:
        """The graphs this store holds side by side (one where the engine holds one per database)."""
        return []

    def drop_graph(self, name: str) -> None:
        """Delete another graph of this store (a retired build generation)."""
        raise NotImplementedError(f"{self.backend} holds one graph per database")

    def vector_params(self, vectors: np.ndarray) -> list[Any]:
        """One embedding parameter per row, as this backend's driver sends it best (Bolt: floats)."""
        return np.asarray(vectors, dtype=np.float32).tolist()

    # ---- shared Cypher ----
    def load_nodes(
        self, nodes: list[Node], vectors: np.ndarray | None = None, batch_size: int = 1000, create: bool = False
    ) -> int:
        """MERGE by id: loading the same nodes twice leaves one copy of each. `create=True` is for a
        graph known to hold none of these nodes (a fresh load): CREATE skips the lookup per row."""
        return self.run_writes(self.node_writes(nodes, vectors, batch_size, create))

    def node_writes(
        self, nodes: list[Node], vectors: np.ndarray | None = None, batch_size: int = 1000, create: bool = False
    ) -> Iterator[Write]:
        """The writes of `load_nodes`, made batch by batch, so a backend that overlaps client and
        server work formats batch i+1 (embeddings included) while the server writes batch i."""
        groups: dict[str, list[int]] = {}
        for i, n in enumerate(nodes):
            groups.setdefault(node_label(n), []).append(i)
        vec = self.vector_literal if vectors is not None else None
        for label, idx in groups.items():
            query = node_write_query(label, vec, create)
            for part in batched(idx, batch_size):
                emb = self.vector_params(vectors[part]) if vectors is not None else [None] * len(part)
                yield Write(query, [node_row(nodes[i], e) for i, e in zip(part, emb)], len(part))

    def diff_writes(
        self, diff: GraphDiff, nodes: list[Node], vectors: np.ndarray, batch_size: int = 1000
    ) -> Iterator[Write]:
        """The writes that turn the diff's old graph into the new one (`sagegraph.store.diff`):
        edges gone, nodes gone or re-created, nodes written, edges written. Every write is
        idempotent (MATCH ... DELETE, MERGE), so a diff applied twice (a crash between a Neo4j
        commit and its marker) still leaves the new graph."""
        for rtype, rows in edge_key_batches(diff.delete_edges, batch_size):
            yield Write(edge_delete_query(rtype), rows, len(rows))
        for part in batched(diff.delete_nodes, batch_size):
            yield Write(f"UNWIND $rows AS id MATCH (n:{NODE_LABEL} {{id: id}}) DETACH DELETE n", part, len(part))
        keep = diff.write_nodes
        yield from self.node_writes([nodes[i] for i in keep], vectors[keep], batch_size, create=False)
        query = node_update_query(self.vector_literal)
        for part in batched(diff.update_nodes, batch_size):
            updated = [node_row(nodes[i], e) for i, e in zip(part, self.vector_params(vectors[part]))]
            yield Write(query, [{**row, "props": {**row["props"], "id": row["id"]}} for row in updated], len(part))
        yield from (
            Write(edge_write_query(rtype, False), rows, n)
            for rtype, rows, n in self.edge_batches(diff.write_edges, batch_size)
        )

    def apply_diff(self, diff: GraphDiff, nodes: list[Node], vectors: np.ndarray, batch_size: int = 1000) -> int:
        """Apply a diff to this store graph as one unit where the engine has transactions (Neo4j);
        FalkorDB applies it to a copy no reader has opened yet (`copy_graph`)."""
        return self.run_atomically(self.diff_writes(diff, nodes, vectors, batch_size))

    def run_atomically(self, writes: Iterable[Write]) -> int:
        return self.run_writes(writes)

    def compact(self, log_share: float = 0.0) -> float | None:
        """Fold what the writes since the last compaction added to the store's log into its
        snapshot, so the next server start reads a snapshot instead of replaying queries; only
        once that part has grown past `log_share` of the snapshot. Seconds taken; None where
        nothing was folded, and always where the store keeps no such log (a server's own operator
        decides)."""
        return None

    def copy_graph(self, source: str) -> None:
        """Make this store graph a copy of another graph of the store (replacing what it held)."""
        raise NotImplementedError(f"{self.backend} holds one graph per database")

    def take_graph(self, source: str) -> None:
        """Make another graph of the store this one, under this one's name (replacing what it
        held): a graph no reader needs any more becomes the base a difference is written to."""
        raise NotImplementedError(f"{self.backend} holds one graph per database")

    def run_writes(self, writes: Iterable[Write]) -> int:
        """Run `UNWIND $rows` writes in order; backends may overlap client and server work."""
        count = 0
        for w in writes:
            self.write(w.query, {"rows": w.rows})
            count += w.count
        return count

    def edge_batches(self, table: pa.Table, batch_size: int) -> Iterator[tuple[str, Any, int]]:
        """(relationship type, `$rows` value, edges in it) per batch of edges.parquet rows, in the
        form this backend sends best (Bolt: dicts). The metadata column already is JSON text: no
        Edge objects, no decode/encode round trip."""
        src, dst = table.column("src").to_pylist(), table.column("dst").to_pylist()
        weight, meta = table.column("weight").cast(pa.float64()).to_pylist(), table.column("metadata").to_pylist()
        groups: dict[str, list[dict[str, Any]]] = {}
        for i, rtype in enumerate(table.column("type").to_pylist()):
            groups.setdefault(rtype, []).append(
                {"src": src[i], "dst": dst[i], "props": {"weight": weight[i], "metadata": meta[i] or "{}"}}
            )
        for rtype, rows in groups.items():
            for part in batched(rows, batch_size):
                yield rtype, part, len(part)

    def load_edges(self, edges: list[Edge], batch_size: int = 1000, create: bool = False) -> int:
        return self.load_edge_table(edges_to_table(edges), batch_size, create)

    def load_edge_table(self, table: pa.Table, batch_size: int = 1000, create: bool = False) -> int:
        """MERGE edges.parquet into the graph, one query per relationship type (Cypher cannot
        parameterise a type). `create=True` is for a graph known to hold none of these edges."""
        return self.run_writes(
            Write(edge_write_query(rtype, create), rows, n) for rtype, rows, n in self.edge_batches(table, batch_size)
        )

    def count_nodes(self) -> int:
        try:
            rows = self.read("MATCH (n) RETURN count(n) AS c")
        except GraphMissing:  # a graph not loaded yet holds nothing
            return 0
        return int(rows[0]["c"]) if rows else 0

    def count_edges(self) -> int:
        try:
            rows = self.read("MATCH ()-[r]->() RETURN count(r) AS c")
        except GraphMissing:  # a graph not loaded yet holds nothing
            return 0
        return int(rows[0]["c"]) if rows else 0

    def neighbours(self, node_id: str, edge_type: str | None = None, limit: int = 100) -> list[dict[str, Any]]:
        rel = f":{safe_label(edge_type)}" if edge_type else ""
        q = (
            f"MATCH (a:{NODE_LABEL} {{id: $id}})-[r{rel}]-(b:{NODE_LABEL}) RETURN b.id AS id, type(r) AS type, "
            "b.modality AS modality LIMIT $limit"
        )
        return self.read(q, {"id": node_id, "limit": limit})

    def read(
        self, query: str, params: dict[str, Any] | None = None, timeout_ms: int = 10_000, max_rows: int = 10_000
    ) -> list[dict[str, Any]]:
        """Run a query that must not write: guarded, time-limited and row-capped."""
        rows, _ = self.read_capped(query, params, timeout_ms, max_rows)
        return rows

    def read_capped(
        self, query: str, params: dict[str, Any] | None = None, timeout_ms: int = 10_000, max_rows: int = 10_000
    ) -> tuple[list[dict[str, Any]], bool]:
        """(rows, truncated)."""
        return self._read(assert_read_only(query), params or {}, timeout_ms, max_rows)

    def read_untrusted(
        self, query: str, params: dict[str, Any] | None = None, timeout_ms: int = 10_000, max_rows: int = 1_000
    ) -> tuple[list[dict[str, Any]], bool]:
        """The only path for Cypher a model or a user wrote: refused before the database sees it
        when it writes, calls a procedure or function off the allow-list, loads files or holds
        several statements (ReadOnlyViolation); then planned by the engine (CypherInvalid with the
        engine's message, which a planner may repair once); then run through the engine's
        read-only path with its timeout, and a LIMIT of max_rows + 1 written into the query, so
        the engine stops at the cap instead of this process receiving every row. What runs is
        the guard's rewrite (`guard_untrusted`), never the text as the model wrote it.
        Returns (rows, truncated)."""
        text = guard_untrusted(query, max_rows + 1)
        self.explain(text, params or {})
        return self._read(text, params or {}, timeout_ms, max_rows)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
