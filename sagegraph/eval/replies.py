"""Moving a run's LLM replies: `sagegraph llm export RUN_DIR FILE` writes the replies its queries
used as JSONL, `sagegraph llm import FILE CACHE` adds them to another reply cache. With the graph
and the questions, that is all a reader needs to reproduce a published run in `replay` mode, with
no endpoint and no key, and get the same numbers. A file named `*.gz` is gzip-compressed, so a
sweep's replies are small enough to commit beside the figures they back (a machine's work directory
does not outlive the machine)."""

from __future__ import annotations

import gzip
import io
import json
import re
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Any

from sagegraph.errors import InputError, SageGraphError
from sagegraph.llm import ReplyCache
from sagegraph.retrieve.timeline import llm_keys
from sagegraph.runfiles import read_traces, replaced, run_dirs

_KEY = re.compile(r"^[0-9a-f]{64}$")


@contextmanager
def _open(path: Path, mode: str) -> Iterator[IO[str]]:
    """Text handle, gzip where the name ends in .gz, with no name or time in its header, so the same
    replies give the same bytes (a committed archive that changed with each export would churn)."""
    if not path.name.endswith(".gz"):
        with path.open(mode, encoding="utf-8") as fh:
            yield fh
        return
    with path.open(mode + "b") as raw, gzip.GzipFile(filename="", mode=mode + "b", fileobj=raw, mtime=0) as gz, \
            io.TextIOWrapper(gz, encoding="utf-8") as fh:
        yield fh


def reply_keys(run_dir: Path) -> list[str]:
    """The cache keys of every LLM call the run's queries made, in order, without repeats."""
    return list(dict.fromkeys(k for row in read_traces(run_dir / "traces.jsonl") for k in llm_keys(row)))


def cache_of(run_dir: Path) -> Path:
    cfg = json.loads((run_dir / "config.json").read_text()) if (run_dir / "config.json").exists() else {}
    if (cfg.get("llm") or {}).get("cache"):
        return Path(cfg["llm"]["cache"])
    if cfg.get("graph"):
        return Path(cfg["graph"]).parent / "cache" / "llm.sqlite"
    raise SageGraphError(f"{run_dir}: config.json does not say which reply cache it used; pass --cache")


def export_replies(path: Path, out: Path, cache: Path | None = None) -> int:
    """Every reply the runs under `path` used, once each; a key missing from the cache is an error
    (an export that silently lacks replies would fail only when someone replays it)."""
    rows: dict[str, dict[str, Any]] = {}
    for run in run_dirs(path):
        keys = [k for k in reply_keys(run) if k not in rows]
        if not keys:
            continue
        c = ReplyCache(cache or cache_of(run))
        got = {r["key"]: r for r in c.rows(keys)}
        missing = [k for k in keys if k not in got]
        if missing:
            raise SageGraphError(f"{run}: {len(missing)} replies are not in {c.path} (first key {missing[0][:12]}); pass the right --cache")
        rows.update(got)
    out = Path(out)
    with replaced(out, suffix=".gz" if out.name.endswith(".gz") else "") as tmp, _open(tmp, "w") as fh:
        for row in rows.values():
            fh.write(json.dumps(row, sort_keys=True) + "\n")
    return len(rows)


def import_replies(path: Path, cache: Path) -> tuple[int, int]:
    """(added, already present). Every line is checked before any is written."""
    path = Path(path)
    if not path.exists():
        raise InputError(path, None, None, "file not found")
    rows = []
    try:
        with _open(path, "r") as fh:
            text = fh.read()
    except (OSError, EOFError, UnicodeDecodeError) as exc:
        raise InputError(path, None, None, f"cannot read: {exc}") from None
    for lineno, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError as exc:
            raise InputError(path, lineno, None, f"not JSON: {exc.msg}") from None
        if not isinstance(row, dict) or not _KEY.match(str(row.get("key", ""))):
            raise InputError(path, lineno, "key", "expected a 64-hex-digit reply key")
        if not isinstance(row.get("text"), str):
            raise InputError(path, lineno, "text", "expected the reply text")
        for f in ("prompt_tokens", "completion_tokens"):
            if not isinstance(row.get(f), int):
                raise InputError(path, lineno, f, "expected an integer")
        rows.append(row)
    c = ReplyCache(Path(cache))
    added = sum(c.insert(r) for r in rows)
    return added, len(rows) - added
