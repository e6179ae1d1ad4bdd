"""Node and edge records, content-hash ids and their Parquet layout.

Ids are content hashes so that rebuilding the same corpus yields the same ids and reloading the
graph store is idempotent (MERGE by id never duplicates).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

DOC_CHUNK = "doc_chunk"
TABLE_CHUNK = "table_chunk"
ENTITY = "entity"
MODALITIES = (DOC_CHUNK, TABLE_CHUNK, ENTITY)

SAME_SOURCE = "SAME_SOURCE"
NEXT_CHUNK = "NEXT_CHUNK"
STRUCTURAL_EDGE_TYPES = (SAME_SOURCE, NEXT_CHUNK)
SIMILAR_PREFIX = "SIMILAR_"


_SAFE = set("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_")
# Store properties of every node that are sagegraph's own: a KB field of one of these names is
# stored as `field_<name>` so it cannot overwrite them (a field named `text` replaced the node's text).
RESERVED_PROPERTIES = {
    "id",
    "modality",
    "type",
    "text",
    "topic",
    "source_id",
    "metadata",
    "embedding",
    "entities",
    "position",
}


def safe_label(name: str) -> str:
    """Labels and relationship types cannot be parameters in Cypher, so they are whitelisted text.
    Two names can end as one (`depends-on`, `depends on`): `corpus.kb` refuses a KB where they do."""
    cleaned = "".join(c if c in _SAFE else "_" for c in name)
    if not cleaned or cleaned[0].isdigit():
        cleaned = "T_" + cleaned
    return cleaned


def property_key(field_name: str) -> str:
    """The store property a KB field is kept under."""
    key = safe_label(field_name)
    return f"field_{key}" if key in RESERVED_PROPERTIES else key


def content_id(*parts: str, prefix: str = "") -> str:
    """A stable 16-hex id of the given parts; the prefix keeps modalities readable in dumps."""
    h = hashlib.sha1("\x1f".join(parts).encode("utf-8")).hexdigest()[:16]
    return f"{prefix}{h}"


def node_id(modality: str, source_id: str, text: str) -> str:
    return content_id(modality, source_id, text, prefix={"doc_chunk": "d", "table_chunk": "t"}.get(modality, "e"))


@dataclass(slots=True)
class Node:
    id: str
    modality: str
    type: str
    text: str
    source_id: str
    title: str = ""
    position: int = 0
    metadata: dict[str, Any] = field(default_factory=dict)


@dataclass(slots=True)
class Edge:
    src: str
    dst: str
    type: str
    weight: float = 1.0
    metadata: dict[str, Any] = field(default_factory=dict)


NODE_SCHEMA = pa.schema(
    [
        ("id", pa.string()),
        ("modality", pa.string()),
        ("type", pa.string()),
        ("text", pa.string()),
        ("source_id", pa.string()),
        ("title", pa.string()),
        ("position", pa.int32()),
        ("metadata", pa.string()),  # JSON: title/topic/entities/... (METHODS §1)
    ]
)

EDGE_SCHEMA = pa.schema(
    [
        ("src", pa.string()),
        ("dst", pa.string()),
        ("type", pa.string()),
        ("weight", pa.float32()),
        ("metadata", pa.string()),  # JSON: signal scores, shared entities, joinable columns, rows
    ]
)


def _dumps(obj: dict[str, Any]) -> str:
    return json.dumps(obj, ensure_ascii=False, sort_keys=True)


def shallow_dict(record: Any) -> dict[str, Any]:
    """A dataclass record's fields by name, its values as they are: what `dataclasses.asdict`
    gives for records of plain values (strings, numbers, lists and dicts of them), without the
    deep copy it makes of every nested list and dict (1 s of a 39k-object KB's rebuild)."""
    return {name: getattr(record, name) for name in _field_names(type(record))}


_FIELD_NAMES: dict[type, tuple[str, ...]] = {}


def _field_names(kind: type) -> tuple[str, ...]:
    if kind not in _FIELD_NAMES:
        _FIELD_NAMES[kind] = tuple(f.name for f in fields(kind))
    return _FIELD_NAMES[kind]


def nodes_to_table(nodes: Iterable[Node]) -> pa.Table:
    rows = [shallow_dict(n) for n in nodes]
    for r in rows:
        r["metadata"] = _dumps(r["metadata"])
    return pa.Table.from_pylist(rows, schema=NODE_SCHEMA)


def edges_to_table(edges: Iterable[Edge]) -> pa.Table:
    rows = [shallow_dict(e) for e in edges]
    for r in rows:
        r["metadata"] = _dumps(r["metadata"])
    return pa.Table.from_pylist(rows, schema=EDGE_SCHEMA)


def table_to_nodes(table: pa.Table) -> list[Node]:
    return [Node(**{**r, "metadata": json.loads(r["metadata"] or "{}")}) for r in table.to_pylist()]


def table_to_edges(table: pa.Table) -> list[Edge]:
    return [Edge(**{**r, "metadata": json.loads(r["metadata"] or "{}")}) for r in table.to_pylist()]


def write_parquet(table: pa.Table, path: Path) -> Path:
    """Write atomically: a crash mid-write must never leave a half file that resume would trust."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(path.suffix + ".tmp")
    pq.write_table(table, tmp)
    tmp.replace(path)
    return path


def read_batch_table(path: Path, columns: list[str] | None = None) -> pa.Table:
    """One batch file's table, decoded on this thread. A batch file holds a few hundred rows, and
    `pq.read_table`'s dataset discovery and thread pool cost several times its decoding (a 1%
    rebuild of a large KB reads about two thousand of them)."""
    with pq.ParquetFile(path) as file:
        return file.read(columns=columns, use_threads=False)


def read_nodes(path: Path) -> list[Node]:
    return table_to_nodes(pq.read_table(path))


def read_edges(path: Path) -> list[Edge]:
    return table_to_edges(pq.read_table(path))
