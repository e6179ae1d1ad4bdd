"""A KB's relations file that has not changed since the last ingest, taken from that ingest
instead of being read again.

A KB's relations file is most of its bytes (440 MB and 6.4M relations at STaRK-PRIME's size) and
changes less often than its objects: renamed or re-described objects leave it as it was. Reading
it again costs a parse, a check of every end against the nodes and a hash of every row (about
3 s of a rebuild at that size, on 2 cores), all to find the same table. The ingest records the
file's digest (BLAKE2b of its bytes, taken before it is read, so a file changed during the read
never matches the table read); a later build whose file has that digest takes the ingest's
relations table and row hashes, and checks the table against the nodes as a reading would.

Hashing the file is itself a read of every byte (about 4 s at that size, more where the file has
left the page cache), so the digest is recorded with the file's status (size, inode, modification
and change times in nanoseconds), as git's index keeps a file's status beside its object id: a
file whose status is the recorded one has the recorded digest. Any write, rename over it or
`touch` moves its change time, which no tool sets back. The status is trusted only where the file
had not been modified for `SETTLED_NS` before it was hashed (git's "racily clean" entries): a
write in the same clock tick as the hash could otherwise leave the status as it was.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa

from sagegraph.construct.artifacts import read_json, write_json
from sagegraph.construct.changes import RELATIONS
from sagegraph.corpus import kb_edges

RECORD = "relations-file.json"
TABLE = "kb_edges.parquet"


@dataclass(frozen=True)
class ReadBefore:
    """The relations an ingest read from a file with this digest: its table, sorted row hashes
    and the Parquet file it wrote them to."""

    table: pa.Table
    hashes: np.ndarray
    parquet: Path


SETTLED_NS = 2_000_000_000


@dataclass(frozen=True)
class FileStatus:
    size: int
    inode: int
    device: int
    modified_ns: int
    changed_ns: int

    @classmethod
    def of(cls, path: Path) -> FileStatus:
        st = path.stat()
        return cls(st.st_size, st.st_ino, st.st_dev, st.st_mtime_ns, st.st_ctime_ns)


@dataclass(frozen=True)
class FileDigest:
    """A file's digest, its status just before it was hashed, and when it was hashed."""

    digest: str
    status: FileStatus
    hashed_ns: int


def file_digest(path: Path) -> str:
    with path.open("rb") as handle:
        return hashlib.file_digest(handle, "blake2b").hexdigest()


def digest_of(path: Path, previous_sources: Path | None) -> FileDigest:
    """The digest of the file at `path`: the one the ingest in `previous_sources` recorded where
    the file's status is the one recorded with it and the file had settled before it was hashed,
    otherwise the file hashed now."""
    status = FileStatus.of(path)
    recorded = _recorded(previous_sources)
    if (
        recorded is not None
        and recorded.status == status
        and status.modified_ns < recorded.hashed_ns - SETTLED_NS
        and status.changed_ns < recorded.hashed_ns - SETTLED_NS
    ):
        return recorded
    hashed_ns = time.time_ns()
    return FileDigest(file_digest(path), status, hashed_ns)


def _recorded(previous_sources: Path | None) -> FileDigest | None:
    if previous_sources is None or not (previous_sources / RECORD).exists():
        return None
    try:
        saved = read_json(previous_sources / RECORD)
        return FileDigest(saved["digest"], FileStatus(**saved["status"]), int(saved["hashed_ns"]))
    except (OSError, ValueError, KeyError, TypeError):
        return None  # an ingest that recorded the digest alone: the file is hashed


def read_before(previous_sources: Path | None, digest: str) -> ReadBefore | None:
    """What the ingest in `previous_sources` read from a relations file with `digest`; None where
    it read another file, or recorded none, or its files do not read back whole."""
    if previous_sources is None or not (previous_sources / RECORD).exists():
        return None
    try:
        if read_json(previous_sources / RECORD).get("digest") != digest:
            return None
        table = kb_edges.read_table(previous_sources / TABLE)  # as read: joining its chunks copied 6.4M rows
        hashes = np.load(previous_sources / RELATIONS)["hashes"]
    except (OSError, ValueError, KeyError, pa.ArrowException):
        return None
    return ReadBefore(table, hashes, previous_sources / TABLE) if len(hashes) == table.num_rows else None


def record(sources_dir: Path, digest: FileDigest) -> None:
    write_json(
        sources_dir / RECORD,
        {"digest": digest.digest, "status": asdict(digest.status), "hashed_ns": digest.hashed_ns},
    )


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
