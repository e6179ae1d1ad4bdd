"""Which metadata text of a node is embedded under which field name, and its entity set.

Edges compare fields across modalities (e.g. a passage's topic against a table's title), so every
modality fills the same field names; a missing field falls back to the node text.
"""

from __future__ import annotations

from typing import Any

from sagegraph.construct.entities import normalise
from sagegraph.model import DOC_CHUNK, TABLE_CHUNK, Node

FIELDS = ("content", "topic", "title", "columns")


def field_texts(node: Node) -> dict[str, str]:
    meta = node.metadata
    if node.modality == TABLE_CHUNK:
        title = ". ".join(x for x in (meta.get("table_title") or node.title, meta.get("table_description", "")) if x)
        cols = meta.get("col_desc") or {}
        columns = "; ".join(f"{h}: {cols.get(h, '')}".rstrip(": ") for h in meta.get("header", cols.keys()))
        return {
            "content": node.text,
            "topic": meta.get("table_description") or title,
            "title": title,
            "columns": columns or title,
        }
    topic = meta.get("topic") or node.text[:300]
    title = meta.get("title") or node.title or topic
    return {"content": node.text, "topic": topic, "title": title, "columns": node.text}


def entity_set(node: Node) -> set[str]:
    return entity_names(node.modality, node.title, node.metadata)


def entity_names(modality: str, title: str, metadata: dict[str, Any]) -> set[str]:
    """A node's entity set from its columns, for readers that never make the Node (the edge stage
    reads a large KB's 129k nodes as columns)."""
    names = set(metadata.get("entities", {}) or {})
    if modality == DOC_CHUNK and title:
        names.add(title)
    return {k for k in (normalise(n) for n in names) if len(k) > 1}
