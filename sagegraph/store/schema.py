"""What an LLM planner is shown of a store: labels with counts and typed properties (a few example
values each) and every (label)-[type]->(label) pattern, read through Cypher both engines accept."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol

from sagegraph.store.mapping import GENERIC_LABELS, INTERNAL_PROPERTIES, NODE_LABEL, property_type, safe_label


class ReadableStore(Protocol):
    """What introspection needs of a store (any GraphStore), named here so that this module does
    not import the interface that calls it."""

    def read(
        self, query: str, params: dict[str, Any] | None = None, timeout_ms: int = 10_000, max_rows: int = 10_000
    ) -> list[dict[str, Any]]: ...

    def count_nodes(self) -> int: ...

    def count_edges(self) -> int: ...


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
        lines = [
            f"Node labels: {', '.join(self.labels)}",
            f"Relationship types: {', '.join(self.relationship_types)}",
            f"Property keys: {', '.join(self.property_keys)}",
        ]
        lines += [f"(:{a})-[:{r}]->(:{b})" for a, r, b in self.patterns]
        return "\n".join(lines)


def edge_patterns(store: ReadableStore, relationship_types: list[str]) -> list[tuple[str, str, str]]:
    """Every (label)-[type]->(label) pattern, one scan per relationship type: sampling the first
    N edges (as before) missed the types that came late in the load."""
    out = set()
    for rtype in relationship_types:
        rows = store.read(
            f"MATCH (a)-[r:{safe_label(rtype)}]->(b) RETURN DISTINCT labels(a) AS la, labels(b) AS lb",
            max_rows=5000,
            timeout_ms=60_000,
        )
        for row in rows:
            la = (
                [x for x in row["la"] if x not in GENERIC_LABELS]
                or [x for x in row["la"] if x != NODE_LABEL]
                or [NODE_LABEL]
            )
            lb = (
                [x for x in row["lb"] if x not in GENERIC_LABELS]
                or [x for x in row["lb"] if x != NODE_LABEL]
                or [NODE_LABEL]
            )
            out.add((la[-1], rtype, lb[-1]))
    return sorted(out)


def label_properties(store: ReadableStore, label: str, sample: int = 200, examples: int = 3) -> dict[str, PropertyInfo]:
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


def introspect_schema(store: ReadableStore) -> GraphSchema:
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
