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
import math
import re
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Any

from sagegraph.errors import InputError, SageGraphError
from sagegraph.llm import ReplyCache, request_key
from sagegraph.ownership import mark
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
    with (
        path.open(mode + "b") as raw,
        gzip.GzipFile(filename="", mode=mode + "b", fileobj=raw, mtime=0) as gz,
        io.TextIOWrapper(gz, encoding="utf-8") as fh,
    ):
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
        path = Path(cache or cache_of(run))
        if not path.is_file():  # opening it would make an empty cache there, and every key would be "missing"
            raise SageGraphError(
                f"{run}: its reply cache {path} does not exist here (a relative path is read from the folder "
                "the command runs in: run it from the one the run was made in, or pass --cache)"
            )
        c = ReplyCache(path)
        got = {r["key"]: r for r in c.rows(keys)}
        missing = [k for k in keys if k not in got]
        if missing:
            raise SageGraphError(
                f"{run}: {len(missing)} replies are not in {c.path} (first key {missing[0][:12]}); pass the "
                "right --cache"
            )
        rows.update(got)
    out = Path(out)
    with replaced(out, suffix=".gz" if out.name.endswith(".gz") else "") as tmp, _open(tmp, "w") as fh:
        for row in rows.values():
            fh.write(json.dumps(_as_archived(row), sort_keys=True) + "\n")
    return len(rows)


def _as_archived(row: dict[str, Any]) -> dict[str, Any]:
    """The reply as an archive carries it: without the cache's mark of which archive it came from
    (`imported`), a fact about this cache that `import_replies` sets again and refuses to be given."""
    extra = {name: value for name, value in (row.get("extra") or {}).items() if name != "imported"}
    return {**row, "extra": extra}


# An archive is data from outside: bounded before it is read whole (a 150 KB gzip can expand to
# 150 MB), and every field checked before anything is written. A committed sweep's archive is
# under 1 MB expanded.
MAX_ARCHIVE_BYTES = 64 * 2**20
MAX_REPLY_CHARS = 1_000_000
MAX_TOKENS = 10_000_000
MAX_SECONDS = 86_400.0
_EXTRA_FIELDS: dict[str, type | tuple[type, ...]] = {
    "tool_calls": list,
    "seconds": (int, float),
    "finish_reason": (str, type(None)),
}
_REQUEST_FIELDS = {"v", "model", "messages", "params", "base_url", "tools", "sample"}


def _read_bounded(path: Path) -> str:
    try:
        with _open(path, "r") as fh:
            text = fh.read(MAX_ARCHIVE_BYTES + 1)
    except (OSError, EOFError, UnicodeDecodeError, gzip.BadGzipFile) as exc:
        raise InputError(path, None, None, f"cannot read: {exc}") from None
    if len(text) > MAX_ARCHIVE_BYTES:
        raise InputError(
            path, None, None, f"expands past {MAX_ARCHIVE_BYTES // 2**20} MB; a reply archive is far smaller (split it)"
        )
    return text


def _count(value: Any, path: Path, lineno: int, name: str, limit: float) -> None:
    number = isinstance(value, (int, float)) and not isinstance(value, bool)
    if not number or not math.isfinite(value) or not 0 <= value <= limit:
        raise InputError(path, lineno, name, f"expected a number from 0 to {limit:,.0f}, got {value!r}"[:200])


def checked_row(row: Any, path: Path, lineno: int, unbound: bool) -> dict[str, Any]:
    """One archive line's reply, every field checked; raises InputError naming line and field."""
    if not isinstance(row, dict) or not _KEY.match(str(row.get("key", ""))):
        raise InputError(path, lineno, "key", "expected a 64-hex-digit reply key")
    unknown = set(row) - {"key", "text", "prompt_tokens", "completion_tokens", "created", "extra", "request"}
    if unknown:
        raise InputError(path, lineno, min(unknown), "not a field of a reply archive")
    if not isinstance(row.get("text"), str) or len(row["text"]) > MAX_REPLY_CHARS:
        raise InputError(path, lineno, "text", f"expected the reply text (at most {MAX_REPLY_CHARS:,} characters)")
    for name in ("prompt_tokens", "completion_tokens"):
        if not isinstance(row.get(name), int) or isinstance(row.get(name), bool):
            raise InputError(path, lineno, name, "expected an integer")
        _count(row[name], path, lineno, name, MAX_TOKENS)
    if row.get("created") is not None:
        _count(row["created"], path, lineno, "created", 4e9)
    extra = row.get("extra") or {}
    if not isinstance(extra, dict):
        raise InputError(path, lineno, "extra", "expected a mapping")
    for name, value in extra.items():
        if name not in _EXTRA_FIELDS or not isinstance(value, _EXTRA_FIELDS[name]) or isinstance(value, bool):
            raise InputError(path, lineno, f"extra.{name}", "not a field of a reply, or not of its type")
    if "seconds" in extra:
        _count(extra["seconds"], path, lineno, "extra.seconds", MAX_SECONDS)
    for call in extra.get("tool_calls", []):
        if (
            not isinstance(call, dict)
            or set(call) - {"id", "name", "arguments"}
            or not all(isinstance(v, str) for v in call.values())
        ):
            raise InputError(path, lineno, "extra.tool_calls", "expected {id, name, arguments} with text values")
    request = row.get("request")
    if request is None:
        if not unbound:
            raise InputError(
                path,
                lineno,
                "request",
                "the row does not carry the request it answers, so it cannot be checked to answer only "
                "that one; import it with --unbound only if you trust where the archive came from",
            )
    elif not isinstance(request, dict) or set(request) - _REQUEST_FIELDS or request_key(request) != row["key"]:
        raise InputError(
            path, lineno, "request", "does not hash to the row's key: the reply would answer a request it was not given"
        )
    return {**row, "extra": {**extra, "imported": path.name}}


def import_replies(path: Path, cache: Path, replace: bool = False, unbound: bool = False) -> tuple[int, int]:
    """(written, kept as they were). The whole archive is read within MAX_ARCHIVE_BYTES and every
    line checked (`checked_row`) before one is written; then all are written in one transaction.
    A key already in the cache keeps its reply unless `replace` (a corrected archive). `unbound`
    accepts rows that carry no request to check their key against: trusted archives only."""
    path = Path(path)
    if not path.is_file():
        raise InputError(path, None, None, "file not found" if not path.exists() else "not a file")
    rows = []
    for lineno, line in enumerate(_read_bounded(path).splitlines(), start=1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except (json.JSONDecodeError, RecursionError) as exc:
            raise InputError(path, lineno, None, f"not JSON: {getattr(exc, 'msg', 'nested too deep')}") from None
        rows.append(checked_row(row, path, lineno, unbound))
    made = _missing(Path(cache).parent)
    written = ReplyCache(Path(cache)).insert_all(rows, replace=replace)
    for folder in made:  # replies imported before the build: the build's folder is then sagegraph's own
        mark(folder)
    return written, len(rows) - written


def _missing(folder: Path) -> list[Path]:
    """`folder` and those above it that do not exist yet: what writing there makes."""
    missing = []
    for place in (folder.absolute(), *folder.absolute().parents):
        if place.exists():
            break
        missing.append(place)
    return missing
