"""A semi-structured knowledge base in the STaRK SKB spirit: typed nodes with text fields, typed edges.

Layout: `nodes.jsonl` with {"id", "type", "fields": {name: value, ...}} (or the fields inline) and
`edges.jsonl` with {"src", "dst", "type"}.

Field values keep their JSON types (numbers stay numbers, lists stay lists of primitives, dates
are ISO strings), because they become typed properties in the graph store that LLM-written Cypher
filters on (`m.year > 2000`); only nested objects, which a store property cannot hold, become JSON
text.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pyarrow as pa

from sagegraph.corpus import kb_edges
from sagegraph.corpus.jsonl import ErrorPolicy, load_numbered, require
from sagegraph.corpus.records import KBObject, KBRelation
from sagegraph.errors import InputError
from sagegraph.model import property_key, safe_label

NODES = "nodes.jsonl"
EDGES = "edges.jsonl"
RESERVED = {"id", "type", "fields"}


def field_value(value: Any) -> Any:
    """A value a store property can hold: primitives and lists of primitives as they are."""
    if isinstance(value, (str, int, float, bool)):
        return value
    if isinstance(value, list) and all(isinstance(v, (str, int, float, bool)) for v in value):
        return value
    return json.dumps(value, ensure_ascii=False, sort_keys=True)


def parse_kb_node(obj: dict[str, Any], path: Path, lineno: int) -> KBObject:
    raw = obj.get("fields")
    if raw is None:
        raw = {k: v for k, v in obj.items() if k not in RESERVED}
    if not isinstance(raw, dict):
        raise InputError(path, lineno, "fields", "expected an object of fields")
    fields = {str(k): field_value(v) for k, v in raw.items() if v not in (None, "", [], {})}
    if not fields:
        raise InputError(path, lineno, "fields", "no non-empty text field")
    return KBObject(
        id=str(require(obj, "id", (str, int), path, lineno)),
        type=require(obj, "type", str, path, lineno),
        fields=fields,
    )


def parse_kb_edge(obj: dict[str, Any], path: Path, lineno: int) -> KBRelation:
    return KBRelation(
        src=str(require(obj, "src", (str, int), path, lineno)),
        dst=str(require(obj, "dst", (str, int), path, lineno)),
        type=require(obj, "type", str, path, lineno),
    )


class _StoreNames:
    """Names a KB gives (types, field keys, relation types) against what the store keeps them as
    (`safe_label`, `property_key`): two different names kept as one would merge silently in the
    store, so the second one is an error naming its line."""

    def __init__(self, path: Path, policy: ErrorPolicy):
        self.path, self.policy = path, policy
        self.first: dict[tuple[str, str], tuple[str, int]] = {}  # (what, stored) -> (name, line)

    def ok(self, what: str, name: str, stored: str, lineno: int, field: str) -> bool:
        seen = self.first.setdefault((what, stored), (name, lineno))
        if seen[0] == name:
            return True
        self.policy.handle(
            InputError(
                self.path,
                lineno,
                field,
                f"{what} {name!r} is kept in the graph store as {stored!r}, as {what} "
                f"{seen[0]!r} (line {seen[1]}) is: they would merge; rename one",
            )
        )
        return False


def load_kb(
    root: Path, policy: ErrorPolicy, relations_before: pa.Table | None = None
) -> tuple[list[KBObject], pa.Table]:
    """`relations_before`: the relations file's table as a build read it before, when the caller
    knows the file has not changed since; it is checked against the nodes as a reading is."""
    names = _StoreNames(root / NODES, policy)
    nodes = [
        n
        for lineno, n in load_numbered(root / NODES, parse_kb_node, policy, key=lambda n: n.id)
        if names.ok("node type", n.type, safe_label(n.type), lineno, "type")
        and all(names.ok("field", k, property_key(k), lineno, f"fields.{k}") for k in n.fields)
    ]
    edges_path = root / EDGES
    if not edges_path.exists():
        return nodes, kb_edges.empty_relations()
    fast = kb_edges.read_fast(edges_path, pa.array([n.id for n in nodes], pa.string()), relations_before)
    if fast is not None:
        return nodes, fast
    return nodes, _read_edges_by_line(edges_path, {n.id for n in nodes}, policy)


def _read_edges_by_line(edges_path: Path, known: set[str], policy: ErrorPolicy) -> pa.Table:
    """Every problem of the file named by its line, through the policy (raise, or skip and count)."""
    relation_names = _StoreNames(edges_path, policy)
    numbered = [
        (lineno, e)
        for lineno, e in load_numbered(edges_path, parse_kb_edge, policy)
        if relation_names.ok("relation type", e.type, safe_label(e.type), lineno, "type")
    ]
    for lineno, e in numbered:
        if e.src not in known or e.dst not in known:
            missing = e.src if e.src not in known else e.dst
            policy.handle(
                InputError(
                    edges_path,
                    lineno,
                    "src" if e.src == missing else "dst",
                    f"names unknown node {missing!r} (not in {NODES})",
                )
            )
    return kb_edges.from_triples((e.src, e.type, e.dst) for _, e in numbered if e.src in known and e.dst in known)
