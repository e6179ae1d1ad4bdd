"""How sagegraph's records become store nodes: labels (whitelisted text, since Cypher cannot take
them as parameters), typed KB properties, and the property row of a node."""

from __future__ import annotations

import json
from typing import Any

from sagegraph.model import DOC_CHUNK, ENTITY, TABLE_CHUNK, Node, property_key, safe_label

NODE_LABEL = "Node"
MODALITY_LABELS = {DOC_CHUNK: "DocChunk", TABLE_CHUNK: "TableChunk", ENTITY: "Entity"}


# Properties every node has for sagegraph's own use; a schema card for Cypher writers leaves them out.
INTERNAL_PROPERTIES = {
    "modality",
    "type",
    "text",
    "source_id",
    "position",
    "topic",
    "entities",
    "metadata",
    "embedding",
}
# Store labels that say what kind of node a row is rather than what it is.
GENERIC_LABELS = {NODE_LABEL, *MODALITY_LABELS.values()}


def kb_properties(fields: dict[str, Any]) -> dict[str, Any]:
    """A KB object's fields as typed node properties (`m.year > 2000` must compare numbers), each
    under its `property_key`."""
    out = {}
    for k, v in fields.items():
        key = property_key(k)
        if isinstance(v, (dict, tuple)) or (
            isinstance(v, list) and not all(isinstance(x, (str, int, float, bool)) for x in v)
        ):
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
    row: dict[str, Any] = {
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
