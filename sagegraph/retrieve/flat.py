"""Flat retrievers: BM25, dense (faiss), and their per-query normalised linear fusion (hybrid)."""

from __future__ import annotations

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from sagegraph.retrieve.base import NoParams, Resources, Retrieval, Retriever, given_suffix
from sagegraph.retrieve.fusion import fuse, rank
from sagegraph.retrieve.graph_index import GraphIndex
from sagegraph.retrieve.registry import register


def _ranked(g: GraphIndex, idx: np.ndarray, scores: np.ndarray, k: int, label: str, **trace) -> Retrieval:
    pos = rank(scores, g.id_rank[idx], k)
    return Retrieval(idx[pos], scores[pos].astype(np.float32), [label] * len(pos), trace)


@register("bm25")
class BM25Retriever(Retriever[NoParams]):
    def _search(self, query: str, k: int) -> Retrieval:
        s = self.graph.bm25_scores(query)
        cand = np.flatnonzero(s > 0)
        if len(cand) > 4 * k:
            cand = cand[np.argpartition(-s[cand], 4 * k - 1)[: 4 * k]]
        return _ranked(self.graph, cand, s[cand], k, "bm25")


@register("dense")
class DenseRetriever(Retriever[NoParams]):
    def _search(self, query: str, k: int) -> Retrieval:
        idx, s = self.graph.dense.search(self.graph.query_vector(query), k)
        return _ranked(self.graph, idx, s, k, "dense")


class HybridParams(BaseModel):
    model_config = ConfigDict(extra="forbid")
    alpha: float = Field(0.6, ge=0.0, le=1.0, description="BM25 weight; 1 - alpha for dense (SAGE: 0.6)")
    depth: int = Field(200, ge=1, description="candidates from each of BM25 and dense before fusion")


@register("hybrid")
class HybridRetriever(Retriever[HybridParams]):
    """alpha * minmax(BM25) + (1 - alpha) * minmax(cosine) over the union of both top-`depth` lists,
    each candidate scored exactly by both."""

    Params = HybridParams
    baseline = True  # the flat baseline every other retriever is compared to (SAGE's "BL")

    @classmethod
    def label(cls, k: int, given: dict, params: HybridParams) -> str:
        return f"hybrid[k={k},a={params.alpha}{given_suffix(given, ('alpha',))}]"

    @classmethod
    def over(cls, graph_or_res, alpha: float = 0.6, depth: int = 200) -> HybridRetriever:
        res = graph_or_res if isinstance(graph_or_res, Resources) else Resources(graph_or_res)
        return cls(res, HybridParams(alpha=alpha, depth=depth))

    @property
    def alpha(self) -> float:
        return self.params.alpha

    @property
    def depth(self) -> int:
        return self.params.depth

    def scores_for(self, query: str, idx: np.ndarray) -> np.ndarray:
        """Fused scores of given nodes, normalised over exactly those nodes."""
        return fuse(
            self.graph.bm25_scores(query)[idx],
            self.graph.dense.scores_for(self.graph.query_vector(query), idx),
            self.alpha,
        )

    def _search(self, query: str, k: int) -> Retrieval:
        depth = max(self.depth, k)
        bm = self.graph.bm25_scores(query)
        lex = np.argpartition(-bm, depth - 1)[:depth] if depth < len(bm) else np.arange(len(bm))
        lex = lex[bm[lex] > 0]
        den, _ = self.graph.dense.search(self.graph.query_vector(query), depth)
        cand = np.union1d(lex, den)
        return _ranked(self.graph, cand, self.scores_for(query, cand), k, "hybrid", candidates=int(len(cand)))

    def search_within(self, query: str, rows: np.ndarray, k: int, label: str = "hybrid") -> Retrieval:
        """The same fusion restricted to given rows (one node type, a Cypher result set): the top
        `depth` of each signal inside the rows, fused and normalised over exactly those."""
        rows = np.asarray(rows, dtype=np.int64)
        if len(rows) == 0:
            return Retrieval(rows, np.zeros(0, np.float32), [], {})
        depth = max(self.depth, k)
        bm = self.graph.bm25_scores(query)[rows]
        dn = self.graph.dense.scores_for(self.graph.query_vector(query), rows)
        if len(rows) > depth:
            lex = np.argpartition(-bm, depth - 1)[:depth]
            lex = lex[bm[lex] > 0]
            cand = np.union1d(lex, np.argpartition(-dn, depth - 1)[:depth])
        else:
            cand = np.arange(len(rows))
        fused = fuse(bm[cand], dn[cand], self.alpha)
        return _ranked(self.graph, rows[cand], fused, k, label)
