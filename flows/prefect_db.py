"""A new out dir's Prefect database, copied from an empty migrated one instead of migrated anew.

Why: Prefect's home is `OUT/.prefect` (runs in one out dir never share a database with another),
so the local API server of every new out dir used to create its SQLite database by running all of
Prefect's Alembic migrations: 7 of its 11 s start on these 2-core machines, paid by each new
sweep or build directory (and by each end-to-end test). One empty database per Prefect version,
migrated once by Prefect's own `prefect server database upgrade`, is kept in the user's cache and
copied into each new home; the server then finds it at the current revision and starts in ~4 s.
Anything unusual (a database URL of the user's, a failed migration, a read-only cache) leaves the
home alone and Prefect migrates as before.
"""

from __future__ import annotations

import logging
import os
import shutil
import sqlite3
import subprocess
import sys
import tempfile
from pathlib import Path

log = logging.getLogger("sagegraph.runtime")

DB = "prefect.db"


def template_path() -> Path:
    import prefect

    root = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return root / "sagegraph" / "prefect" / f"empty-{prefect.__version__}.db"


def seed_home(home: Path) -> bool:
    """Put a copy of the empty migrated database in `home` when it has none; True if it did."""
    if (Path(home) / DB).exists() or any(
        k.startswith(("PREFECT_SERVER_DATABASE_", "PREFECT_API_DATABASE_")) for k in os.environ
    ):
        return False
    try:
        template = template_path()
        if not template.exists():
            _make_template(template)
        _copy_atomically(template, Path(home) / DB)
        return True
    except Exception as exc:  # an optimisation only: the server migrates a missing database itself
        log.debug("no Prefect database template (%s); the server migrates its own", exc)
        return False


def _make_template(template: Path) -> None:
    template.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="prefect-db-") as tmp:
        env = {k: v for k, v in os.environ.items() if not k.startswith("PREFECT_")}
        env.update(PREFECT_HOME=tmp, DO_NOT_TRACK="true", PREFECT_SERVER_ANALYTICS_ENABLED="false")
        subprocess.run(
            [sys.executable, "-m", "prefect", "server", "database", "upgrade", "-y"],
            env=env,
            check=True,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            timeout=300,
        )
        staged = template.with_name(f".{template.name}.{os.getpid()}")
        src, dst = sqlite3.connect(Path(tmp) / DB), sqlite3.connect(staged)
        try:
            src.backup(dst)  # a consistent copy, write-ahead log included
        finally:
            src.close()
            dst.close()
        os.replace(staged, template)  # two first runs at once each publish a whole file


def _copy_atomically(src: Path, dst: Path) -> None:
    dst.parent.mkdir(parents=True, exist_ok=True)
    staged = dst.with_name(f".{dst.name}.{os.getpid()}")
    shutil.copyfile(src, staged)
    os.replace(staged, dst)
