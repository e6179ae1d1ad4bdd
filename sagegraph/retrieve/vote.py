"""A vote of several KB retrievers, for a KB whose best method is not known.

Which LLM retriever answers a KB best depends on the KB: on the development KBs one method leads
on one KB and trails on another (docs/results.md), and a user without gold questions cannot tell
which. Their mistakes differ too, so each question is settled by the members themselves:

1. a node that two or more members rank first is the answer (the members agree);
2. otherwise the first member, in the order given, whose first result its own method found (a
   query that ran, a template, an agent's answer: not a flat-retrieval fallback) gives it, so a
   member that wrote and ran a query outranks one that read templates by similarity, which
   outranks a ranking that asks the model nothing;
3. otherwise the first member's first result.

The rest of the list is the members' lists fused by reciprocal rank (Cormack et al., SIGIR 2009),
which needs no score calibration across methods. The members run with their own defaults unless
`member_params` says otherwise; their replies are the ones each records alone, so a vote replays
from the same cache as its members.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from typing import Any

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from sagegraph.llm import usage_scope
from sagegraph.retrieve.base import Resources, Retrieval, Retriever, given_suffix
from sagegraph.retrieve.registry import get_retriever, register, retriever_class, validate_params

# Labels a member's result carries when a flat retriever found it instead of the member's method.
FLAT_LABELS = frozenset({"bm25", "dense", "hybrid", "vector", "fallback", "fill"})
RRF_K = 60  # the constant of reciprocal-rank fusion, as its authors set it


class VoteParams(BaseModel):
    model_config = ConfigDict(extra="forbid")
    members: list[str] = Field(
        default_factory=lambda: ["spark", "graphraft", "dgr"],
        description="the retrievers that vote, in the order that settles a question they disagree on",
    )
    member_params: dict[str, dict[str, Any]] = Field(
        default_factory=lambda: dict[str, dict[str, Any]](spark={"repair_empty": False}, dgr={"n_agents": 0}),
        description="a member's parameters by its name (validated by its own model); SPARK without its "
        "empty-result repair (a query found only after the store's feedback is a second guess, which "
        "outvoted the other members wrongly where they disagreed); DGR's chains without its agent",
    )
    depth: int = Field(20, ge=1, description="results asked of each member before fusing")

    @field_validator("members")
    @classmethod
    def _members(cls, value: list[str]) -> list[str]:
        if len(value) < 2:
            raise ValueError("a vote needs two members or more")
        if len(set(value)) != len(value):
            raise ValueError("each member once")
        if "vote" in value:
            raise ValueError("a vote cannot be its own member")
        return value

    @model_validator(mode="after")
    def _params_of_members(self) -> VoteParams:
        unknown = sorted(set(self.member_params) - set(self.members))
        if unknown and "member_params" not in self.model_fields_set:  # the defaults, for members left out
            self.member_params = {name: value for name, value in self.member_params.items() if name in self.members}
        elif unknown:
            raise ValueError(f"member_params names {', '.join(unknown)}, not among members")
        return self


def answered_by_method(found_by: Sequence[str]) -> bool:
    """Whether a member's first result came from its own method rather than a flat fallback."""
    return bool(found_by) and found_by[0].split(" ")[0] not in FLAT_LABELS


def settle(firsts: Sequence[int | None], answered: Sequence[bool]) -> tuple[int | None, str]:
    """The answer of a vote from each member's first result (None: it returned nothing) and
    whether its method found it; and how it was settled."""
    counts = Counter(row for row in firsts if row is not None)
    agreed = [row for row, n in counts.most_common() if n >= 2]
    if agreed:
        return agreed[0], "agreed"
    for row, own in zip(firsts, answered):
        if row is not None and own:
            return row, "first answering member"
    return next((row for row in firsts if row is not None), None), "first member"


def reciprocal_rank_fusion(lists: Sequence[np.ndarray], k: int) -> tuple[np.ndarray, np.ndarray]:
    """The rows of several ranked lists by the sum of 1 / (RRF_K + rank); ties by first appearance."""
    score: dict[int, float] = {}
    for rows in lists:
        for position, row in enumerate(rows.tolist()):
            score[row] = score.get(row, 0.0) + 1.0 / (RRF_K + position + 1)
    order = sorted(score, key=lambda row: -score[row])[:k]  # sorted is stable: first appearance breaks ties
    return np.array(order, dtype=np.int64), np.array([score[row] for row in order], dtype=np.float32)


@register("vote")
class VoteRetriever(Retriever[VoteParams]):
    """Several KB retrievers, each question settled by their agreement or the first that answered."""

    Params = VoteParams

    def __init__(self, res: Resources, params: VoteParams):
        super().__init__(res, params)
        self.members = [get_retriever(name, res, **params.member_params.get(name, {})) for name in params.members]

    @classmethod
    def _member_classes(cls, params: VoteParams) -> list[tuple[type[Retriever], BaseModel]]:
        return [
            (retriever_class(name), validate_params(name, params.member_params.get(name, {})))
            for name in params.members
        ]

    @classmethod
    def label(cls, k: int, given: dict[str, Any], params: VoteParams) -> str:
        return f"vote[{'+'.join(params.members)},k={k}{given_suffix(given, ('members',))}]"

    @classmethod
    def needs_llm(cls, params: VoteParams) -> bool:
        return any(member.needs_llm(member_params) for member, member_params in cls._member_classes(params))

    @classmethod
    def prompt_for(cls, params: VoteParams) -> str:
        return "+".join(member.prompt_for(member_params) for member, member_params in cls._member_classes(params))

    @classmethod
    def graph_inputs(cls, graph, params: VoteParams) -> str:
        return "+".join(
            member.graph_inputs(graph, member_params) for member, member_params in cls._member_classes(params)
        )

    @classmethod
    def prepare(cls, graph, params: VoteParams) -> list[str]:
        return [
            name
            for member, member_params in cls._member_classes(params)
            for name in member.prepare(graph, member_params)
        ]

    def _search(self, query: str, k: int) -> Retrieval:
        with usage_scope() as usage:  # each member's own scope counts in this one too
            results = [member.search(query, max(k, self.params.depth)) for member in self.members]
        firsts = [int(r.idx[0]) if len(r.idx) else None for r in results]
        answered = [answered_by_method(r.found_by) for r in results]
        winner, how = settle(firsts, answered)
        rows, scores = reciprocal_rank_fusion([r.idx for r in results], k)
        if winner is not None:
            rest = rows != winner
            rows = np.concatenate([[winner], rows[rest]])[:k].astype(np.int64)
            scores = np.concatenate([[scores.max(initial=0.0) + 1.0], scores[rest]])[:k].astype(np.float32)
        trace = {
            "settled": how,
            "members": {
                name: {"first": first, "answered": own, "trace": result.trace}
                for name, first, own, result in zip(self.params.members, firsts, answered, results)
            },
        }
        found_by = ["vote"] + ["fused"] * (len(rows) - 1) if len(rows) else []
        return Retrieval(rows, scores, found_by, trace, usage.as_dict())
