"""The store interface. Shared Cypher lives here in the dialect both engines accept (UNWIND/MERGE,
plain labels, no APOC); what differs (indexes, vector search, vector literals, read-only execution,
introspection) is isolated in each backend."""

from __future__ import annotations

import json
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import Any, Iterable, Iterator

import numpy as np
import pyarrow as pa

from sagegraph.model import DOC_CHUNK, ENTITY, TABLE_CHUNK, Edge, Node, edges_to_table
from sagegraph.store.diff import GraphDiff, edge_key_batches
from sagegraph.store.readonly import assert_read_only, guard_untrusted

NODE_LABEL = "Node"
MODALITY_LABELS = {DOC_CHUNK: "DocChunk", TABLE_CHUNK: "TableChunk", ENTITY: "Entity"}
_SAFE = set("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_")


def safe_label(name: str) -> str:
    """Labels and relationship types cannot be parameters in Cypher, so they are whitelisted text."""
    cleaned = "".join(c if c in _SAFE else "_" for c in name)
    if not cleaned or cleaned[0].isdigit():
        cleaned = "T_" + cleaned
    return cleaned


@dataclass
class PropertyInfo:
    type: str  # STRING, INTEGER, FLOAT, BOOLEAN, LIST
    examples: list[Any] = field(default_factory=list)
    seen: int = 0  # in how many sampled nodes of the label the key was present


@dataclass
class GraphSchema:
    """What an LLM planner needs to write valid Cypher: labels with their counts and typed
    properties (a few example values each), relationship types, and the (label)-[type]->(label)
    patterns of every relationship type."""

    labels: list[str] = field(default_factory=list)
    relationship_types: list[str] = field(default_factory=list)
    property_keys: list[str] = field(default_factory=list)
    patterns: list[tuple[str, str, str]] = field(default_factory=list)
    node_count: int = 0
    edge_count: int = 0
    label_counts: dict[str, int] = field(default_factory=dict)
    properties: dict[str, dict[str, PropertyInfo]] = field(default_factory=dict)

    def as_text(self) -> str:
        lines = [f"Node labels: {', '.join(self.labels)}", f"Relationship types: {', '.join(self.relationship_types)}", f"Property keys: {', '.join(self.property_keys)}"]
        lines += [f"(:{a})-[:{r}]->(:{b})" for a, r, b in self.patterns]
        return "\n".join(lines)


# Properties every node has for sagegraph's own use; a schema card for Cypher writers leaves them out.
INTERNAL_PROPERTIES = {"modality", "type", "text", "source_id", "position", "topic", "entities", "metadata", "embedding"}
# Store labels that say what kind of node a row is rather than what it is.
GENERIC_LABELS = {NODE_LABEL, *MODALITY_LABELS.values()}
_RESERVED = {"id", "modality", "type", "source_id", "metadata", "embedding", "entities", "position"}


def kb_properties(fields: dict[str, Any]) -> dict[str, Any]:
    """A KB object's fields as typed node properties (`m.year > 2000` must compare numbers); a
    field named like one of sagegraph's own properties is stored as `field_<name>`."""
    out = {}
    for k, v in fields.items():
        key = safe_label(k)
        if key in _RESERVED:
            key = f"field_{key}"
        if isinstance(v, (dict, tuple)) or (isinstance(v, list) and not all(isinstance(x, (str, int, float, bool)) for x in v)):
            v = json.dumps(v, ensure_ascii=False)
        out[key] = v
    return out


def property_type(v: Any) -> str:
    if isinstance(v, bool):
        return "BOOLEAN"
    if isinstance(v, int):
        return "INTEGER"
    if isinstance(v, float):
        return "FLOAT"
    if isinstance(v, list):
        return "LIST"
    return "STRING"


def node_row(node: Node, embedding: Any | None) -> dict[str, Any]:
    """Store properties must be primitives or lists of them, so metadata travels as JSON text.
    `embedding` is already in the form the backend sends (`GraphStore.vector_params`)."""
    meta = node.metadata
    row = {
        "id": node.id,
        "props": {
            "modality": node.modality,
            "type": node.type,
            "text": node.text,
            "source_id": node.source_id,
            "title": node.title,
            "position": node.position,
            "topic": meta.get("topic") or meta.get("table_description") or "",
            "entities": sorted(meta.get("entities", {}))[:50],
            "metadata": json.dumps(meta, ensure_ascii=False),
        },
    }
    if node.modality == ENTITY and isinstance(meta.get("fields"), dict):
        row["props"].update(kb_properties(meta["fields"]))
    if embedding is not None:
        row["embedding"] = embedding
    return row


@dataclass(frozen=True)
class Write:
    """One batch of a bulk load: `query` runs once with `$rows` bound to `rows` (`count` of them)."""

    query: str
    rows: Any
    count: int


def node_write_query(label: str, vector_literal: str | None, create: bool) -> str:
    """`label` may hold several (`Entity:Paper`); `vector_literal` spells the embedding per backend."""
    set_vec = f", n.embedding = {vector_literal}" if vector_literal else ""
    if create:
        return f"UNWIND $rows AS row CREATE (n:{NODE_LABEL}:{label} {{id: row.id}}) SET n += row.props{set_vec}"
    return f"UNWIND $rows AS row MERGE (n:{NODE_LABEL} {{id: row.id}}) SET n:{label}, n += row.props{set_vec}"


def node_label(node: Node) -> str:
    """The store labels of a node; KB nodes also carry their own type (`Entity:Paper`)."""
    label = MODALITY_LABELS.get(node.modality, "Entity")
    return f"{label}:{safe_label(node.type)}" if node.modality == ENTITY and node.type else label


def edge_delete_query(rtype: str) -> str:
    return f"UNWIND $rows AS row MATCH (a:{NODE_LABEL} {{id: row.src}})-[r:{safe_label(rtype)}]->(b:{NODE_LABEL} {{id: row.dst}}) DELETE r"


def edge_write_query(rtype: str, create: bool) -> str:
    verb = "CREATE" if create else "MERGE"
    return (
        f"UNWIND $rows AS row MATCH (a:{NODE_LABEL} {{id: row.src}}) MATCH (b:{NODE_LABEL} {{id: row.dst}}) "
        f"{verb} (a)-[r:{safe_label(rtype)}]->(b) SET r += row.props"
    )


def batched(rows: Iterable[Any], size: int) -> Iterator[list[Any]]:
    buf = []
    for r in rows:
        buf.append(r)
        if len(buf) >= size:
            yield buf
            buf = []
    if buf:
        yield buf


def edge_patterns(store: "GraphStore", relationship_types: list[str]) -> list[tuple[str, str, str]]:
    """Every (label)-[type]->(label) pattern, one scan per relationship type: sampling the first
    N edges (as before) missed the types that came late in the load."""
    out = set()
    for rtype in relationship_types:
        rows = store.read(f"MATCH (a)-[r:{safe_label(rtype)}]->(b) RETURN DISTINCT labels(a) AS la, labels(b) AS lb", max_rows=5000, timeout_ms=60_000)
        for row in rows:
            la = [x for x in row["la"] if x not in GENERIC_LABELS] or [x for x in row["la"] if x != NODE_LABEL] or [NODE_LABEL]
            lb = [x for x in row["lb"] if x not in GENERIC_LABELS] or [x for x in row["lb"] if x != NODE_LABEL] or [NODE_LABEL]
            out.add((la[-1], rtype, lb[-1]))
    return sorted(out)


def label_properties(store: "GraphStore", label: str, sample: int = 200, examples: int = 3) -> dict[str, PropertyInfo]:
    """Property keys of a label with their type and a few distinct example values (long text cut)."""
    rows = store.read(f"MATCH (n:{safe_label(label)}) RETURN n LIMIT {int(sample)}", max_rows=sample)
    info: dict[str, PropertyInfo] = {}
    for row in rows:
        for k, v in row["n"].items():
            if k.startswith("_") or k in INTERNAL_PROPERTIES or v is None:
                continue
            p = info.setdefault(k, PropertyInfo(property_type(v)))
            p.seen += 1
            shown = v[:80] + "..." if isinstance(v, str) and len(v) > 80 else v
            if len(p.examples) < examples and shown not in p.examples:
                p.examples.append(shown)
    return dict(sorted(info.items()))


def introspect_schema(store: "GraphStore") -> GraphSchema:
    """Labels, counts, typed properties per label and every relationship pattern, through the
    shared Cypher both engines accept."""
    schema = GraphSchema(
        labels=sorted(next(iter(r.values())) for r in store.read("CALL db.labels()")),
        relationship_types=sorted(next(iter(r.values())) for r in store.read("CALL db.relationshipTypes()")),
        property_keys=sorted(next(iter(r.values())) for r in store.read("CALL db.propertyKeys()")),
    )
    schema.node_count = store.count_nodes()
    schema.edge_count = store.count_edges()
    for label in schema.labels:
        if label not in GENERIC_LABELS:
            rows = store.read(f"MATCH (n:{safe_label(label)}) RETURN count(n) AS c")
            schema.label_counts[label] = int(rows[0]["c"]) if rows else 0
            schema.properties[label] = label_properties(store, label)
    schema.patterns = edge_patterns(store, schema.relationship_types)
    return schema


class GraphStore(ABC):
    """Load, introspect and query a chunk graph. Subclasses implement the engine-specific parts."""

    backend: str = "abstract"
    vector_literal: str = "row.embedding"

    # ---- engine-specific ----
    @abstractmethod
    def write(self, query: str, params: dict[str, Any] | None = None) -> list[dict[str, Any]]: ...

    @abstractmethod
    def _read(self, query: str, params: dict[str, Any], timeout_ms: int, max_rows: int) -> tuple[list[dict[str, Any]], bool]: ...

    @abstractmethod
    def ensure_indexes(self, dim: int | None, wait: bool = True) -> None:
        """The id index, and the vector index when dim is given. Both engines populate an index over
        existing nodes in the background: wait=False lets a bulk load go on meanwhile; call
        `await_indexes` before the vector index is queried."""

    @abstractmethod
    def await_indexes(self, timeout_s: float = 600.0) -> None: ...

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

    def ensure_fulltext(self) -> None:
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
    def load_nodes(self, nodes: list[Node], vectors: np.ndarray | None = None, batch_size: int = 1000, create: bool = False) -> int:
        """MERGE by id: loading the same nodes twice leaves one copy of each. `create=True` is for a
        graph known to hold none of these nodes (a fresh load): CREATE skips the lookup per row."""
        return self.run_writes(self.node_writes(nodes, vectors, batch_size, create))

    def node_writes(self, nodes: list[Node], vectors: np.ndarray | None = None, batch_size: int = 1000, create: bool = False) -> Iterator[Write]:
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

    def diff_writes(self, diff: GraphDiff, nodes: list[Node], vectors: np.ndarray, batch_size: int = 1000) -> Iterator[Write]:
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
        yield from (Write(edge_write_query(rtype, False), rows, n) for rtype, rows, n in self.edge_batches(diff.write_edges, batch_size))

    def apply_diff(self, diff: GraphDiff, nodes: list[Node], vectors: np.ndarray, batch_size: int = 1000) -> int:
        """Apply a diff to this store graph as one unit where the engine has transactions (Neo4j);
        FalkorDB applies it to a copy no reader has opened yet (`copy_graph`)."""
        return self.run_atomically(self.diff_writes(diff, nodes, vectors, batch_size))

    def run_atomically(self, writes: Iterable[Write]) -> int:
        return self.run_writes(writes)

    def copy_graph(self, source: str) -> None:
        """Make this store graph a copy of another graph of the store (replacing what it held)."""
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
            groups.setdefault(rtype, []).append({"src": src[i], "dst": dst[i], "props": {"weight": weight[i], "metadata": meta[i] or "{}"}})
        for rtype, rows in groups.items():
            for part in batched(rows, batch_size):
                yield rtype, part, len(part)

    def load_edges(self, edges: list[Edge], batch_size: int = 1000, create: bool = False) -> int:
        return self.load_edge_table(edges_to_table(edges), batch_size, create)

    def load_edge_table(self, table: pa.Table, batch_size: int = 1000, create: bool = False) -> int:
        """MERGE edges.parquet into the graph, one query per relationship type (Cypher cannot
        parameterise a type). `create=True` is for a graph known to hold none of these edges."""
        return self.run_writes(Write(edge_write_query(rtype, create), rows, n) for rtype, rows, n in self.edge_batches(table, batch_size))

    def count_nodes(self) -> int:
        rows = self.read("MATCH (n) RETURN count(n) AS c")
        return int(rows[0]["c"]) if rows else 0

    def count_edges(self) -> int:
        rows = self.read("MATCH ()-[r]->() RETURN count(r) AS c")
        return int(rows[0]["c"]) if rows else 0

    def neighbours(self, node_id: str, edge_type: str | None = None, limit: int = 100) -> list[dict[str, Any]]:
        rel = f":{safe_label(edge_type)}" if edge_type else ""
        q = f"MATCH (a:{NODE_LABEL} {{id: $id}})-[r{rel}]-(b:{NODE_LABEL}) RETURN b.id AS id, type(r) AS type, b.modality AS modality LIMIT $limit"
        return self.read(q, {"id": node_id, "limit": limit})

    def read(self, query: str, params: dict[str, Any] | None = None, timeout_ms: int = 10_000, max_rows: int = 10_000) -> list[dict[str, Any]]:
        """Run a query that must not write: guarded, time-limited and row-capped."""
        rows, _ = self.read_capped(query, params, timeout_ms, max_rows)
        return rows

    def read_capped(self, query: str, params: dict[str, Any] | None = None, timeout_ms: int = 10_000, max_rows: int = 10_000) -> tuple[list[dict[str, Any]], bool]:
        """(rows, truncated)."""
        return self._read(assert_read_only(query), params or {}, timeout_ms, max_rows)

    def read_untrusted(self, query: str, params: dict[str, Any] | None = None, timeout_ms: int = 10_000, max_rows: int = 1_000) -> tuple[list[dict[str, Any]], bool]:
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
