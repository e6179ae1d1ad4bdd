"""One writer per output directory: an advisory lock that names its holder.

Two builds into one out dir once left a store that refused to open, and two evaluations into one
run dir both ran every question. The lock is the kernel's (`flock`), so it dies with its holder: a
lock file left by a killed run is taken over, and the log says whose it was. The holder's pid and
command are written into the file, so the one line a refused run prints says who to wait for.

`filelock` (used for the reply cache's in-flight locks) truncates the file on every attempt,
which would wipe the holder's note from under it; `fasteners` keeps no note at all.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import logging
import os
import sys
import time
from collections.abc import Iterator
from pathlib import Path

from sagegraph.errors import SageGraphError
from sagegraph.ownership import claim, mark
from sagegraph.processes import running

log = logging.getLogger("sagegraph.lock")
_HELD: set[str] = set()  # lock files this process holds: a nested hold of one of them is a no-op


class DirectoryLocked(SageGraphError):
    """Another live process holds this directory."""


def _holder_note() -> str:
    return json.dumps(
        {"pid": os.getpid(), "command": " ".join(sys.argv)[:300], "since": time.strftime("%Y-%m-%d %H:%M:%S")}
    )


def _read_note(fd: int) -> dict:
    with contextlib.suppress(OSError, ValueError):
        os.lseek(fd, 0, os.SEEK_SET)
        return json.loads(os.read(fd, 4096).decode("utf-8") or "{}")
    return {}


@contextlib.contextmanager
def hold(directory: Path, what: str = "run", owned: bool = True) -> Iterator[None]:
    """Hold `directory` for this process (re-entrant within it) or raise DirectoryLocked naming the
    holder. Threads and child processes of the holder are not locked out. `owned`: the directory
    is one sagegraph writes as a whole, so it must be sagegraph's (`ownership.claim`), checked
    before the lock file is made beside it."""
    given = directory
    directory = Path(directory).expanduser().resolve()
    path = lock_path(directory)
    key = str(path.resolve())
    if key in _HELD:  # the outer hold claimed it, and marks what was made meanwhile when it ends
        yield
        return
    if owned:
        claim(given, what)
    directory.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            note = _read_note(fd)
            who = f"pid {note.get('pid', '?')}" + (
                f" ({note['command']}, since {note.get('since')})" if note.get("command") else ""
            )
            raise DirectoryLocked(
                f"{directory}: another {what} is writing here: {who}; wait for it to finish or stop it"
            ) from None
        old = _read_note(fd)
        if old.get("pid") and old["pid"] != os.getpid() and not running(int(old["pid"])):
            log.warning(
                "%s: taking over the lock of pid %s (%s), which is no longer running",
                directory,
                old["pid"],
                old.get("command", "?"),
            )
        os.ftruncate(fd, 0)
        os.lseek(fd, 0, os.SEEK_SET)
        os.write(fd, _holder_note().encode("utf-8"))
        _HELD.add(key)
        try:
            yield
        finally:
            _HELD.discard(key)
            if owned:
                mark(directory, what)  # made while held: sagegraph's
            with contextlib.suppress(OSError):
                os.ftruncate(fd, 0)
            fcntl.flock(fd, fcntl.LOCK_UN)
    finally:
        os.close(fd)


def lock_path(directory: Path) -> Path:
    """Beside the directory, not in it: a run dir made on other inputs is moved aside whole
    (`.stale-N`) while its lock is held."""
    directory = Path(directory).resolve()
    return directory.parent / f".{directory.name}.lock"


# ---- reader leases on a graph generation ------------------------------------------------------
# A reader (an evaluation, a sweep's worker, `sagegraph query`) holds a shared `flock` on its
# generation's lease file for as long as it reads it; a publication retires a generation only
# when it can take that lock exclusively, and deletes it while holding it. The kernel drops a
# dead reader's lock, so a killed evaluation never pins a generation for ever.
LEASE_FILE = ".readers.lock"


class GenerationGone(SageGraphError):
    """The generation a reader resolved was retired before its lease was taken."""


class ReaderLease:
    """A shared lease on `generation` (a graph folder) for this object's lifetime (or `release`)."""

    def __init__(self, generation: Path):
        self.generation = Path(generation)
        self._fd: int | None = None
        try:
            fd = os.open(self.generation / LEASE_FILE, os.O_RDWR | os.O_CREAT, 0o644)
        except OSError as exc:
            raise GenerationGone(f"{self.generation}: cannot lease it ({exc.strerror})") from None
        fcntl.flock(fd, fcntl.LOCK_SH)  # waits while a publication deletes it
        if not (self.generation / "nodes.parquet").exists():  # deleted before this lease was granted
            os.close(fd)
            raise GenerationGone(f"{self.generation}: retired by a rebuild before it could be read")
        self._fd = fd

    def release(self) -> None:
        fd, self._fd = self._fd, None
        if fd is not None:
            with contextlib.suppress(OSError):
                os.close(fd)

    def __del__(self) -> None:
        self.release()


@contextlib.contextmanager
def retiring(generation: Path) -> Iterator[bool]:
    """True (and every new reader kept waiting) when no reader holds `generation`, so the block may
    delete it; False when one does: it must be kept until a later publication."""
    lease = Path(generation) / LEASE_FILE
    try:
        fd = os.open(lease, os.O_RDWR | os.O_CREAT, 0o644)
    except OSError:
        yield True  # no lease file can be made: nothing can read it either
        return
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            yield False
            return
        yield True
    finally:
        os.close(fd)
