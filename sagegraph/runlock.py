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
from pathlib import Path
from typing import Iterator

from sagegraph.errors import SageGraphError
from sagegraph.processes import running

log = logging.getLogger("sagegraph.lock")
_HELD: set[str] = set()  # lock files this process holds: a nested hold of one of them is a no-op


class DirectoryLocked(SageGraphError):
    """Another live process holds this directory."""


def _holder_note() -> str:
    return json.dumps({"pid": os.getpid(), "command": " ".join(sys.argv)[:300], "since": time.strftime("%Y-%m-%d %H:%M:%S")})


def _read_note(fd: int) -> dict:
    with contextlib.suppress(OSError, ValueError):
        os.lseek(fd, 0, os.SEEK_SET)
        return json.loads(os.read(fd, 4096).decode("utf-8") or "{}")
    return {}


@contextlib.contextmanager
def hold(directory: Path, what: str = "run") -> Iterator[None]:
    """Hold `directory` for this process (re-entrant within it) or raise DirectoryLocked naming the
    holder. Threads and child processes of the holder are not locked out."""
    directory = Path(directory).resolve()
    directory.parent.mkdir(parents=True, exist_ok=True)
    path = lock_path(directory)
    key = str(path.resolve())
    if key in _HELD:
        yield
        return
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            note = _read_note(fd)
            who = f"pid {note.get('pid', '?')}" + (f" ({note['command']}, since {note.get('since')})" if note.get("command") else "")
            raise DirectoryLocked(f"{directory}: another {what} is writing here: {who}; wait for it to finish or stop it") from None
        old = _read_note(fd)
        if old.get("pid") and old["pid"] != os.getpid() and not running(int(old["pid"])):
            log.warning("%s: taking over the lock of pid %s (%s), which is no longer running", directory, old["pid"], old.get("command", "?"))
        os.ftruncate(fd, 0)
        os.lseek(fd, 0, os.SEEK_SET)
        os.write(fd, _holder_note().encode("utf-8"))
        _HELD.add(key)
        try:
            yield
        finally:
            _HELD.discard(key)
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

