"""A small SQLite file shared by threads and processes: the embedding and LLM reply caches.

The journal mode and table are set up once under a file lock (switching to WAL from several
connections at once fails with 'database is locked'); then each thread gets its own connection.
"""

from __future__ import annotations

import sqlite3
import threading
from pathlib import Path

from filelock import FileLock


class SQLiteFile:
    def __init__(self, path: Path, schema: str):
        self.path = Path(path)
        self.schema = schema
        self._local = threading.local()
        self._ready = False

    def __getstate__(self):
        return {"path": self.path, "schema": self.schema}

    def __setstate__(self, state):
        self.__init__(state["path"], state["schema"])

    def _init_once(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with FileLock(str(self.path) + ".lock"):
            conn = sqlite3.connect(self.path, timeout=120)
            conn.execute("PRAGMA journal_mode=WAL")
            conn.execute(self.schema)
            conn.commit()
            conn.close()
        self._ready = True

    def conn(self) -> sqlite3.Connection:
        c = getattr(self._local, "conn", None)
        if c is None:
            if not self._ready:
                self._init_once()
            c = sqlite3.connect(self.path, timeout=120)
            # WAL with synchronous=NORMAL: a commit no longer waits for an fsync (checkpoints still
            # do), so 16 threads caching replies do not queue behind the disk; the file stays
            # consistent, and a power cut can lose only the last moments' entries of a cache.
            c.execute("PRAGMA synchronous=NORMAL")
            self._local.conn = c
        return c
