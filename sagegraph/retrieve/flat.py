"""Flat retrievers: BM25, dense (faiss), and their per-query normalised linear fusion (hybrid)."""

from __future__ import annotations

import numpy as np

from sagegraph.errors import SageGraphError
from sagegraph.retrieve.base import Retrieval, Retriever, register
from sagegraph.retrieve.fusion import fuse, rank
from sagegraph.retrieve.graph_index import GraphIndex


def _ranked(g: GraphIndex, idx: np.ndarray, scores: np.ndarray, k: int, label: str, **trace) -> Retrieval:
    pos = rank(scores, g.id_rank[idx], k)
    return Retrieval(idx[pos], scores[pos].astype(np.float32), [label] * len(pos), trace)


@register("bm25")
class BM25Retriever(Retriever):
    def __init__(self, graph: GraphIndex, **_):
        self.g = graph

    def _search(self, query: str, k: int) -> Retrieval:
        s = self.g.bm25_scores(query)
        cand = np.flatnonzero(s > 0)
        if len(cand) > 4 * k:
            cand = cand[np.argpartition(-s[cand], 4 * k - 1)[: 4 * k]]
        return _ranked(self.g, cand, s[cand], k, "bm25")


@register("dense")
class DenseRetriever(Retriever):
    def __init__(self, graph: GraphIndex, **_):
        self.g = graph

    def _search(self, query: str, k: int) -> Retrieval:
        idx, s = self.g.dense.search(self.g.query_vector(query), k)
        return _ranked(self.g, idx, s, k, "dense")


@register("hybrid")
class HybridRetriever(Retriever):
    """alpha * minmax(BM25) + (1 - alpha) * minmax(cosine) over the union of both top-`depth` lists,
    each candidate scored exactly by both."""

    def __init__(self, graph: GraphIndex, alpha: float = 0.6, depth: int = 200, **_):
        if not 0.0 <= alpha <= 1.0:
            raise SageGraphError(f"alpha must be in [0, 1], got {alpha}")
        self.g, self.alpha, self.depth = graph, alpha, depth

    def params(self) -> dict:
        return {"alpha": self.alpha, "depth": self.depth}

    def scores_for(self, query: str, idx: np.ndarray) -> np.ndarray:
        """Fused scores of given nodes, normalised over exactly those nodes."""
        return fuse(self.g.bm25_scores(query)[idx], self.g.dense.scores_for(self.g.query_vector(query), idx), self.alpha)

    def _search(self, query: str, k: int) -> Retrieval:
        depth = max(self.depth, k)
        bm = self.g.bm25_scores(query)
        lex = np.argpartition(-bm, depth - 1)[:depth] if depth < len(bm) else np.arange(len(bm))
        lex = lex[bm[lex] > 0]
        den, _ = self.g.dense.search(self.g.query_vector(query), depth)
        cand = np.union1d(lex, den)
        return _ranked(self.g, cand, self.scores_for(query, cand), k, "hybrid", candidates=int(len(cand)))
