"""AF-Retriever's parameters, grouped by what they govern: the model's query and how it is read
(`QueryParams`), the grounding search (`GroundingParams`) and the ranking of the k results
(`RankingParams`). A sweep or `-p KEY=VALUE` names each by its own name. The paper's AF is
`ground: false, semantic_text: false`."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import Field

from sagegraph.retrieve.base import GroupedParams, ParamGroup
from sagegraph.retrieve.kb.unnamed import UNNAMED_HELP, Unnamed


class QueryParams(ParamGroup):
    """What the model is shown, and how its query is read against the KB being queried."""

    hints: Path | None = Field(
        None,
        description="hints YAML whose first two examples the Cypher prompt shows; default: hints.yaml beside the KB",
    )
    ground: bool = Field(
        True,
        description="before parsing, turn relationships the KB stores the other way, map unknown relationship types "
        "to a close one (else any type), move a name to the label that holds it and the rest of "
        "sagegraph.retrieve.kb.grounding's repairs (counted; false: the paper's AF)",
    )
    unnamed: Unnamed = Field(
        "motifs",
        description=UNNAMED_HELP + "; a query whose property filter compares a value "
        '("released after 2003") is not unnamed',
    )
    semantic_text: bool = Field(
        True,
        description="a `CONTAINS 'words'` on the answer that no name of its type (or no value of "
        "its property) holds, in a query that names another node the KB holds, is read as what "
        "the answer is about: it no longer pins or filters the answer, and the grounded answers "
        "rank by how their closest sentence reads against the words (SPARK's `semantic_text`; "
        "false: the paper's)",
    )


class GroundingParams(ParamGroup):
    """The search for each symbol's candidates (the paper's steps 4-7)."""

    l_max: int = Field(100, ge=1, description="candidates kept per constant (the grounding budget)")
    schedule: Literal["paper", "code"] = Field(
        "paper", description="l growth: paper l^1.5+0.5, or the public code's int(1.5l+0.5)"
    )
    directed: bool = Field(
        True, description="ground along relation direction (false: the public code's undirected grounding)"
    )
    cap: int = Field(10_000, ge=1, description="a symbol with this many candidates or more is not expanded")
    type_mode: Literal["strict", "node_types", "lenient"] = Field(
        "strict", description="which predicted types filter: node and relation types, node types only, or neither"
    )


class RankingParams(ParamGroup):
    """How the grounded answers and the vector fill become the k results."""

    alpha: float = Field(
        2 / 3,
        ge=0.0,
        le=1.0,
        description="share of k taken from grounded answers (round(alpha k)); the rest is vector fill",
    )
    reranker: Literal["none", "pointwise", "listwise", "pairwise"] = Field("pairwise", description="step 8")
    rerank_relations: int = Field(4, ge=0, description="relations shown per candidate to the reranker")
    rerank_text_chars: int = Field(
        160, ge=20, description="characters of each long text field (a plot) shown to the reranker"
    )


class AFParams(GroupedParams):
    query: QueryParams = Field(default_factory=QueryParams)
    grounding: GroundingParams = Field(default_factory=GroundingParams)
    ranking: RankingParams = Field(default_factory=RankingParams)
