"""How sagegraph's records become store nodes: labels (whitelisted text, since Cypher cannot take
them as parameters), typed KB properties, and the property row of a node."""

from __future__ import annotations

import json
from typing import Any

from sagegraph.model import DOC_CHUNK, ENTITY, TABLE_CHUNK, Node

NODE_LABEL = "Node"
MODALITY_LABELS = {DOC_CHUNK: "DocChunk", TABLE_CHUNK: "TableChunk", ENTITY: "Entity"}
_SAFE = set("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_")


def safe_label(name: str) -> str:
    """Labels and relationship types cannot be parameters in Cypher, so they are whitelisted text."""
    cleaned = "".join(c if c in _SAFE else "_" for c in name)
    if not cleaned or cleaned[0].isdigit():
        cleaned = "T_" + cleaned
    return cleaned


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


def node_label(node: Node) -> str:
    """The store labels of a node; KB nodes also carry their own type (`Entity:Paper`)."""
    label = MODALITY_LABELS.get(node.modality, "Entity")
    return f"{label}:{safe_label(node.type)}" if node.modality == ENTITY and node.type else label
