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

A node whose stored row differs but whose labels stay (an edited text, a renamed KB object) has
its properties replaced in place (`SET n = ...`, which drops the ones it no longer has), so its
edges stay where they are: re-creating it would delete and write again every edge it has, tens
of thousands for a hub. A node whose labels change (its modality or KB type) is deleted and
created again, its edges with it: Cypher cannot remove a label it does not name.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa

EDGE_KEY = ("src", "dst", "type")


@dataclass
class GraphDiff:
    """Node ids to delete (gone, or re-created because their labels changed), indices of the new
    graph's nodes to write, indices of those whose properties are replaced in place (changed,
    same labels), old edges to delete (gone, or touching a node deleted), and new graph edges to
    write (added, changed, or touching a re-created node)."""

    delete_nodes: list[str] = field(default_factory=list)
    write_nodes: list[int] = field(default_factory=list)
    update_nodes: list[int] = field(default_factory=list)
    delete_edges: pa.Table | None = None
    write_edges: pa.Table | None = None
    counts: dict[str, int] = field(default_factory=dict)

    @property
    def writes(self) -> int:
        """Rows the store must touch: what the diff costs, against a full load's nodes + edges."""
        return (
            len(self.delete_nodes)
            + len(self.write_nodes)
            + len(self.update_nodes)
            + (len(self.delete_edges) if self.delete_edges is not None else 0)
            + (len(self.write_edges) if self.write_edges is not None else 0)
        )

    @property
    def empty(self) -> bool:
        return self.writes == 0


def node_digests(nodes: pa.Table, vectors: np.ndarray) -> np.ndarray:
    """A 64-bit digest per node of everything the store holds for it: its nodes.parquet row (the
    store row and labels are a function of it, under one store code version) and its vector.
    pandas hashes the columns in C (`hash_pandas_object`), the vectors are hashed as arrays
    (`vector_digests`): hashing each row in Python took most of a diff's time."""
    import pandas as pd

    rows = pd.util.hash_pandas_object(nodes.to_pandas(), index=False).to_numpy()
    return rows * np.uint64(0x9E3779B97F4A7C15) ^ vector_digests(vectors)


def vector_digests(vectors: np.ndarray, rows_at_once: int = 8192) -> np.ndarray:
    """A 64-bit digest per vector of its exact float32 bits: a polynomial over its 32-bit words
    modulo 2**64 (each term an odd multiple, so changing any one word changes the digest), then
    mixed by splitmix64's finaliser. Computed a bounded block of rows at a time."""
    if len(vectors) == 0:
        return np.zeros(0, dtype=np.uint64)
    words = np.ascontiguousarray(vectors, dtype=np.float32).reshape(len(vectors), -1).view(np.uint32)
    powers = np.cumprod(np.full(words.shape[1], 0x100000001B3, dtype=np.uint64), dtype=np.uint64)
    digests = np.empty(len(words), dtype=np.uint64)
    with np.errstate(over="ignore"):
        for start in range(0, len(words), rows_at_once):
            block = words[start : start + rows_at_once].astype(np.uint64)
            digests[start : start + rows_at_once] = (block * powers).sum(axis=1, dtype=np.uint64)
        digests ^= digests >> np.uint64(30)
        digests *= np.uint64(0xBF58476D1CE4E5B9)
        digests ^= digests >> np.uint64(27)
        digests *= np.uint64(0x94D049BB133111EB)
        digests ^= digests >> np.uint64(31)
    return digests


# The string columns of edges.parquet read as dictionaries (`read_generation`): a few hundred
# thousand distinct ends and types, and metadata texts, behind millions of rows. Reading them so
# took a seventh of the time of reading them as strings, and a diff codes the distinct values only.
DICTIONARY_COLUMNS = ("src", "dst", "type", "metadata")


def _value_chunks(column: pa.ChunkedArray | pa.Array) -> list[pa.Array]:
    chunks = column.chunks if isinstance(column, pa.ChunkedArray) else [column]
    return [chunk.dictionary if pa.types.is_dictionary(chunk.type) else chunk for chunk in chunks]


class _ValueCodes:
    """The values of string columns (plain or dictionary-encoded) as their int64 positions among
    every value the columns hold (Arrow's `index_in`, in C++; for a dictionary, of its distinct
    values only), so equal codes are equal strings; -1 for a null or a value not among them."""

    def __init__(self, *columns: pa.ChunkedArray | pa.Array):
        import pyarrow.compute as pc

        chunks = [chunk.cast(pa.string()) for column in columns for chunk in _value_chunks(column)]
        self.values = pc.unique(pa.chunked_array(chunks, type=pa.string())).drop_null()

    def __len__(self) -> int:
        return len(self.values)

    def of(self, column: pa.ChunkedArray | pa.Array) -> np.ndarray:
        import pyarrow.compute as pc

        def codes(values: pa.Array) -> np.ndarray:
            found = pc.index_in(values.cast(pa.string()), value_set=self.values, skip_nulls=True)
            return np.asarray(pc.fill_null(found, -1), dtype=np.int64)

        chunks = column.chunks if isinstance(column, pa.ChunkedArray) else [column]
        if not chunks or not pa.types.is_dictionary(column.type):
            return np.concatenate([codes(chunk) for chunk in chunks]) if chunks else np.zeros(0, np.int64)
        if isinstance(column, pa.ChunkedArray):
            chunks = column.unify_dictionaries().chunks  # one dictionary for every chunk: coded once
        at = codes(chunks[0].dictionary)
        parts = []
        for chunk in chunks:
            indices = chunk.indices
            part = at[np.asarray(indices.fill_null(0), dtype=np.int64)] if len(at) else np.full(len(chunk), -1)
            if indices.null_count:
                part[np.asarray(indices.is_null(), dtype=bool)] = -1
            parts.append(part)
        return np.concatenate(parts)


class _EdgeCodes:
    """Edges of two graphs as one int64 key each: the (src, dst, type) strings replaced by their
    positions among every end and every type the two graphs hold (`_ValueCodes`), so the key is
    exact and equal keys are equal edges. Comparing 6.5M edge keys as three string columns in a
    pandas merge took most of a diff's time."""

    def __init__(self, *tables: pa.Table):
        self.ends = _ValueCodes(*(t[name] for t in tables for name in ("src", "dst")))
        self.types = _ValueCodes(*(t["type"] for t in tables))

    def end_codes(self, column: pa.ChunkedArray | pa.Array) -> np.ndarray:
        return self.ends.of(column)

    def ends_of(self, table: pa.Table) -> tuple[np.ndarray, np.ndarray]:
        return self.end_codes(table["src"]), self.end_codes(table["dst"])

    def keys(self, table: pa.Table, ends: tuple[np.ndarray, np.ndarray] | None = None) -> np.ndarray:
        """`ends`: the table's `ends_of`, where the caller has them already."""
        src, dst = ends or self.ends_of(table)
        return (src * len(self.ends) + dst) * len(self.types) + self.types.of(table["type"])


def decoded(table: pa.Table) -> pa.Table:
    """`table` with its dictionary-encoded columns as plain values: what a store's writes read."""
    for at, column in enumerate(table.columns):
        if pa.types.is_dictionary(column.type):
            table = table.set_column(at, table.field(at).name, column.cast(column.type.value_type))
    return table


def unique_edges(table: pa.Table) -> bool:
    """A diff keys edges by (src, dst, type); a graph holding two such edges is loaded whole."""
    keys = np.sort(_EdgeCodes(table).keys(table))  # np.unique took 20x a sort on 1.8M keys (numpy 2)
    return not bool((keys[1:] == keys[:-1]).any())


def _sorted_with_order(keys: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(keys sorted, the row of each): where key and row fit in 63 bits together, one plain sort
    of `key << row_bits | row`, several times faster than `np.argsort` on millions of keys."""
    row_bits = max(1, int(len(keys)).bit_length())
    if len(keys) and keys.min() >= 0 and int(keys.max()).bit_length() + row_bits <= 63:
        packed = np.sort((keys << row_bits) | np.arange(len(keys), dtype=np.int64))
        return packed >> row_bits, packed & ((1 << row_bits) - 1)
    order = np.argsort(keys)
    return keys[order], order


def _common_keys(old_keys: np.ndarray, new_keys: np.ndarray) -> tuple[np.ndarray, np.ndarray] | None:
    """(old rows, new rows) of the edge keys both graphs hold, or None where either graph repeats
    a key. One sort per side serves both the check and the match (a binary search of the sorted
    new keys in the sorted old ones, in order, so it reads memory in order too), where
    `np.intersect1d` would sort both again, together."""
    (old_sorted, old_order), (new_sorted, new_order) = _sorted_with_order(old_keys), _sorted_with_order(new_keys)
    if (old_sorted[1:] == old_sorted[:-1]).any() or (new_sorted[1:] == new_sorted[:-1]).any():
        return None
    if len(old_sorted) == 0:
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    at = np.minimum(np.searchsorted(old_sorted, new_sorted), len(old_sorted) - 1)
    hit = old_sorted[at] == new_sorted
    return old_order[at[hit]], new_order[hit]


def graph_diff(
    old_nodes: pa.Table,
    old_vectors: np.ndarray,
    old_edges: pa.Table,
    new_nodes: pa.Table,
    new_vectors: np.ndarray,
    new_edges: pa.Table,
) -> GraphDiff | None:
    """The difference from the old generation to the new one (their nodes.parquet tables, vectors
    in the same order, edges.parquet tables); None where either holds an edge key twice (a
    difference keyed by edges cannot stand for it). Pure: reads nothing, writes nothing."""
    import pyarrow.compute as pc

    old_ids, new_ids = old_nodes.column("id"), new_nodes.column("id")
    old_row_of = pc.index_in(new_ids, value_set=old_ids)  # per new node, its row in the old graph
    in_old = np.asarray(pc.is_valid(old_row_of), dtype=bool)
    old_rows = np.asarray(pc.fill_null(old_row_of, 0), dtype=np.int64)
    added = np.flatnonzero(~in_old)
    removed = np.flatnonzero(~np.asarray(pc.is_in(old_ids, value_set=new_ids), dtype=bool))
    common = np.flatnonzero(in_old)
    old_digests, new_digests = node_digests(old_nodes, old_vectors), node_digests(new_nodes, new_vectors)
    changed = common[new_digests[common] != old_digests[old_rows[common]]]
    relabelled = changed[~_same_labels(old_nodes, old_rows[changed], new_nodes, changed)]
    gone_ids = pa.concat_arrays(
        [_taken(old_ids, removed), _taken(new_ids, relabelled)]
    )  # their edges are deleted too, before them

    codes = _EdgeCodes(old_edges, new_edges)
    old_ends, new_ends = codes.ends_of(old_edges), codes.ends_of(new_edges)
    old_keys, new_keys = codes.keys(old_edges, old_ends), codes.keys(new_edges, new_ends)
    matched = _common_keys(old_keys, new_keys)
    if matched is None:
        return None
    old_at, new_at = matched
    only_old = np.ones(len(old_keys), bool)
    only_old[old_at] = False
    only_new = np.ones(len(new_keys), bool)
    only_new[new_at] = False
    weight_old = old_edges["weight"].to_numpy().astype(np.float64)[old_at]
    weight_new = new_edges["weight"].to_numpy().astype(np.float64)[new_at]
    metadata = _ValueCodes(old_edges["metadata"], new_edges["metadata"], pa.array(["{}"]))
    empty = metadata.of(pa.array(["{}"]))[0]  # no metadata reads as "{}"
    meta_old, meta_new = (
        np.where(codes < 0, empty, codes)
        for codes in (metadata.of(old_edges["metadata"])[old_at], metadata.of(new_edges["metadata"])[new_at])
    )
    differs = (weight_old != weight_new) | (meta_old != meta_new)

    def touching(ends: tuple[np.ndarray, np.ndarray], ids: pa.Array) -> np.ndarray:
        these = codes.end_codes(ids)
        these = these[these >= 0]
        return np.isin(ends[0], these) | np.isin(ends[1], these)

    old_touch_gone = touching(old_ends, gone_ids)
    new_touch_changed = touching(new_ends, _taken(new_ids, relabelled))
    # The edges of a node deleted or re-created go by their keys too, a bounded batch at a time,
    # before the node: a DETACH DELETE of a batch of hubs removes their edges in one query, which
    # exceeded the engine's per-query memory at STaRK-PRIME's size.
    dropped = np.flatnonzero(only_old | old_touch_gone)
    rewrite = np.zeros(len(new_keys), bool)
    rewrite[new_at[differs]] = True
    rewrite[new_at[new_touch_changed[new_at]]] = True
    rows = np.flatnonzero(only_new | rewrite)
    return GraphDiff(
        delete_nodes=gone_ids.to_pylist(),
        write_nodes=np.union1d(added, relabelled).tolist(),
        update_nodes=np.setdiff1d(changed, relabelled).tolist(),
        delete_edges=decoded(old_edges.select(list(EDGE_KEY)).take(pa.array(dropped, pa.int64()))),
        write_edges=decoded(new_edges.take(pa.array(rows, pa.int64()))),
        counts={
            "nodes_added": len(added),
            "nodes_removed": len(removed),
            "nodes_changed": len(changed),
            "edges_added": int(only_new.sum()),
            "edges_changed": int(differs.sum()),
            "edges_removed": int(only_old.sum()),
        },
    )


def _taken(column: pa.ChunkedArray, rows: np.ndarray) -> pa.Array:
    """`column`'s values at `rows`, as one array."""
    return column.take(pa.array(rows, pa.int64())).combine_chunks()


def _same_labels(old_nodes: pa.Table, old_rows: np.ndarray, new_nodes: pa.Table, new_rows: np.ndarray) -> np.ndarray:
    """Per pair of rows, whether the old and the new node have the same `modality` and `type`:
    what a node's store labels are made of (`store.mapping.node_label`)."""
    import pyarrow.compute as pc

    same = np.ones(len(new_rows), dtype=bool)
    for name in ("modality", "type"):
        before = pc.fill_null(_taken(old_nodes.column(name), old_rows), "")
        after = pc.fill_null(_taken(new_nodes.column(name), new_rows), "")
        same &= np.asarray(pc.equal(before, after), dtype=bool)
    return same


def edge_key_batches(table: pa.Table, batch_size: int) -> Iterator[tuple[str, list[dict[str, str]]]]:
    """(type, [{src, dst}, ...]) per batch of edges to delete, grouped by type (Cypher cannot
    parameterise a relationship type)."""
    groups: dict[str, list[dict[str, str]]] = {}
    for src, dst, rtype in zip(*(table.column(c).to_pylist() for c in EDGE_KEY)):
        groups.setdefault(rtype, []).append({"src": src, "dst": dst})
    for rtype, rows in groups.items():
        for start in range(0, len(rows), batch_size):
            yield rtype, rows[start : start + batch_size]
