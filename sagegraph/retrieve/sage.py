"""The SAGE operator (sage.txt Listing 1): S = TopK(seed(q), k); N = OneHop(G, S) minus S;
R = TopK(BM25+dense(q, N), k'); return S ++ R. Cost O(k·deg) on the CSR adjacency.

Policies: `+edge` always expands; `-edge` skips expansion when the seed retriever's own query
already constrained edges (its trace says `edge_constrained`), as SPARK's Cypher does."""

from __future__ import annotations

import time

import numpy as np

from sagegraph.errors import SageGraphError
from sagegraph.retrieve.base import Retrieval, Retriever, get_retriever, register
from sagegraph.retrieve.flat import HybridRetriever
from sagegraph.retrieve.fusion import minmax, rank
from sagegraph.retrieve.graph_index import GraphIndex


@register("sage")
class SageRetriever(Retriever):
    uses_edges = True

    def __init__(self, graph: GraphIndex, k_prime: int = 10, seed_retriever: str = "hybrid", alpha: float = 0.6,
                 policy: str = "+edge", edge_types: list[str] | None = None, seed: Retriever | None = None, **seed_params):
        if policy not in ("+edge", "-edge"):
            raise SageGraphError(f"policy must be '+edge' or '-edge', got {policy!r}")
        if seed_retriever == "sage":
            raise SageGraphError("sage cannot seed itself")
        if k_prime < 0:
            raise SageGraphError(f"k' must be >= 0, got {k_prime}")
        self.g = graph
        self.k_prime = k_prime
        self.policy = policy
        self.edge_types = set(edge_types) if edge_types else None
        self.seed = seed or get_retriever(seed_retriever, graph, alpha=alpha, **seed_params)
        self.rerank = HybridRetriever(graph, alpha=alpha)
        self.seed_name = seed_retriever

    def params(self) -> dict:
        return {"k_prime": self.k_prime, "seed_retriever": self.seed_name, "alpha": self.rerank.alpha, "policy": self.policy}

    def expand(self, query: str, seeds: Retrieval, k_prime: int) -> Retrieval:
        """Add up to k' reranked one-hop neighbours to given seeds (seeds computed once, reused across k')."""
        t0 = time.perf_counter()
        if self.policy == "-edge" and seeds.trace.get("edge_constrained"):
            return Retrieval(seeds.idx, seeds.scores, list(seeds.found_by), {**seeds.trace, "expanded": False})
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
        return Retrieval(idx, scores, list(seeds.found_by[: len(seeds.idx)]) + ["neighbour"] * len(added), trace)

    def _search(self, query: str, k: int) -> Retrieval:
        return self.expand(query, self.seed.search(query, k), self.k_prime)

