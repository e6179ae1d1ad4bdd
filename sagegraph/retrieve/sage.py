"""The SAGE operator (sage.txt Listing 1): S = TopK(seed(q), k); N = OneHop(G, S) minus S;
R = TopK(BM25+dense(q, N), k'); return S ++ R. Cost O(k·deg) on the CSR adjacency.

Policies: `+edge` always expands; `-edge` skips expansion when the seed retriever's own query
already constrained edges (its trace says `edge_constrained`), as SPARK's Cypher does."""

from __future__ import annotations

import itertools
import time
from typing import Any, Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, field_validator

from sagegraph.errors import ConfigError
from sagegraph.retrieve.base import Resources, Retrieval, Retriever, given_suffix, param_fields
from sagegraph.retrieve.flat import HybridRetriever
from sagegraph.retrieve.fusion import minmax, rank
from sagegraph.retrieve.registry import get_retriever, register, retriever_class, validate_params


class SageParams(BaseModel):
    model_config = ConfigDict(extra="forbid")
    k_prime: int = Field(10, ge=0, description="neighbours added after the k seeds")
    seed_retriever: str = Field("hybrid", description="any registered retriever but sage (spark for SPARK + SAGE)")
    alpha: float = Field(0.6, ge=0.0, le=1.0, description="BM25 weight of the neighbour rerank (and of a hybrid seed)")
    policy: Literal["+edge", "-edge"] = Field(
        "+edge", description="-edge: no expansion when the seed's Cypher already traversed edges"
    )
    edge_types: list[str] | None = Field(None, description="expand along these edge types only")
    seed_params: dict[str, Any] = Field(
        default_factory=dict, description="parameters of the seed retriever (validated by its own model)"
    )

    @field_validator("seed_retriever")
    @classmethod
    def _not_itself(cls, v: str) -> str:
        if v == "sage":
            raise ValueError("sage cannot seed itself")
        return v


@register("sage")
class SageRetriever(Retriever[SageParams]):
    """SAGE: k seeds from any other retriever, then k' of their one-hop neighbours reranked."""

    uses_edges = True
    Params = SageParams
    grid_keys = ("total_k", "seed_share")

    def __init__(self, res: Resources, params: SageParams, seed: Retriever | None = None):
        super().__init__(res, params)
        self.k_prime = params.k_prime
        self.policy = params.policy
        self.edge_types = set(params.edge_types) if params.edge_types else None
        if seed is None:
            name, _, seed_params = self.seed_config(0, params)
            seed = get_retriever(name, res, **seed_params)
        self.seed = seed
        self.rerank = HybridRetriever.over(res, alpha=params.alpha)
        self.seed_name = params.seed_retriever

    @classmethod
    def seed_config(cls, k: int, params: SageParams) -> tuple[str, int, dict[str, Any]]:
        seed_params = dict(params.seed_params)
        if "alpha" in param_fields(retriever_class(params.seed_retriever).Params):
            seed_params.setdefault("alpha", params.alpha)
        return params.seed_retriever, k, seed_params

    @classmethod
    def result_size(cls, k: int, params: SageParams) -> int:
        return k + params.k_prime

    @classmethod
    def label(cls, k: int, given: dict[str, Any], params: SageParams) -> str:
        extra = given_suffix(given, ("k_prime", "seed_retriever", "alpha", "policy"))
        return f"sage[{params.seed_retriever},k={k},k'={params.k_prime},a={params.alpha},{params.policy}{extra}]"

    @classmethod
    def _seed(cls, params: SageParams) -> tuple[type[Retriever], BaseModel]:
        """The seed retriever's class and its validated parameters."""
        name, _, seed_params = cls.seed_config(0, params)
        return retriever_class(name), validate_params(name, seed_params)

    @classmethod
    def needs_llm(cls, params: SageParams) -> bool:
        seed, seed_params = cls._seed(params)
        return seed.needs_llm(seed_params)

    @classmethod
    def prompt_for(cls, params: SageParams) -> str:
        seed, seed_params = cls._seed(params)
        return seed.prompt_for(seed_params)

    @classmethod
    def graph_inputs(cls, graph, params: SageParams) -> str:
        seed, seed_params = cls._seed(params)
        return seed.graph_inputs(graph, seed_params)

    @classmethod
    def prepare(cls, graph, params: SageParams) -> list[str]:
        seed, seed_params = cls._seed(params)
        return seed.prepare(graph, seed_params)

    @classmethod
    def grid(cls, ks: list[int], axes: dict[str, list[Any]]) -> list[tuple[int, dict[str, Any]]]:
        """SAGE splits a result size k = k1 + k2 between seeds and neighbours: `total_k` with the
        seed sizes `k` (each k1 < total; configurations sharing k1 reuse their seeds) or with
        `seed_share` (k1 = round(total x share)); otherwise k seeds and each `k_prime`."""
        totals, shares = list(axes.get("total_k", [])), list(axes.get("seed_share", []))
        if totals and not (shares or ks):
            raise ConfigError("sage: total_k needs k (seed sizes) or seed_share")
        if totals:
            pairs = [(k1, total - k1) for total in totals for k1 in ks if k1 < total]
        else:
            pairs = list(itertools.product(ks, axes.get("k_prime", [SageParams.model_fields["k_prime"].default])))
        for total, share in itertools.product(totals, shares):
            if total >= 2:
                k1 = min(total - 1, max(1, round(total * share)))
                pairs.append((k1, total - k1))
        rest = {a: v for a, v in axes.items() if a in cls.axes() and a != "k_prime"}
        return [
            (k, {"k_prime": kp, **dict(zip(rest, combo))})
            for k, kp in dict.fromkeys(pairs)
            for combo in itertools.product(*rest.values())
        ]

    def seed_search(self, query: str, k: int) -> Retrieval:
        return self.seed.search(query, k)

    def expand(self, query: str, seeds: Retrieval, k_prime: int | None = None) -> Retrieval:
        """Add up to k' (this configuration's unless given) reranked one-hop neighbours to given
        seeds (seeds computed once, reused across k')."""
        k_prime = self.k_prime if k_prime is None else k_prime
        t0 = time.perf_counter()
        if self.policy == "-edge" and seeds.trace.get("edge_constrained"):
            return Retrieval(
                seeds.idx, seeds.scores, list(seeds.found_by), {**seeds.trace, "expanded": False}, seeds.usage
            )
        nb = self.graph.adjacency.one_hop(seeds.idx, self.edge_types)
        t1 = time.perf_counter()
        if len(nb) and k_prime:
            s = self.rerank.scores_for(query, nb)
            pos = rank(s, self.graph.id_rank[nb], k_prime)
            added, added_scores = nb[pos], s[pos]
        else:
            added, added_scores = np.zeros(0, np.int64), np.zeros(0, np.float32)
        # S ++ R: every seed ranks above every neighbour; scores are made monotone for run files.
        idx = np.concatenate([seeds.idx, added])
        scores = np.concatenate([1.0 + minmax(seeds.scores), added_scores * 0.999]).astype(np.float32)
        trace = {
            **seeds.trace,
            "neighbourhood": int(len(nb)),
            "short_neighbourhood": bool(len(nb) < k_prime),
            "expand_ms": round((time.perf_counter() - t0) * 1000, 3),
            "one_hop_ms": round((t1 - t0) * 1000, 3),
        }
        return Retrieval(
            idx,
            scores,
            list(seeds.found_by[: len(seeds.idx)]) + ["neighbour"] * len(added),
            {**trace, "expanded": True},
            seeds.usage,
        )

    def _search(self, query: str, k: int) -> Retrieval:
        return self.expand(query, self.seed.search(query, k))
