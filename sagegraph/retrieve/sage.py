"""The SAGE operator (sage.txt Listing 1): S = TopK(seed(q), k); N = OneHop(G, S) minus S;
R = TopK(BM25+dense(q, N), k'); return S ++ R. Cost O(k·deg) on the CSR adjacency.

Policies: `+edge` always expands; `-edge` skips expansion when the seed retriever's own query
already constrained edges (its trace says `edge_constrained`), as SPARK's Cypher does."""

from __future__ import annotations

import time

import numpy as np

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from sagegraph.retrieve.base import Resources, Retrieval, Retriever
from sagegraph.retrieve.registry import get_retriever, register, retriever_class
from sagegraph.retrieve.flat import HybridRetriever
from sagegraph.retrieve.fusion import minmax, rank


class SageParams(BaseModel):
    model_config = ConfigDict(extra="forbid")
    k_prime: int = Field(10, ge=0, description="neighbours added after the k seeds")
    seed_retriever: str = Field("hybrid", description="any registered retriever but sage (spark for SPARK + SAGE)")
    alpha: float = Field(0.6, ge=0.0, le=1.0, description="BM25 weight of the neighbour rerank (and of a hybrid seed)")
    policy: Literal["+edge", "-edge"] = Field("+edge", description="-edge: no expansion when the seed's Cypher already traversed edges")
    edge_types: list[str] | None = Field(None, description="expand along these edge types only")
    seed_params: dict[str, Any] = Field(default_factory=dict, description="parameters of the seed retriever (validated by its own model)")

    @field_validator("seed_retriever")
    @classmethod
    def _not_itself(cls, v: str) -> str:
        if v == "sage":
            raise ValueError("sage cannot seed itself")
        return v


@register("sage")
class SageRetriever(Retriever):
    uses_edges = True
    Params = SageParams

    def __init__(self, res: Resources, params: SageParams, seed: Retriever | None = None):
        super().__init__(res, params)
        self.k_prime = params.k_prime
        self.policy = params.policy
        self.edge_types = set(params.edge_types) if params.edge_types else None
        if seed is None:
            seed_params = dict(params.seed_params)
            if "alpha" in retriever_class(params.seed_retriever).Params.model_fields:
                seed_params.setdefault("alpha", params.alpha)
            seed = get_retriever(params.seed_retriever, res, **seed_params)
        self.seed = seed
        self.uses_llm = getattr(seed, "uses_llm", False)
        self.prompt_version = getattr(seed, "prompt_version", "")
        self.rerank = HybridRetriever.over(res, alpha=params.alpha)
        self.seed_name = params.seed_retriever

    def expand(self, query: str, seeds: Retrieval, k_prime: int) -> Retrieval:
        """Add up to k' reranked one-hop neighbours to given seeds (seeds computed once, reused across k')."""
        t0 = time.perf_counter()
        if self.policy == "-edge" and seeds.trace.get("edge_constrained"):
            return Retrieval(seeds.idx, seeds.scores, list(seeds.found_by), {**seeds.trace, "expanded": False}, seeds.usage)
        nb = self.g.adjacency.one_hop(seeds.idx, self.edge_types)
        t1 = time.perf_counter()
        if len(nb) and k_prime:
            s = self.rerank.scores_for(query, nb)
            pos = rank(s, self.g.id_rank[nb], k_prime)
            added, added_scores = nb[pos], s[pos]
        else:
            added, added_scores = np.zeros(0, np.int64), np.zeros(0, np.float32)
        # S ++ R: every seed ranks above every neighbour; scores are made monotone for run files.
        idx = np.concatenate([seeds.idx, added])
        scores = np.concatenate([1.0 + minmax(seeds.scores), added_scores * 0.999]).astype(np.float32)
        trace = {**seeds.trace, "neighbourhood": int(len(nb)), "short_neighbourhood": bool(len(nb) < k_prime),
                 "expand_ms": round((time.perf_counter() - t0) * 1000, 3), "one_hop_ms": round((t1 - t0) * 1000, 3)}
        return Retrieval(idx, scores, list(seeds.found_by[: len(seeds.idx)]) + ["neighbour"] * len(added), {**trace, "expanded": True}, seeds.usage)

    def _search(self, query: str, k: int) -> Retrieval:
        return self.expand(query, self.seed.search(query, k), self.k_prime)

