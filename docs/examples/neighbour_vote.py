"""An example retriever for CONTRIBUTING.md: BM25 whose top candidates also vote for their one-hop
neighbours, so a node the question does not describe but that sits next to several that it does
can rank. It is small on purpose; what it shows is the contract: parameters as a pydantic model,
`_search` returning graph rows best first, and one `@register` line. Nothing else in sagegraph is
edited for it to run in `evaluate`, `query`, sweeps, `compare` and MLflow.

Load it with `SAGEGRAPH_RETRIEVERS=neighbour_vote` and this folder on PYTHONPATH, or from an
installed package through the `sagegraph.retrievers` entry-point group."""

from __future__ import annotations

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from sagegraph.retrieve.base import Retrieval, Retriever
from sagegraph.retrieve.registry import register


class NeighbourVoteParams(BaseModel):
    model_config = ConfigDict(extra="forbid")  # a misspelt parameter fails when the sweep file loads
    depth: int = Field(20, ge=1, description="BM25 candidates whose neighbours get a vote")
    weight: float = Field(0.5, ge=0.0, le=1.0, description="share of a candidate's score each neighbour receives")


@register("neighbour-vote")
class NeighbourVoteRetriever(Retriever[NeighbourVoteParams]):
    """BM25 candidates plus votes from their one-hop neighbours."""

    uses_edges = True  # its results depend on the graph's edges: sweeps run it on every edge variant
    Params = NeighbourVoteParams

    def _search(self, query: str, k: int) -> Retrieval:
        bm25 = self.graph.bm25_scores(query)
        top = np.argsort(-bm25)[: self.params.depth]
        top = top[bm25[top] > 0]
        score: dict[int, float] = {int(i): float(bm25[i]) for i in top}
        for i in top:
            for n in self.graph.adjacency.one_hop(np.array([i])):
                score[int(n)] = score.get(int(n), 0.0) + self.params.weight * float(bm25[i])
        ranked = sorted(score, key=lambda r: (-score[r], r))[:k]
        found = ["bm25" if r in set(top.tolist()) else "neighbour" for r in ranked]
        return Retrieval(
            np.array(ranked, np.int64),
            np.array([score[r] for r in ranked], np.float32),
            found,
            {"candidates": int(len(top)), "voted": len(score)},
        )
