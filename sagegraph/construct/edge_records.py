"""Kept candidate pairs -> the edge table, a column at a time.

A corpus yields half a million similarity edges; building a Python object and a json.dumps per edge
was most of the edge stage and what made it grow faster than its input. Here every column, the JSON
metadata included, is assembled by numpy and Arrow kernels over whole arrays. Extras that need node
content (joinable columns, row references) get the kept pairs as arrays and return one JSON-encoded
value per edge, so only they decide whether to loop.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import scipy.sparse as sp

from sagegraph.construct.edges import PairResult, ranges
from sagegraph.construct.entities import normalise
from sagegraph.model import DOC_CHUNK, EDGE_SCHEMA, SIMILAR_PREFIX, TABLE_CHUNK, Node

MAX_SHARED = 10  # shared entity names kept in an edge's metadata


@dataclass(frozen=True)
class KeptPairs:
    """What an extra sees: kept pairs (node row numbers) and their shared entity ids (CSR rows)."""

    a: np.ndarray
    b: np.ndarray
    shared_ptr: np.ndarray
    shared_cols: np.ndarray

    def shared(self, row: int) -> np.ndarray:
        return self.shared_cols[self.shared_ptr[row] : self.shared_ptr[row + 1]]


Extra = Callable[[KeptPairs, Sequence[str]], dict[str, Sequence[str] | pa.Array]]


def edge_type(signal: str) -> str:
    return f"{SIMILAR_PREFIX}{signal.upper()}"


def json_strings(values: Sequence[str]) -> pa.Array:
    return pa.array([json.dumps(v, ensure_ascii=False) for v in values], pa.string())


def numbers(x: np.ndarray, digits: int) -> pa.Array:
    return pc.cast(pa.array(np.round(np.asarray(x, np.float64), digits)), pa.string())


def repeated(text: str, rows: int) -> pa.Array:
    """`text` in every one of `rows` rows, made from its buffers: a KB's millions of relation
    edges carry one metadata string, and a list of it (or `pa.repeat`) took 2 s at 6.4M rows."""
    data = text.encode()
    offsets = np.arange(rows + 1, dtype=np.int64) * len(data)
    if offsets[-1] >= 2**31:
        return pa.LargeStringArray.from_buffers(rows, pa.py_buffer(offsets), pa.py_buffer(data * rows))
    return pa.StringArray.from_buffers(rows, pa.py_buffer(offsets.astype(np.int32)), pa.py_buffer(data * rows))


def concat(*parts: pa.Array | str) -> pa.Array:
    return pc.binary_join_element_wise(*parts, "")


def json_lists(offsets: np.ndarray, items: pa.Array) -> pa.Array:
    """One JSON list per row from CSR-style offsets into already JSON-encoded items."""
    lists = pa.ListArray.from_arrays(pa.array(offsets, pa.int32()), items)
    return concat("[", pc.binary_join(lists, ", "), "]")


def json_objects(fields: dict[str, pa.Array]) -> pa.Array:
    """Rows of '{"key": value, ...}' with sorted keys, the layout model._dumps writes."""
    parts: list[pa.Array | str] = ["{"]
    for n, key in enumerate(sorted(fields)):
        parts += [("" if n == 0 else ", ") + json.dumps(key) + ": ", fields[key]]
    parts.append("}")
    return concat(*parts)


def first_per_row(ptr: np.ndarray, limit: int) -> tuple[np.ndarray, np.ndarray]:
    """Offsets and positions of each CSR row's first `limit` entries."""
    take = np.minimum(np.diff(ptr), limit)
    return np.concatenate([[0], np.cumsum(take)]).astype(np.int64), ranges(ptr[:-1], take)


def shared_entities(E: sp.csr_matrix, a: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Entity ids each pair shares, ascending per pair, as CSR (ptr, cols)."""
    S = E[a].multiply(E[b]).tocsr()
    S.eliminate_zeros()
    S.sort_indices()
    return S.indptr.astype(np.int64), S.indices.astype(np.int64)


def by_node_id(id_arr: pa.Array, a: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Each pair (a[k], b[k]) of node rows with the lower node id (`id_arr`, by row) first."""
    turn = pc.greater(id_arr.take(pa.array(a)), id_arr.take(pa.array(b))).to_numpy(zero_copy_only=False)
    return np.where(turn, b, a), np.where(turn, a, b)


def shared_names(entity_names: Sequence[str], cols: np.ndarray) -> pa.Array:
    """JSON strings of the named entities, encoding only the names in use (a corpus has ~120k)."""
    used, at = np.unique(cols, return_inverse=True)
    return json_strings([entity_names[c] for c in used.tolist()]).take(pa.array(at))


def pair_edge_table(
    result: PairResult, ids: Sequence[str], E: sp.csr_matrix, entity_names: Sequence[str], extra: Extra | None = None
) -> pa.Table:
    """Kept pairs of one PairResult as rows of EDGE_SCHEMA; the type is the passing signal with the
    largest margin over its threshold, in units of that signal's spread. An edge's metadata holds
    only what the pair itself decides (its signal values, which passed, what the two share), not
    that margin: the threshold and spread are corpus-wide, so a margin stored on every edge would
    change on nearly every edge with any change to the corpus, and a rebuild would rewrite them all.
    A pair within one modality is written from its lower node id to its higher: node rows follow
    the batch names, which change with their members, so a direction by row would turn unchanged
    pairs round between generations and a rebuild's store difference would rewrite them (43,925 of
    the 44,526 edges one 1% rebuild of a PRIME-sized KB wrote). Its signals are symmetric, so only
    the ends swap."""
    keep = result.keep
    if not keep.any():
        return EDGE_SCHEMA.empty_table()
    id_arr = pa.array(ids, pa.string())
    a, b = result.a[keep], result.b[keep]
    if result.pair[0] == result.pair[1]:
        a, b = by_node_id(id_arr, a, b)
    vals = result.values[keep]
    thr = result.thresholds[None, :]
    above = vals > thr
    margin = np.where(above, (vals - thr) / (result.values.std(axis=0, dtype=np.float64) + 1e-6)[None, :], -np.inf)
    best = margin.argmax(axis=1)
    rows = np.arange(len(a))
    signals = list(result.signals)

    ptr, cols = shared_entities(E, a, b)
    offsets, pos = first_per_row(ptr, MAX_SHARED)
    kept = KeptPairs(a, b, ptr, cols)

    # which signals passed: one JSON list per bit pattern, looked up by the pattern's number
    pattern = (above * (1 << np.arange(len(signals)))).sum(axis=1)
    passed_json = pa.array(
        [json.dumps([s for k, s in enumerate(signals) if p >> k & 1]) for p in range(1 << len(signals))], pa.string()
    )
    fields: dict[str, pa.Array] = {
        "signals": json_objects({s: numbers(vals[:, k], 4) for k, s in enumerate(signals)}),
        "passed": passed_json.take(pa.array(pattern)),
        "shared_entities": json_lists(offsets, shared_names(entity_names, cols[pos])),
    }
    if extra is not None:
        fields.update(
            {
                k: v if isinstance(v, pa.Array) else pa.array(v, pa.string())
                for k, v in extra(kept, entity_names).items()
            }
        )
    types = pa.array([edge_type(s) for s in signals], pa.string())
    return pa.Table.from_arrays(
        [
            id_arr.take(pa.array(a)),
            id_arr.take(pa.array(b)),
            types.take(pa.array(best)),
            pa.array(vals[rows, best], pa.float32()),
            json_objects(fields),
        ],
        schema=EDGE_SCHEMA,
    )


# ---- extras: metadata that needs node content -----------------------------------------------------


def joinable_columns(nodes: Sequence[Node]) -> Extra:
    """Table-table edges: header names both chunks share (after normalisation), i.e. join keys."""
    headers: dict[int, dict[str, str]] = {}

    def header(i: int) -> dict[str, str]:
        if i not in headers:
            headers[i] = {k: h for h in nodes[i].metadata.get("header", []) if (k := normalise(h))}
        return headers[i]

    def extra(kept: KeptPairs, entity_names: Sequence[str]) -> dict[str, Sequence[str] | pa.Array]:
        out = []
        for i, j in zip(kept.a.tolist(), kept.b.tolist()):
            hi, hj = header(i), header(j)
            out.append(json.dumps(sorted(hi[k] for k in hi.keys() & hj.keys()), ensure_ascii=False))
        return {"joinable_columns": out}

    return extra


def row_references(nodes: Sequence[Node], limit: int = 10) -> Extra:
    """Doc-table edges: table rows (absolute row numbers) holding the passage's title or an entity
    both share. A quarter of a million kept pairs made a per-pair Python lookup the slowest part of
    the doc-table records, so cells become integer (table, key) codes once and every pair's keys
    are looked up together by binary search."""

    def extra(kept: KeptPairs, entity_names: Sequence[str]) -> dict[str, pa.Array]:
        key_id: dict[str, int] = {}
        cell_table, cell_key, cell_row = [], [], []
        for j in np.unique(kept.b).tolist():
            meta = nodes[j].metadata
            start = meta.get("row_start", 0)
            for r, row in enumerate(meta.get("rows", [])):
                for c in row:
                    if k := normalise(str(c)):
                        cell_table.append(j)
                        cell_key.append(key_id.setdefault(k, len(key_id)))
                        cell_row.append(start + r)
        n_keys = max(1, len(key_id))
        codes = np.asarray(cell_table, np.int64) * n_keys + np.asarray(cell_key, np.int64)
        order = np.argsort(codes, kind="stable")
        codes, rows = codes[order], np.asarray(cell_row, np.int64)[order]

        # every pair asks with its passage's title and the entities it shares with the table
        firsts, title_at = np.unique(kept.a, return_inverse=True)
        titles = np.array([key_id.get(normalise(nodes[i].title), -1) for i in firsts.tolist()], np.int64)
        used, ent_at = np.unique(kept.shared_cols, return_inverse=True)
        ents = np.array([key_id.get(entity_names[c], -1) for c in used.tolist()], np.int64)
        n = len(kept.a)
        ask_pair = np.concatenate([np.arange(n), np.repeat(np.arange(n), np.diff(kept.shared_ptr))])
        ask_key = np.concatenate([titles[title_at], ents[ent_at]]) if n else np.zeros(0, np.int64)
        ok = ask_key >= 0
        ask_pair, ask = ask_pair[ok], kept.b[ask_pair[ok]] * n_keys + ask_key[ok]
        lo, hi = np.searchsorted(codes, ask, "left"), np.searchsorted(codes, ask, "right")
        span = rows.max(initial=0) + 1
        found = np.repeat(ask_pair, hi - lo) * span + rows[ranges(lo, hi - lo)]
        pair, row = np.divmod(np.unique(found), span)  # sorted, once each
        ptr = np.concatenate([[0], np.cumsum(np.bincount(pair, minlength=n))])
        offsets, pos = first_per_row(ptr, limit)
        return {"rows": json_lists(offsets, pc.cast(pa.array(row[pos]), pa.string()))}

    return extra


def extra_for(pair: tuple[str, str], nodes: Sequence[Node]) -> Extra | None:
    if pair == (TABLE_CHUNK, TABLE_CHUNK):
        return joinable_columns(nodes)
    if pair == (DOC_CHUNK, TABLE_CHUNK):
        return row_references(nodes)
    return None
