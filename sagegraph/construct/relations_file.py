"""A KB's relations file that has not changed since the last ingest, taken from that ingest
instead of being read again.

A KB's relations file is most of its bytes (440 MB and 6.4M relations at STaRK-PRIME's size) and
changes less often than its objects: renamed or re-described objects leave it as it was. Reading
it again costs a parse, a check of every end against the nodes and a hash of every row (about
3 s of a rebuild at that size, on 2 cores), all to find the same table. The ingest records the
file's digest (BLAKE2b of its bytes, taken before it is read, so a file changed during the read
never matches the table read); a later build whose file has that digest takes the ingest's
relations table and row hashes, and checks the table against the nodes as a reading would.
"""

from __future__ import annotations

import hashlib
import os
import shutil
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from sagegraph.construct.artifacts import read_json, write_json
from sagegraph.construct.changes import RELATIONS

RECORD = "relations-file.json"
TABLE = "kb_edges.parquet"


@dataclass(frozen=True)
class ReadBefore:
    """The relations an ingest read from a file with this digest: its table, sorted row hashes
    and the Parquet file it wrote them to."""

    table: pa.Table
    hashes: np.ndarray
    parquet: Path


def file_digest(path: Path) -> str:
    with path.open("rb") as handle:
        return hashlib.file_digest(handle, "blake2b").hexdigest()


def read_before(previous_sources: Path | None, digest: str) -> ReadBefore | None:
    """What the ingest in `previous_sources` read from a relations file with `digest`; None where
    it read another file, or recorded none, or its files do not read back whole."""
    if previous_sources is None or not (previous_sources / RECORD).exists():
        return None
    try:
        if read_json(previous_sources / RECORD).get("digest") != digest:
            return None
        table = pq.read_table(previous_sources / TABLE).combine_chunks()
        hashes = np.load(previous_sources / RELATIONS)["hashes"]
    except (OSError, ValueError, KeyError, pa.ArrowException):
        return None
    return ReadBefore(table, hashes, previous_sources / TABLE) if len(hashes) == table.num_rows else None


def record(sources_dir: Path, digest: str) -> None:
    write_json(sources_dir / RECORD, {"digest": digest})


def link(before: Path, path: Path) -> None:
    """`path` as a second name of the ingest file `before` (written files are replaced, never
    changed in place), or a copy where the file system has no hard links."""
    tmp = path.with_name(path.name + ".tmp")
    tmp.unlink(missing_ok=True)
    try:
        os.link(before, tmp)
    except OSError:
        shutil.copyfile(before, tmp)
    tmp.replace(path)
