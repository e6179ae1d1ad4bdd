"""In-memory adjacency (CSR) over the edge table: the hot path of graph expansion.

One-hop neighbours of k seeds cost O(k·deg) array slices; the graph store is for Cypher and
exploration, not for this loop.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass
class Adjacency:
    indptr: np.ndarray  # (n+1,)
    indices: np.ndarray  # neighbour node indices
    edge_type: np.ndarray  # type code per adjacency entry
    type_names: list[str]

    @classmethod
    def from_edges(cls, n: int, src: np.ndarray, dst: np.ndarray, types: list[str]) -> Adjacency:
        """Undirected: every edge is listed under both endpoints."""
        names = sorted(set(types))
        code = {t: i for i, t in enumerate(names)}
        tcode = np.array([code[t] for t in types], dtype=np.int16)
        rows = np.concatenate([src, dst])
        cols = np.concatenate([dst, src])
        tt = np.concatenate([tcode, tcode])
        order = np.lexsort((cols, rows))
        rows, cols, tt = rows[order], cols[order], tt[order]
        indptr = np.zeros(n + 1, dtype=np.int64)
        np.add.at(indptr, rows + 1, 1)
        return cls(np.cumsum(indptr), cols.astype(np.int64), tt, names)

    def degree(self, i: int) -> int:
        return int(self.indptr[i + 1] - self.indptr[i])

    def neighbours(self, i: int, types: set[str] | None = None) -> np.ndarray:
        a, b = self.indptr[i], self.indptr[i + 1]
        nb = self.indices[a:b]
        if types is not None:
            wanted = [k for k, t in enumerate(self.type_names) if t in types]
            nb = nb[np.isin(self.edge_type[a:b], wanted)]
        return nb

    def one_hop(self, seeds: np.ndarray, types: set[str] | None = None) -> np.ndarray:
        """Distinct neighbours of the seeds, seeds excluded (N = OneHop(G, S) minus S)."""
        if len(seeds) == 0:
            return np.zeros(0, np.int64)
        parts = [self.neighbours(int(s), types) for s in seeds]
        nb = np.unique(np.concatenate(parts)) if parts else np.zeros(0, np.int64)
        return nb[~np.isin(nb, seeds)]
