"""Typed relation chains (metapaths) out of a set of KB nodes, counted on the KB's in-memory
adjacency: the one hop GraphRAFT's templates are built from, and the chains DGR's `chain_reach`
reads beyond an agent's walk. Both directions of every stored relation are followed, each hop
keeping its direction, so a chain says who directed whom."""

from __future__ import annotations

from collections.abc import Iterator

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
        if not len(o):  # every neighbour excluded (a round trip back to the topic): np.split would yield one empty segment
            return {}
    types = view.g.types[o]
    out_groups: dict[HopKey, np.ndarray] = {}
    tcodes, tinv = np.unique(types, return_inverse=True)
    key = (c.astype(np.int64) * 2 + d.astype(np.int64)) * len(tcodes) + tinv
    order = np.lexsort((o, key))
    key, o = key[order], o[order]
    bounds = np.flatnonzero(np.diff(key)) + 1
    for seg_k, seg in zip(np.split(key, bounds), np.split(o, bounds)):
        k = int(seg_k[0])
        t = k % len(tcodes)
        cd = k // len(tcodes)
        out_groups[(cd // 2, bool(cd % 2), str(tcodes[t]))] = np.unique(seg)
    return out_groups


def chains_from(view: KBView, start: int, depth: int, max_frontier: int = 2000) -> Iterator[tuple[tuple[HopKey, ...], np.ndarray]]:
    """Every typed chain of 1 to `depth` hops from `start` with the distinct nodes at its end (the
    start itself left out), shortest first. A chain that already reaches more than `max_frontier`
    nodes is not walked on (a hub's fan-out, which no question walks through)."""
    here = np.array([start], dtype=np.int64)
    level: list[tuple[tuple[HopKey, ...], np.ndarray]] = [((), here)]
    for hop in range(depth):
        nxt = []
        for hops, rows in level:
            if hop and len(rows) > max_frontier:
                continue
            for key, ends in sorted(hop_groups(view, rows, exclude=here).items()):
                nxt.append(((*hops, key), ends))
        yield from nxt
        level = nxt
