"""What a store must do to turn one build generation's graph into the next: the node and edge
difference, computed from the two generations' files.

A rebuild of a corpus that changed a little changes a little of the graph (node ids are content
hashes; edges are recomputed whole, but most survive), so loading the whole graph again is mostly
wasted: 16-19 s for OTT-QA's graph on this project's machine, growing with the corpus. The
difference instead is applied to a copy of the published store graph (FalkorDB, which holds
graphs side by side) or, in one transaction, to the one graph of a Neo4j database, whose readers
then see the old graph or the new one, never a half state. The same idea as an incremental
indexer's "upsert what changed, delete what went" (LlamaIndex's docstore hashes, graphrag's
update runs), keyed here by content so that the result is exactly the graph a full load gives.

A node whose stored row differs in anything (label, a property, its vector) is deleted and created
again rather than patched: a patch would have to remove the properties and labels it no longer
has, and re-creating it is what makes the result equal a full load by construction. The edges of
such a node go with it and are written again.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa

EDGE_KEY = ("src", "dst", "type")


@dataclass
class GraphDiff:
    """Node ids to delete (gone, or re-created because their row changed), indices of the new
    graph's nodes to write, old edges to delete whose ends both stay, and new graph edges to write
    (added, changed, or touching a re-created node)."""

    delete_nodes: list[str] = field(default_factory=list)
    write_nodes: list[int] = field(default_factory=list)
    delete_edges: pa.Table | None = None
    write_edges: pa.Table | None = None
    counts: dict[str, int] = field(default_factory=dict)

    @property
    def writes(self) -> int:
        """Rows the store must touch: what the diff costs, against a full load's nodes + edges."""
        return (
            len(self.delete_nodes)
            + len(self.write_nodes)
            + (len(self.delete_edges) if self.delete_edges is not None else 0)
            + (len(self.write_edges) if self.write_edges is not None else 0)
        )

    @property
    def empty(self) -> bool:
        return self.writes == 0


def node_digests(nodes: pa.Table, vectors: np.ndarray) -> np.ndarray:
    """A 64-bit digest per node of everything the store holds for it: its nodes.parquet row (the
    store row and labels are a function of it, under one store code version) and its vector.
    pandas hashes the columns in C (`hash_pandas_object`): hashing each row's JSON in Python took
    most of a diff's time."""
    import pandas as pd

    rows = pd.util.hash_pandas_object(nodes.to_pandas(), index=False).to_numpy()
    vectors = np.ascontiguousarray(vectors, dtype=np.float32)
    vecs = np.frombuffer(
        b"".join(hashlib.blake2b(v.tobytes(), digest_size=8).digest() for v in vectors), dtype=np.uint64
    )
    return rows * np.uint64(0x9E3779B97F4A7C15) ^ vecs


def _edge_frame(table: pa.Table):
    frame = table.select([*EDGE_KEY, "weight", "metadata"]).to_pandas()
    frame["weight"] = frame["weight"].astype("float64")
    frame["metadata"] = frame["metadata"].fillna("{}")
    return frame


def unique_edges(table: pa.Table) -> bool:
    """A diff keys edges by (src, dst, type); a graph holding two such edges is loaded whole."""
    return not table.select(list(EDGE_KEY)).to_pandas().duplicated().any()


def graph_diff(
    old_nodes: pa.Table,
    old_vectors: np.ndarray,
    old_edges: pa.Table,
    new_nodes: pa.Table,
    new_vectors: np.ndarray,
    new_edges: pa.Table,
) -> GraphDiff:
    """The difference from the old generation to the new one (their nodes.parquet tables, vectors
    in the same order, edges.parquet tables). Pure: reads nothing, writes nothing."""
    import pandas as pd

    old = pd.Series(node_digests(old_nodes, old_vectors), index=old_nodes.column("id").to_pylist())
    new = pd.Series(node_digests(new_nodes, new_vectors), index=new_nodes.column("id").to_pylist())
    in_old = new.index.isin(old.index)
    added = new.index[~in_old]
    removed = old.index[~old.index.isin(new.index)]
    common = new.index[in_old]
    changed = common[new.loc[common].to_numpy() != old.loc[common].to_numpy()]
    gone = removed.union(changed)  # their edges go with them (DETACH DELETE)

    both = pd.merge(
        _edge_frame(old_edges),
        _edge_frame(new_edges).reset_index(names="row"),
        on=list(EDGE_KEY),
        how="outer",
        suffixes=("_old", ""),
        indicator=True,
    )
    only_old, only_new, kept = both["_merge"] == "left_only", both["_merge"] == "right_only", both["_merge"] == "both"
    differs = kept & ((both["weight_old"] != both["weight"]) | (both["metadata_old"] != both["metadata"]))
    touches = both["src"].isin(changed) | both["dst"].isin(changed)
    dropped = both[only_old & ~both["src"].isin(gone) & ~both["dst"].isin(gone)]
    rows = np.sort(both.loc[only_new | differs | (kept & touches), "row"].to_numpy(dtype=np.int64))
    position = pd.Series(np.arange(len(new)), index=new.index)
    return GraphDiff(
        delete_nodes=[*removed, *changed],
        write_nodes=sorted(position.loc[added.union(changed)].tolist()),
        delete_edges=pa.Table.from_pandas(dropped[list(EDGE_KEY)], preserve_index=False),
        write_edges=new_edges.take(pa.array(rows, pa.int64())),
        counts={
            "nodes_added": len(added),
            "nodes_removed": len(removed),
            "nodes_changed": len(changed),
            "edges_added": int(only_new.sum()),
            "edges_changed": int(differs.sum()),
            "edges_removed": int(only_old.sum()),
        },
    )


def edge_key_batches(table: pa.Table, batch_size: int) -> Iterator[tuple[str, list[dict[str, str]]]]:
    """(type, [{src, dst}, ...]) per batch of edges to delete, grouped by type (Cypher cannot
    parameterise a relationship type)."""
    groups: dict[str, list[dict[str, str]]] = {}
    for src, dst, rtype in zip(*(table.column(c).to_pylist() for c in EDGE_KEY)):
        groups.setdefault(rtype, []).append({"src": src, "dst": dst})
    for rtype, rows in groups.items():
        for start in range(0, len(rows), batch_size):
            yield rtype, rows[start : start + batch_size]
