"""Graph generations: what `out/graph` is, so a rebuild never shows readers a half-built graph.

A build writes its graph into `out/graphs/<fingerprint>` (`Layout.graph`) and loads it into a store graph of its
own (`sagegraph.store.loaded.store_key`); only when both are complete does `out/graph`, a
symbolic link, switch to it (one `rename`, atomic on POSIX). A reader resolves the link once
(`GraphIndex`) and reads that generation to its end, whatever a rebuild does meanwhile; it opens the
store graph its manifest names, which the rebuild leaves alone. The generation before stays, on
disk and in the store, until the next build is published: `sagegraph build --rollback` switches
back to it. Older generations are dropped at publication (`retired`).

The same scheme as microsoft/graphrag's output versioning (a new output folder per run, the
latest read) and as a blue-green deployment, with the switch made by a link instead of a copy.
"""

from __future__ import annotations

import datetime as dt
import os
import shutil
from pathlib import Path
from typing import Any

from sagegraph.construct.artifacts import move_aside, read_json, write_json
from sagegraph.errors import ConfigError

GRAPHS = "graphs"
LINK = "graph"
RECORD = "published.json"
STATS = "stats"


def published(out: Path) -> Path | None:
    """The generation readers get now: where `out/graph` points, itself for a graph built before
    generations (a plain directory), None before the first publication."""
    link = Path(out) / LINK
    if link.is_symlink():
        return link.resolve()
    return link if link.is_dir() else None


def record(out: Path) -> dict[str, Any]:
    path = Path(out) / GRAPHS / RECORD
    return read_json(path) if path.exists() else {}


def _switch(out: Path, target: Path) -> None:
    tmp = Path(out) / f".{LINK}.link-{os.getpid()}"
    tmp.unlink(missing_ok=True)
    tmp.symlink_to(os.path.relpath(target, Path(out)))
    os.replace(tmp, Path(out) / LINK)  # readers see the old generation or the new one, never neither


def publish(out: Path, gen_dir: Path) -> dict[str, Any]:
    """Points `out/graph` at `gen_dir` (a complete generation, its store loaded); the generation
    published before becomes the one `rollback` returns to. Publishing the current one again
    changes nothing. A graph built before generations (a plain `out/graph` directory) is moved
    into `graphs/legacy` first: the one moment, once, when `out/graph` is briefly absent."""
    out, gen_dir = Path(out), Path(gen_dir).resolve()
    link = out / LINK
    current = published(out)
    if link.is_symlink() and current == gen_dir:
        return record(out)
    if current is not None and not link.is_symlink():
        if not is_generation(current):
            raise ConfigError(
                f"{link}: a folder sagegraph did not write is where the published graph goes; "
                "move it out of the way (sagegraph never moves or deletes files it did not write)"
            )
        legacy = out / GRAPHS / "legacy"
        if legacy.exists():
            move_aside(legacy, "old")
        legacy.parent.mkdir(parents=True, exist_ok=True)
        current = link.rename(legacy).resolve()
    _switch(out, gen_dir)
    rec = {
        "current": gen_dir.name,
        "previous": current.name if current is not None and current != gen_dir and is_generation(current) else None,
        "published_at": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
    }
    write_json(out / GRAPHS / RECORD, rec)
    return rec


def rollback(out: Path) -> dict[str, Any]:
    """Back to the generation published before the current one (which becomes the one a second
    rollback returns to)."""
    out = Path(out)
    rec = record(out)
    previous = rec.get("previous")
    if not previous or not (out / GRAPHS / previous / "manifest.json").exists():
        raise ConfigError(
            f"{out}: no previous graph to roll back to (each build keeps the one before it; "
            f"{'none was published before this one' if not previous else previous + ' is gone'})"
        )
    return publish(out, out / GRAPHS / previous)


def is_generation(path: Path) -> bool:
    """A graph folder a build wrote: its first file (`nodes.fingerprint`, written with its nodes)
    or its manifest is there. Anything else under `graphs/` is not sagegraph's to delete."""
    path = Path(path)
    return (
        path.is_dir()
        and not path.is_symlink()
        and ((path / "nodes.fingerprint").is_file() or (path / "manifest.json").is_file())
    )


def retired(out: Path) -> list[Path]:
    """Generations neither published now nor kept for a rollback: what a publication deletes once
    no reader holds them (the build lock is held, so none of them is being written)."""
    rec = record(out)
    keep = {rec.get("current"), rec.get("previous")}
    root = Path(out) / GRAPHS
    return (
        [d for d in sorted(root.iterdir()) if d.name not in keep and is_generation(d)] if root.is_dir() and rec else []
    )


def keep_stats(out: Path, gen_dir: Path) -> None:
    """A copy of `out/stats` (the statistics, plots and change set of the build that made `gen_dir`)
    inside the generation, so a rollback brings back the statistics of the graph it publishes."""
    src, dst = Path(out) / STATS, Path(gen_dir) / STATS
    if src.is_dir():
        dst.mkdir(exist_ok=True)
        for f in src.iterdir():
            if f.is_file():
                shutil.copy2(f, dst / f.name)


def restore_stats(out: Path, gen_dir: Path) -> None:
    """`out/stats` as the build of `gen_dir` left it (`keep_stats`), where it was kept."""
    src, dst = Path(gen_dir) / STATS, Path(out) / STATS
    if src.is_dir():
        for f in dst.iterdir() if dst.is_dir() else []:
            if f.is_file() and not (src / f.name).exists():
                f.unlink()
        dst.mkdir(exist_ok=True)
        for f in src.iterdir():
            shutil.copy2(f, dst / f.name)


def drop(dirs: list[Path]) -> None:
    """Deletes generations whose `runlock.retiring` lease is held: `nodes.parquet` first, so a
    reader that reaches one while it goes finds no graph there (`runlock.ReaderLease`)."""
    for d in dirs:
        (d / "nodes.parquet").unlink(missing_ok=True)
        shutil.rmtree(d, ignore_errors=True)
