"""The stage files a published build keeps, and the ones it deletes.

Stage folders are named by the config and corpus state they were made from, and batch files by
their members' contents (`construct.artifacts`, `construct.batches`), so nothing a build writes is
ever overwritten; without a clean-up, every rebuild of a changing corpus would add its ingest, its
edges and a file per stage for each batch its change touched, and a scheduled rebuild's folder
would grow without bound (about 1 GB per 1% change of a PRIME-sized KB).

Once a build is published, what a later build, a rollback or a sweep can still read is kept: the
stage folders of the published generation and of the one kept for a rollback, the batch files
their ingests list (a rebuild takes unchanged rows from the published build's batches), the
ingest of the corpus as first built (the corpus state a build compares with to name its own), and
the edges and ingest of every edge variant a sweep built beside the graph. Everything else under
`stages/` is work a later build can make again (the embedding cache and the LLM cache keep what it
paid for), and is deleted. A folder goes by a rename first, so a build killed while deleting leaves
a hidden folder the next clean-up removes, never a stage folder that looks finished and is not.
"""

from __future__ import annotations

import os
import re
import shutil
from dataclasses import dataclass, field
from pathlib import Path

from sagegraph.construct.artifacts import read_json

STAGES = "stages"
STAGE_FOLDER = re.compile(r"^(?P<stage>sources|chunks|metadata|vectors|edges)-[0-9a-f]+$")
BATCH_STAGES = ("chunks", "metadata", "vectors")
RETIRED = ".retired-"


@dataclass(frozen=True)
class Kept:
    """Stage folders (by name) and source batches (by name, as `construct.batches` names them)
    that a published build keeps."""

    folders: frozenset[str]
    batches: frozenset[str]


@dataclass
class Pruned:
    folders: list[str] = field(default_factory=list)
    files: int = 0
    bytes: int = 0

    def as_dict(self) -> dict[str, int]:
        return {"folders": len(self.folders), "files": self.files, "mb": round(self.bytes / 2**20)}


def ingest_batches(sources_dir: Path) -> frozenset[str] | None:
    """The source batches an ingest wrote, by name; None where its manifest is not there."""
    manifest = sources_dir / "manifest.json"
    if not manifest.is_file():
        return None
    return frozenset(Path(batch).stem for batch in read_json(manifest)["batches"])


def variant_folders(out: Path) -> set[str]:
    """The stage folders the edge variants built beside the graph read again: their edges and the
    ingest their manifests name. A variant being built has its folder before its edges."""
    keep: set[str] = set()
    variants = Path(out) / "variants"
    for variant in variants.iterdir() if variants.is_dir() else []:
        if variant.name.startswith("edges-"):
            keep.add(variant.name)
            manifest = variant / "graph" / "manifest.json"
            if manifest.is_file() and (sources := read_json(manifest).get("sources")):
                keep.add(sources)
    return keep


def unreferenced(stages_dir: Path, kept: Kept) -> tuple[list[Path], list[Path]]:
    """Stage folders not kept, and the batch files in kept batch folders of no kept batch. Names
    that are not a stage's (nor a batch file's) are left alone, and so are hidden temporaries."""
    folders, files = [], []
    for entry in sorted(stages_dir.iterdir()) if stages_dir.is_dir() else []:
        match = STAGE_FOLDER.match(entry.name)
        if match is None or not entry.is_dir() or entry.is_symlink():
            continue
        if entry.name not in kept.folders:
            folders.append(entry)
        elif match["stage"] in BATCH_STAGES:
            files += [
                Path(item.path)
                for item in os.scandir(entry)
                if item.is_file(follow_symlinks=False)
                and not item.name.startswith(".")
                and item.name.split(".", 1)[0] not in kept.batches
            ]
    return folders, files


def prune(stages_dir: Path, kept: Kept) -> Pruned:
    """Deletes what `kept` does not name (`unreferenced`), and what an earlier clean-up left."""
    pruned = Pruned()
    folders, files = unreferenced(stages_dir, kept)
    for path in files:
        pruned.bytes += path.stat().st_size
        path.unlink(missing_ok=True)
        pruned.files += 1
    for folder in folders:
        pruned.bytes += sum(item.stat().st_size for item in os.scandir(folder) if item.is_file(follow_symlinks=False))
        folder.rename(folder.with_name(RETIRED + folder.name))  # no longer a stage folder, whole or not
        pruned.folders.append(folder.name)
    for left in stages_dir.glob(RETIRED + "*") if stages_dir.is_dir() else []:
        shutil.rmtree(left, ignore_errors=True)
    return pruned
