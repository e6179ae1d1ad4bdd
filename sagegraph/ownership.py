"""Which folders sagegraph may write into, delete in and move things around in: only its own.

A build replaces generations, moves a stale run aside and deletes retired graphs. Pointed by
`out:` at a folder of the user's, that is data loss, so every folder sagegraph writes as a whole
(a build's, a sweep's, an evaluation run's) carries a marker file written when sagegraph made it
or found it empty. A folder that holds anything and no marker is refused before anything is
touched. A folder an earlier sagegraph made before markers existed is recognised by a file only
sagegraph writes there (its publication record, stage folders, a run's per-question file) and
marked then; a folder that merely reuses one of sagegraph's names (`graph/notes.txt`) is not.
"""

from __future__ import annotations

import datetime as dt
import json
import logging
import os
from pathlib import Path

from sagegraph.errors import ConfigError

log = logging.getLogger("sagegraph.ownership")
MARKER = ".sagegraph"
# Files or folders only sagegraph writes, relative to a folder it made: a build's publication
# record and stage outputs, a sweep's MLflow parent record, an evaluation run's per-question file.
_OWN_FILES = ("graphs/published.json", "stages", "mlflow_parent.json", "per_query.jsonl")


class NotOurs(ConfigError):
    """A folder sagegraph did not make (or one that must never be written as a whole)."""


def refused_place(directory: Path) -> str | None:
    """Why `directory` can never be an out folder (the root, the home folder or one above it),
    or None."""
    resolved = Path(directory).expanduser().resolve()
    if resolved == Path(resolved.anchor):
        return "it is the file system's root"
    home = Path.home().resolve()
    if resolved == home or resolved in home.parents:
        return "it is your home folder" if resolved == home else "it holds your home folder"
    return None


def made_by_sagegraph(directory: Path) -> bool:
    directory = Path(directory)
    return (directory / MARKER).is_file() or any((directory / name).exists() for name in _OWN_FILES)


def claim(directory: Path, what: str = "out") -> Path:
    """`directory` checked to be sagegraph's before the first write into it: one that does not
    exist yet is (it is marked once made, `mark`); an empty one or one an earlier sagegraph made
    is marked now; any other raises NotOurs, touching nothing."""
    directory = Path(directory).expanduser()
    if (why := refused_place(directory)) is not None:
        raise NotOurs(
            f"{directory}: refusing it as the {what} folder: {why}; name a folder of its own (e.g. work/graph)"
        )
    if directory.exists() and not directory.is_dir():
        raise NotOurs(f"{directory}: the {what} folder is a file; name a folder")
    if not directory.is_dir() or (directory / MARKER).is_file():
        return directory
    entries = sorted(p.name for p in directory.iterdir())
    if entries and not made_by_sagegraph(directory):
        shown = ", ".join(entries[:3]) + (f" and {len(entries) - 3} more" if len(entries) > 3 else "")
        raise NotOurs(
            f"{directory}: the {what} folder holds files sagegraph did not write ({shown}) and no {MARKER} marker; "
            "sagegraph replaces and deletes what is in its folders, so it only uses a new or empty one: name another"
        )
    if entries:
        log.info("%s: made by an earlier sagegraph; marked as sagegraph's (%s)", directory, MARKER)
    mark(directory, what)
    return directory


def mark(directory: Path, what: str = "out") -> None:
    """The marker in a folder sagegraph made (or `claim` accepted), where there is none yet."""
    directory = Path(directory).expanduser()
    marker = directory / MARKER
    if not directory.is_dir() or marker.is_file():
        return
    note = {
        "made_by": "sagegraph",
        "what": what,
        "pid": os.getpid(),
        "marked_at": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
    }
    tmp = directory / f".{MARKER}.{os.getpid()}.tmp"
    tmp.write_text(json.dumps(note) + "\n", encoding="utf-8")
    os.replace(tmp, marker)
