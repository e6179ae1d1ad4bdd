"""A generation's difference from the generation published before it, kept in its own folder.

A FalkorDB store keeps the graph of the generation before the published one for a rollback; a
rebuild takes that graph over and writes into it what turns it into the new generation: a
difference spanning two builds. The rebuild compares its graph with the published generation
anyway (its report says what changed). Kept with the published generation, that generation's own
difference from the one before brings the store graph forward one build, and the new difference
the next: the graphs' millions of edges are read and keyed once per rebuild instead of twice (5.6 s
a comparison at STaRK-PRIME's size on a 2-core Xeon).

Each difference carries the node rows and vectors its writes need, so applying it reads nothing
else; it is written whole or not at all, and one that does not read back is not used.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import shutil
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from sagegraph.store.diff import GraphDiff

log = logging.getLogger("sagegraph.differences")

FOLDER = "difference"
# A difference that rewrites more than this share of its graph's rows is not kept: the store is
# then brought forward by one comparison with the generation it holds, not by two large writes.
LARGEST_SHARE = 0.25


@dataclass(frozen=True)
class Difference:
    """A difference from generation `base` (its folder name), with the node rows and vectors that
    `diff.write_nodes` and `diff.update_nodes` index."""

    base: str
    diff: GraphDiff
    nodes: pa.Table
    vectors: np.ndarray


def compact(difference: Difference) -> Difference:
    """`difference` holding only the node rows and vectors its writes need (a small change to a
    large graph writes a few thousand of its rows), renumbered to them."""
    diff = difference.diff
    rows = sorted({*diff.write_nodes, *diff.update_nodes})
    at = {row: k for k, row in enumerate(rows)}
    return Difference(
        difference.base,
        dataclasses.replace(
            diff, write_nodes=[at[row] for row in diff.write_nodes], update_nodes=[at[row] for row in diff.update_nodes]
        ),
        difference.nodes.take(pa.array(rows, pa.int64())),
        np.asarray(difference.vectors)[rows],
    )


def keep(gen_dir: Path, difference: Difference, graph_rows: int) -> bool:
    """Writes `difference` into `gen_dir`'s folder unless it is too large to be worth keeping or is
    kept there already; whether it is there now."""
    folder = Path(gen_dir) / FOLDER
    if load(gen_dir, difference.base) is not None:
        return True
    if difference.diff.writes > LARGEST_SHARE * max(1, graph_rows):
        return False
    small = compact(difference)
    diff = small.diff
    tmp = folder.with_name(f".{FOLDER}.{os.getpid()}.tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    pq.write_table(small.nodes, tmp / "nodes.parquet")
    np.save(tmp / "vectors.npy", small.vectors)
    for name in ("delete_edges", "write_edges"):
        pq.write_table(getattr(diff, name), tmp / f"{name}.parquet")
    summary = {
        "base": difference.base,
        "delete_nodes": diff.delete_nodes,
        "write_nodes": diff.write_nodes,
        "update_nodes": diff.update_nodes,
        "counts": diff.counts,
    }
    (tmp / "difference.json").write_text(json.dumps(summary), encoding="utf-8")
    if folder.exists():  # kept meanwhile by another process of this build, or one from another base
        if load(gen_dir, difference.base) is not None:
            shutil.rmtree(tmp, ignore_errors=True)
            return True
        shutil.rmtree(folder, ignore_errors=True)  # this build's own file, of a base it no longer has
    try:
        os.replace(tmp, folder)
    except OSError:  # another process kept one in between
        shutil.rmtree(tmp, ignore_errors=True)
        return load(gen_dir, difference.base) is not None
    return True


def load(gen_dir: Path, base: str) -> Difference | None:
    """`gen_dir`'s kept difference when it is from generation `base`; None when there is none, it
    is from another generation, or it does not read back whole."""
    folder = Path(gen_dir) / FOLDER
    try:
        summary = json.loads((folder / "difference.json").read_text(encoding="utf-8"))
        if summary.get("base") != base:
            return None
        nodes = pq.read_table(folder / "nodes.parquet")
        vectors = np.load(folder / "vectors.npy")
        diff = GraphDiff(
            delete_nodes=[str(node) for node in summary["delete_nodes"]],
            write_nodes=[int(row) for row in summary["write_nodes"]],
            update_nodes=[int(row) for row in summary["update_nodes"]],
            delete_edges=pq.read_table(folder / "delete_edges.parquet"),
            write_edges=pq.read_table(folder / "write_edges.parquet"),
            counts={str(key): int(value) for key, value in summary["counts"].items()},
        )
    except FileNotFoundError:
        return None
    except (OSError, ValueError, KeyError, TypeError, pa.ArrowException) as exc:
        log.warning("%s does not read back (%s): not used", folder, exc)
        return None
    if len(nodes) != len(vectors) or any(row >= len(nodes) for row in (*diff.write_nodes, *diff.update_nodes)):
        log.warning("%s: its rows do not match its nodes: not used", folder)
        return None
    return Difference(base, diff, nodes, vectors)
