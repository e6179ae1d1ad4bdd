"""The Cypher of bulk writes, in the dialect both engines accept (UNWIND/MERGE, plain labels, no
APOC): one query per batch with `$rows` bound."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any

from sagegraph.store.mapping import NODE_LABEL, safe_label


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


def node_update_query(vector_literal: str | None) -> str:
    """A node's properties replaced whole (`SET n =` drops the ones not in the map; the map holds
    its id), its labels and edges left as they are."""
    set_vec = f" SET n.embedding = {vector_literal}" if vector_literal else ""
    return f"UNWIND $rows AS row MATCH (n:{NODE_LABEL} {{id: row.id}}) SET n = row.props{set_vec}"


def edge_delete_query(rtype: str) -> str:
    """Both ends found by the id index before the edge is looked for between them (FalkorDB's
    Expand Into): matched as one pattern, the engine walked every edge of the first end and
    filtered on the second, 21 s for 1,000 edges of a 23,628-edge hub, and a batch of them
    exceeded its per-query memory."""
    return (
        f"UNWIND $rows AS row MATCH (a:{NODE_LABEL} {{id: row.src}}) WITH a, row "
        f"MATCH (b:{NODE_LABEL} {{id: row.dst}}) WITH a, b MATCH (a)-[r:{safe_label(rtype)}]->(b) DELETE r"
    )


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
