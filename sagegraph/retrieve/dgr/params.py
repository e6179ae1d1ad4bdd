"""DGR's parameters, grouped by what they govern: the tools an agent calls (`ToolParams`), how each
agent runs (`AgentParams`) and what an agent that added nothing answers (`FallbackParams`).

A sweep or `-p KEY=VALUE` names a parameter by its own name (`t_max`, `chain_reach`): the names
are unique across the groups, so `DGRParams` sorts flat keys into their group, and each group is
passed whole to the code it governs. The paper's settings are `link`, `relation_kinds`,
`relax_filters` and `read_before_finish` false, `fallback: last` and `unnamed: resolve`; every
other default departs from it where a small model needs it.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from sagegraph.retrieve.base import GroupedParams, ParamGroup
from sagegraph.retrieve.kb.unnamed import UNNAMED_HELP, Unnamed

NeighbourRanking = Literal["bm25", "hybrid", "substring", "none"]
GlobalSearch = Literal["bm25", "hybrid"]
Fallback = Literal["last", "first", "deepest", "chain"]
ModeSetting = Literal["auto", "native", "json"]


class ToolParams(ParamGroup):
    """What the agent's four tools show and accept."""

    search_size: int = Field(5, ge=1, description="search_in_graph's default size")
    max_search_size: int = Field(30, ge=1, description="largest size an agent may ask for")
    neighbour_k: int = Field(20, ge=1, description="neighbours shown per search_in_neighborhood")
    neighbour_ranking: NeighbourRanking = Field(
        "bm25",
        description="bm25 (paper), hybrid (BM25 fused with embeddings), substring (public code), none (ablation)",
    )
    global_search: GlobalSearch = Field(
        "bm25",
        description="search_in_graph's ranking: bm25 over name and summary (paper), or hybrid (BM25 fused with "
        "embeddings)",
    )
    type_filters: bool = Field(
        True, description="honour node_type/edge_type filters (false: the paper's 'w/o F' ablation)"
    )
    neighbourhood: bool = Field(
        True, description="offer search_in_neighborhood (false: the paper's 'w/o Neighbors' ablation)"
    )
    summary_chars: int = Field(200, ge=0, description="characters of each node's summary shown in results")
    relax_filters: bool = Field(
        True,
        description="a neighbourhood filter that matches nothing is dropped, said in the observation (not the paper's)",
    )
    relation_kinds: bool = Field(
        True, description="each neighbour shown lists the relation types it has (not the paper's)"
    )


class AgentParams(ParamGroup):
    """How many agents run, how each is prompted and when it stops."""

    t_max: int = Field(20, ge=1, le=100, description="steps (LLM calls) per agent")
    n_agents: int = Field(
        3,
        ge=0,
        le=16,
        description="agents per question, fused by votes; 0: no agent and no model call, the chain fallback alone "
        "from the nodes the question names",
    )
    mode: ModeSetting = Field("auto", description="function calling, JSON actions, or probe the endpoint once")
    temperature: float = Field(
        0.7, ge=0.0, le=2.0, description="agents' sampling temperature (n agents need > 0 to differ)"
    )
    token_budget: int | None = Field(
        300_000, ge=1, description="prompt + completion tokens per question over all its agents (None: no limit)"
    )
    max_tokens: int = Field(768, ge=16, description="completion tokens per step")
    max_calls_per_step: int = Field(8, ge=1, description="tool calls run from one reply; the rest are refused")
    shown_only: bool = Field(True, description="refuse node indices the agent has not been shown in a result")
    stop_repeats: int = Field(
        2, ge=0, description="stop an agent after this many steps in a row that only repeat earlier searches (0: never)"
    )
    constrain: bool = Field(
        True, description="JSON mode: send the action schema in response_format (false for endpoints that refuse it)"
    )
    link: bool = Field(
        True,
        description="show under the question the nodes it names, with their neighbours by type and relation "
        "(not the paper's)",
    )
    link_prompt: bool = Field(
        True,
        description="with `link`, the prompt says to walk from the listed nodes (false: the paper's rule, find "
        "each name by search)",
    )
    example: bool = Field(
        True, description="the system prompt's worked example, a walk along this KB's most frequent relation"
    )
    read_before_finish: bool = Field(
        True,
        description="refuse a finish written in the same reply as a search whose results are unread (not the paper's)",
    )
    salvage_cut: bool = Field(
        False, description="a JSON-mode reply cut at the token limit runs the calls it wrote whole (not the paper's)"
    )


class FallbackParams(ParamGroup):
    """What an agent that added nothing answers."""

    fallback: Fallback = Field(
        "chain",
        description="last: its last search results; first: its first neighbourhood search; deepest: the search that "
        "reached farthest; chain: every node its walk reached, ranked by how the relation chain to it reads "
        "against the question",
    )
    chain_encoder: str | None = Field(
        None,
        description="with `fallback: chain`, a sentence encoder tuned for this KB reads the chains: `adapted` (the "
        "graph's own, `sagegraph adapt`) or the path of one trained on labels (`sagegraph graphraft train-selector`); "
        "not the paper's",
    )
    chain_reach: int = Field(
        3,
        ge=0,
        le=3,
        description="with `fallback: chain`, the KB's chains of up to this many relations from the walk's starts "
        "are ranked too, each kept while every relation it adds reads closer to the question (0: the walk's "
        "chains only)",
    )
    reach_named: bool = Field(
        True, description="with `chain_reach`, the chains from the nodes the question names are read too"
    )
    reach_margin: float = Field(
        0.02,
        ge=0.0,
        le=1.0,
        description="with `chain_reach`, how much closer (cosine) a relation a chain adds must read than the "
        "chain it extends",
    )
    margin_upto: int | None = Field(
        2,
        ge=2,
        description="with `reach_margin`, the longest chain whose added relation needs the margin; a longer one "
        "needs any gain (None: every one)",
    )
    chain_order: float = Field(
        0.25,
        ge=0.0,
        le=2.0,
        description="with `fallback: chain`, a chain of two or more relations from a named start loses this weight "
        "times how much better its relations read in another order outward from the name (0: off)",
    )
    unnamed: Unnamed = Field(
        "motifs",
        description=UNNAMED_HELP.replace(
            "resolve (the paper's: the written motifs resolve like names)",
            "resolve (the agents' answers, else `fallback`)",
        )
        + "; DGR's motifs are the words of the agents' global searches, weighted by their rarity in the KB",
    )


class DGRParams(GroupedParams):
    agent: AgentParams = Field(default_factory=AgentParams)
    tools: ToolParams = Field(default_factory=ToolParams)
    answer: FallbackParams = Field(default_factory=FallbackParams)

    @model_validator(mode="after")
    def _chain_fallback_without_agents(self) -> DGRParams:
        """Without agents the answer is what the chain fallback reads from the named nodes alone."""
        answer = self.answer
        if self.agent.n_agents == 0 and not (
            self.agent.link and answer.fallback == "chain" and answer.chain_reach and answer.reach_named
        ):
            raise ValueError(
                "n_agents 0 answers by the chain fallback from the named nodes alone: it needs link true, "
                "fallback chain, chain_reach 1-3 and reach_named true"
            )
        return self
