"""A KB's relations as one Arrow table (src, type, dst), never one Python object per relation: a
KB of STaRK-PRIME's size has millions of them, and a list of records held gigabytes and minutes
before the first node was chunked.

`edges.jsonl` is read by Arrow's JSON reader. Only a file that reader refuses, or one whose table
breaks a rule (a missing or non-text field, a node not in `nodes.jsonl`, two relation types the
store would keep under one name), is read again line by line, so that the error names its line
and field exactly as the rest of the corpus readers do."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.json as pa_json

from sagegraph.model import safe_label

COLUMNS = ("src", "type", "dst")
SCHEMA = pa.schema([(name, pa.string()) for name in COLUMNS])


def empty_relations() -> pa.Table:
    return SCHEMA.empty_table()


def from_triples(triples: Iterable[tuple[str, str, str]]) -> pa.Table:
    """(src, type, dst) rows as a table (the line-by-line reader's result, tests, generators)."""
    rows = list(triples)
    return pa.table({name: pa.array([row[k] for row in rows], pa.string()) for k, name in enumerate(COLUMNS)})


def read_fast(path: Path, known_ids: pa.Array, read_before: pa.Table | None = None) -> pa.Table | None:
    """The relations of `path` when every line is a well-formed relation between known nodes and
    no two relation types collide in the store; None when any is not (read it line by line then).
    `read_before`: this file's relations as a build read them before, when the caller knows the
    file is unchanged since (`construct.relations_file`); checked against the nodes as a reading is."""
    if read_before is not None:
        table = read_before
    else:
        options = pa_json.ParseOptions(explicit_schema=SCHEMA, unexpected_field_behavior="ignore")
        try:
            table = pa_json.read_json(path, parse_options=options).select(list(COLUMNS))
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError, UnicodeDecodeError):
            return None
        table = table.combine_chunks()
    if any(table.column(name).null_count for name in COLUMNS):
        return None
    if not all(bool((index_of(table[end], known_ids) >= 0).all()) for end in ("src", "dst")):
        return None
    types = pc.unique(table["type"]).to_pylist()
    if len({safe_label(name) for name in types}) != len(types):
        return None
    return table


def between(table: pa.Table, ids: Iterable[str]) -> pa.Table:
    """The relations whose two ends are both among `ids`."""
    keep = pa.array(list(ids), pa.string())
    mask = pc.and_(pc.is_in(table["src"], value_set=keep), pc.is_in(table["dst"], value_set=keep))
    return table.filter(mask)


def row_hashes(table: pa.Table) -> np.ndarray:
    """One stable 64-bit hash per relation (the same in every process and run): what change
    detection compares, a multiset, since a repeated relation is a second relation. The columns
    go to pandas as categoricals, whose hash is the hash of their values computed once per
    distinct value (a KB's millions of relations name a few hundred thousand nodes)."""
    import pandas as pd

    frame = table.select(list(COLUMNS)).to_pandas(strings_to_categorical=True)
    return pd.util.hash_pandas_object(frame, index=False).to_numpy(np.uint64)


def label(table: pa.Table, row: int) -> str:
    """How a relation is named in a change set."""
    return f"{table['src'][row].as_py()}-[{table['type'][row].as_py()}]->{table['dst'][row].as_py()}"


def read_table(path: Path) -> pa.Table:
    """An ingest's relations file, its columns read as dictionaries: millions of relations name a
    few hundred thousand nodes and a few dozen types, and Parquet already holds each column as a
    dictionary and its indices, so the strings are not made once per row (1.1 s against 6.2-7.0 s
    for STaRK-PRIME's 6.4M relations here)."""
    import pyarrow.parquet as pq

    return pq.read_table(path, columns=list(COLUMNS), read_dictionary=list(COLUMNS))


def index_of(values: pa.ChunkedArray | pa.Array, keys: pa.Array) -> np.ndarray:
    """The position in `keys` of each value (-1 where it is not there): relations joined to their
    nodes, nodes to their degree counts. A dictionary column is looked up once per distinct value
    and the rows take their value's answer: Arrow's own lookup decodes every row first."""
    chunks = values.chunks if isinstance(values, pa.ChunkedArray) else [values]
    if not chunks or not pa.types.is_dictionary(chunks[0].type):
        return pc.fill_null(pc.index_in(values, value_set=keys), -1).to_numpy().astype(np.int64)
    parts = [np.zeros(0, np.int64)]
    for chunk in chunks:
        found = pc.fill_null(pc.index_in(chunk.dictionary, value_set=keys), -1).to_numpy().astype(np.int64)
        at = found[pc.fill_null(chunk.indices, 0).to_numpy(zero_copy_only=False)]
        if chunk.null_count:
            at[chunk.is_null().to_numpy(zero_copy_only=False)] = -1
        parts.append(at)
    return np.concatenate(parts)
