"""A new out dir's Prefect database, copied from an empty migrated one instead of migrated anew.

Why: Prefect's home is `OUT/.prefect` (runs in one out dir never share a database with another),
so the local API server of every new out dir used to create its SQLite database by running all of
Prefect's Alembic migrations: 7 of its 11 s start on these 2-core machines, paid by each new
sweep or build directory (and by each end-to-end test). One empty database per Prefect version,
migrated once by Prefect's own `prefect server database upgrade`, is kept in the user's cache and
copied into each new home; the server then finds it at the current revision and starts in ~4 s.
Anything unusual (a database URL of the user's, a failed migration, a read-only cache) leaves the
home alone and Prefect migrates as before (`sagegraph.empty_db`).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from sagegraph import empty_db

DB = "prefect.db"


def template_path() -> Path:
    import prefect

    return empty_db.template_path("prefect", prefect.__version__)


def seed_home(home: Path) -> bool:
    """Put a copy of the empty migrated database in `home` when it has none; True if it did."""
    if any(k.startswith(("PREFECT_SERVER_DATABASE_", "PREFECT_API_DATABASE_")) for k in os.environ):
        return False
    return empty_db.seed(Path(home) / DB, template_path(), _migrate)


def _migrate(folder: Path) -> Path:
    """Prefect's own `prefect server database upgrade`, in a home of its own."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PREFECT_")}
    env.update(PREFECT_HOME=str(folder), DO_NOT_TRACK="true", PREFECT_SERVER_ANALYTICS_ENABLED="false")
    subprocess.run(
        [sys.executable, "-m", "prefect", "server", "database", "upgrade", "-y"],
        env=env,
        check=True,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        timeout=300,
    )
    return folder / DB
