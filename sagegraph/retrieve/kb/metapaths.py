"""Typed relation chains (metapaths) out of a set of KB nodes, counted on the KB's in-memory
adjacency: the one hop GraphRAFT's templates are built from, and the chains DGR's `chain_reach`
reads beyond an agent's walk. Both directions of every stored relation are followed, each hop
keeping its direction, so a chain says who directed whom."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np

from sagegraph.retrieve.kb.view import KBView

# (relation code into `KBView.relation_types`, outgoing?, other end's type)
HopKey = tuple[int, bool, str]


def hop_groups(view: KBView, rows: np.ndarray, exclude: np.ndarray | None = None) -> dict[HopKey, np.ndarray]:
    """One hop from a set of rows: (relation code, outgoing, other end's type) -> distinct other ends."""
    indptr, other, codes, out = view._incident
    starts, ends = indptr[rows], indptr[rows + 1]
    lens = ends - starts
    if not lens.sum():
        return {}
    idx = np.repeat(starts - np.concatenate([[0], np.cumsum(lens)[:-1]]), lens) + np.arange(lens.sum())
    o, c, d = other[idx], codes[idx], out[idx]
    if exclude is not None:
        keep = ~np.isin(o, exclude)
        o, c, d = o[keep], c[keep], d[keep]
        if not len(
            o
        ):  # every neighbour excluded (a round trip back to the topic): np.split would yield one empty segment
            return {}
    type_of_row, type_names = view.type_codes
    out_groups: dict[HopKey, np.ndarray] = {}
    key = (c.astype(np.int64) * 2 + d.astype(np.int64)) * len(type_names) + type_of_row[o]
    order = np.lexsort((o, key))
    key, o = key[order], o[order]
    bounds = np.flatnonzero(np.diff(key)) + 1
    for seg_k, seg in zip(np.split(key, bounds), np.split(o, bounds)):
        k = int(seg_k[0])
        t = k % len(type_names)
        cd = k // len(type_names)
        distinct = np.concatenate([[True], seg[1:] != seg[:-1]])  # sorted within its group by the lexsort
        out_groups[(cd // 2, bool(cd % 2), str(type_names[t]))] = seg[distinct]
    return out_groups


@dataclass
class WalkBudget:
    """Bounds on one `chains_from` walk: the incident relations it may examine and the chains it may
    yield. On the development KBs a walk of three relations examined at most 140,374 relations
    (synthetic, from its largest hub) and yielded at most 222 chains; from a node with 200,000
    relations an unbounded walk yielded 16,840 chains reaching 1.2M nodes, and one through it ran
    for minutes. `capped` says the walk stopped early (its shorter chains are all there)."""

    max_work: int = 1_000_000
    max_chains: int = 2_000
    work: int = 0
    chains: int = 0
    capped: bool = False

    def examine(self, view: KBView, rows: np.ndarray) -> bool:
        """Counts the incident relations a step from `rows` examines; False, and capped, once past
        `max_work`."""
        indptr = view._incident[0]
        self.work += int((indptr[rows + 1] - indptr[rows]).sum())
        if self.work > self.max_work:
            self.capped = True
        return not self.capped


def chains_from(
    view: KBView,
    start: int,
    depth: int,
    max_frontier: int = 2000,
    budget: WalkBudget | None = None,
    through_start: bool = True,
) -> Iterator[tuple[tuple[HopKey, ...], np.ndarray]]:
    """Every typed chain of 1 to `depth` hops from `start` with the distinct nodes at its end (the
    start itself left out), shortest first, within `budget` (a fresh `WalkBudget` by default). A
    chain walks on through every node it reaches, the start too (X's parent's children hold X, so
    X's parent's child's gender holds X's), as the chain's Cypher matches it; only its end leaves
    the start out, and a chain that ends at the start alone is walked on but not yielded.
    `through_start=False` leaves the start out at every step instead: `sagegraph adapt` draws its
    questions so, since encoders trained on walks through their own start read the development KBs'
    questions no better (experiments/kb-walk-through-start). A chain that already reaches more than
    `max_frontier` nodes is not walked on (a hub's fan-out, which no question walks through)."""
    budget = budget if budget is not None else WalkBudget()
    here = np.array([start], dtype=np.int64)
    left_out = None if through_start else here
    level: list[tuple[tuple[HopKey, ...], np.ndarray]] = [((), here)]
    for hop in range(depth):
        nxt = []
        for hops, rows in level:
            if hop and len(rows) > max_frontier:
                continue
            if not budget.examine(view, rows):
                break
            for key, reached in sorted(hop_groups(view, rows, exclude=left_out).items()):
                nxt.append(((*hops, key), reached))
        room = budget.max_chains - budget.chains
        if len(nxt) > room:
            nxt, budget.capped = nxt[:room], True
        budget.chains += len(nxt)
        for hops, reached in nxt:
            ends = reached[reached != start]
            if len(ends):
                yield hops, ends
        if budget.capped:
            return
        level = nxt
