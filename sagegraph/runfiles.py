"""Run artifacts (EVAL.md): per-query CSV, TREC run file, metrics.json; reading traces.jsonl back.
Below the evaluation layer, so that what reads finished runs (a method's training-data export)
does not depend on what writes them."""

from __future__ import annotations

import contextlib
import csv
import json
import os
import re
import threading
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import IO, Any

from sagegraph.errors import SageGraphError
from sagegraph.processes import running


@contextlib.contextmanager
def replaced(path: Path, suffix: str = "") -> Iterator[Path]:
    """A temporary path beside `path` to write, renamed onto `path` when the block ends without
    error: readers and a resumed run see the old file or the new one, never half of one (a killed
    writer leaves at most its hidden temporary, which the file's next writer removes). The name is this
    process's and thread's own, so
    two writers of one file at once each publish a whole file instead of renaming each other's
    half-written one. `suffix` ends the temporary name for writers that add their own (numpy's
    `.npz`). `atomicwrites`, the library for this, is archived; its author points to `os.replace`."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    clear_dead_temporaries(path)
    tmp = path.with_name(f".{path.name}.{os.getpid()}-{threading.get_ident()}.tmp{suffix}")
    try:
        yield tmp
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


# The hidden temporaries found in each directory the first time this process wrote a file there,
# by the file they were for: a directory is listed once per process, not once per write (a build
# writes a file per batch per stage into directories of thousands).
_TEMPORARIES: dict[Path, dict[str, list[tuple[str, int]]]] = {}
_TEMPORARIES_LISTED = threading.Lock()
_TEMPORARY_NAME = re.compile(r"^\.(?P<target>.+)\.(?P<pid>\d+)-\d+\.tmp")


def clear_dead_temporaries(path: Path) -> None:
    """Remove the hidden temporaries `replaced` left beside `path` for writers killed before their
    rename: never read, and as large as the file (a killed build's vectors). A running writer's,
    this process's included, are left to it; so is a name not ours. The ones there when this
    process first wrote into the directory are judged; a writer killed later leaves its own to
    the next process."""
    path = Path(path)
    with _TEMPORARIES_LISTED:
        if path.parent not in _TEMPORARIES:
            _TEMPORARIES[path.parent] = _hidden_temporaries(path.parent)
        found = _TEMPORARIES[path.parent].pop(path.name, [])
    for name, pid in found:
        if pid and pid != os.getpid() and not running(pid):
            (path.parent / name).unlink(missing_ok=True)


def _hidden_temporaries(directory: Path) -> dict[str, list[tuple[str, int]]]:
    """(name, writer's pid) of the temporaries `replaced` left in `directory`, by the file each
    was for."""
    found: dict[str, list[tuple[str, int]]] = {}
    with contextlib.suppress(OSError), os.scandir(directory) as entries:
        for entry in entries:
            if entry.name.startswith(".") and (match := _TEMPORARY_NAME.match(entry.name)):
                found.setdefault(match["target"], []).append((entry.name, int(match["pid"])))
    return found


def write_text_whole(path: Path, text: str) -> Path:
    """`text` written to `path` whole or not at all (`replaced`)."""
    with replaced(path) as tmp:
        tmp.write_text(text, encoding="utf-8")
    return Path(path)


def write_jsonl_whole(path: Path, rows: Iterable[dict[str, Any]]) -> int:
    """One JSON object a line, written whole or not at all (`replaced`); the number of lines."""
    n = 0
    with replaced(path) as tmp, tmp.open("w", encoding="utf-8") as fh:
        for row in rows:
            fh.write(json.dumps(row, ensure_ascii=False) + "\n")
            n += 1
    return n


def write_trec(path: Path, rows: Iterable[tuple[str, list[str], list[float]]], tag: str) -> None:
    """`qid Q0 docid rank score tag`, docids are source ids (what the gold set names)."""
    with replaced(path) as tmp, tmp.open("w", encoding="utf-8") as fh:
        for qid, docs, scores in rows:
            for rank, (doc, score) in enumerate(zip(docs, scores), start=1):
                fh.write(f"{qid} Q0 {doc.replace(' ', '_')} {rank} {score:.6f} {tag}\n")


def write_per_query_csv(path: Path, rows: list[dict[str, Any]], metric_keys: list[str]) -> None:
    fields = ["qid", "gold", "ranked"] + metric_keys + ["latency_ms", "neighbourhood"]
    with replaced(path) as tmp, tmp.open("w", encoding="utf-8", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=fields, extrasaction="ignore")
        w.writeheader()
        for r in rows:
            w.writerow({**r, "gold": "|".join(r["gold"]), "ranked": "|".join(r["ranked"][:100])})


def write_metrics(path: Path, metrics: dict[str, Any]) -> None:
    """Whole or not at all: a finished run is one whose metrics.json exists, and compare reads it."""
    write_text_whole(path, json.dumps(metrics, indent=1))


def read_traces(path: Path) -> list[dict[str, Any]]:
    """The last trace per question (a resumed run appends), only those with recorded events; a
    line cut by a crash is skipped."""
    if not path.exists():
        return []
    rows: dict[str, dict[str, Any]] = {}
    for line in complete_lines(path):
        try:
            row = json.loads(line)
        except json.JSONDecodeError:
            continue
        if row.get("events"):
            rows[row["qid"]] = row
    return list(rows.values())


def cut_to_last_line(path: Path) -> int:
    """Truncate `path` after its last newline: a line a crash cut short is dropped, so the next row
    appended starts a line of its own instead of being glued onto the fragment (and lost with it
    when the file is read back). Returns the number of bytes dropped."""
    if not path.exists():
        return 0
    with path.open("rb+") as fh:
        end = fh.seek(0, 2)
        pos = end
        while pos > 0:
            step = min(65536, pos)
            fh.seek(pos - step)
            block = fh.read(step)
            nl = block.rfind(b"\n")
            if nl >= 0:
                keep = pos - step + nl + 1
                break
            pos -= step
        else:
            keep = 0
        if keep < end:
            fh.truncate(keep)
        return end - keep


def open_for_append(path: Path) -> IO[str]:
    """`path` opened to append whole lines, after dropping a cut last line (`cut_to_last_line`)."""
    cut_to_last_line(path)
    return path.open("a", encoding="utf-8")


def complete_lines(path: Path) -> list[str]:
    """The lines of `path` that end in a newline: one still being written (or cut by a crash) is
    not read."""
    text = path.read_text(encoding="utf-8")
    return text.splitlines() if text.endswith("\n") else text.splitlines()[:-1]


def run_dirs(path: Path) -> list[Path]:
    """A run directory, or every run under a sweep's (or any) directory."""
    path = Path(path)
    if (path / "traces.jsonl").exists():
        return [path]
    found = sorted(p.parent for p in path.rglob("traces.jsonl") if ".stale-" not in str(p.parent))
    if not found:
        raise SageGraphError(f"{path}: no run here (no traces.jsonl below it)")
    return found


def find_trace(run_dir: Path, qid: str) -> dict[str, Any]:
    rows = read_traces(Path(run_dir) / "traces.jsonl")
    for row in rows:
        if str(row["qid"]) == str(qid):
            return row
    if not rows:
        raise SageGraphError(f"{run_dir}: no traced question here (traces.jsonl missing or empty)")
    raise SageGraphError(
        f"{run_dir}: no trace for question {qid!r} (traced: "
        f"{', '.join(str(r['qid']) for r in rows[:8])}{', ...' if len(rows) > 8 else ''})"
    )
