"""A new SQLite database copied from an empty, migrated one instead of migrated anew.

Why: Prefect's local API server and MLflow's local tracking store each create their SQLite
database on first use by running every Alembic migration of the installed version: 7 of a Prefect
server's 11 s start, and 4.7 s of MLflow's first call, on these 2-core machines, paid by every new
out dir (each sweep, build or evaluation folder, and each end-to-end test). One empty database per
tool and version, migrated once by the tool itself, is kept in the user's cache and copied in; the
tool then finds it at its current revision. Anything unusual (a failed migration, a read-only
cache) leaves the target alone and the tool migrates as before.
"""

from __future__ import annotations

import contextlib
import logging
import os
import sqlite3
import tempfile
from collections.abc import Callable
from pathlib import Path

log = logging.getLogger("sagegraph.empty_db")


def template_path(tool: str, version: str) -> Path:
    """Where the empty database of this tool's version is kept (the user's cache)."""
    root = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return root / "sagegraph" / tool / f"empty-{version}.db"


def seed(target: Path, template: Path, migrate: Callable[[Path], Path]) -> bool:
    """Put a copy of `template` at `target` when nothing is there; True if it did. A missing
    template is made first: `migrate(folder)` has the tool create its empty database in a scratch
    folder and returns that database's path."""
    if target.exists():
        return False
    try:
        if not template.exists():
            _make_template(template, migrate)
        copy_database(template, target)
        return True
    except Exception as exc:  # an optimisation only: the tool migrates a missing database itself
        log.debug("no empty database for %s (%s); the tool migrates its own", target, exc)
        return False


def _make_template(template: Path, migrate: Callable[[Path], Path]) -> None:
    with tempfile.TemporaryDirectory(prefix="empty-db-") as tmp:
        copy_database(migrate(Path(tmp)), template)  # two first runs at once each publish a whole file


def copy_database(src: Path, dst: Path) -> None:
    """A consistent copy of the SQLite database `src` (its write-ahead log included) at `dst`,
    published whole: a reader of `dst` sees the old file or the whole copy, never a part."""
    dst.parent.mkdir(parents=True, exist_ok=True)
    staged = dst.with_name(f".{dst.name}.{os.getpid()}")
    with contextlib.closing(sqlite3.connect(src)) as source, contextlib.closing(sqlite3.connect(staged)) as copied:
        source.backup(copied)
    os.replace(staged, dst)
