"""SPARK's parameters, grouped by what they govern: the prompt (`PlanParams`), how the model's query
runs (`ExecutionParams`) and how its nodes become the k results (`AnswerParams`). A sweep or `-p
KEY=VALUE` names each by its own name. The paper's SPARK is `card_examples: false, card_similarity:
true, link: false, ground: false, semantic_text: false, named_last: false, repair_empty: false`."""

from __future__ import annotations

from pathlib import Path

from pydantic import Field

from sagegraph.retrieve.base import GroupedParams, ParamGroup


class PlanParams(ParamGroup):
    """What the model is shown and asked."""

    hints: Path | None = Field(
        None,
        description="per-KB hints YAML (property formats, examples); default: hints.yaml beside the KB's nodes.jsonl",
    )
    card_examples: bool = Field(
        True, description="the schema card shows one stored instance of every relationship pattern, read from this KB"
    )
    card_similarity: bool = Field(
        False,
        description="the schema card lists the build's SIMILAR_* edges too (the paper's card is the store's whole "
        "schema; they relate nodes by text, not by a fact of the KB, and a small model walks them "
        "in place of the KB's relationships)",
    )
    link: bool = Field(
        True,
        description="names in the question found in the KB's name index are listed in the prompt with their labels",
    )
    repair: bool = Field(True, description="one repair call when the engine cannot parse or plan the Cypher")
    repair_empty: bool = Field(
        True,
        description="one repair call when the grounded query runs and finds nothing, telling the model where "
        "its path stopped in the KB and which relations the KB holds there",
    )


class ExecutionParams(ParamGroup):
    """How the model's query runs in the KB being queried."""

    ground: bool = Field(
        True,
        description="before running, turn relationships the KB stores the other way, map unknown relationship types "
        "to a close one (else any type), move a name to the label that holds it, drop a name the "
        "question does not mention, and return the target rather than a node the question names; a "
        "grounded query that finds nothing runs again with its relationships undirected, then with "
        "its text conditions relaxed",
    )
    semantic_text: bool = Field(
        True,
        description="a text condition (`CONTAINS 'words'`) that matched nothing ranks what the rest of the "
        "query finds, or the target label when nothing else constrains it, by how each node's "
        "closest sentence reads against the words (the graph's encoder); vector steps read "
        "sentences too",
    )
    lengthen: bool = Field(
        True,
        description="a grounded query that finds nodes along one path from one named node walks one stored "
        "relation further while the longer path reads closer to the question than its own by "
        "`lengthen_margin` (the graph's encoder), up to three relations, where the longer query finds nodes",
    )
    lengthen_margin: float = Field(0.03, ge=0.0, le=2.0, description="how much closer a longer path must read")
    max_rows: int = Field(2000, ge=1, description="rows kept from the Cypher result (the store caps them)")
    timeout_ms: int = Field(5000, ge=1, description="Cypher time limit")


class AnswerParams(ParamGroup):
    """How the query's nodes become the k results."""

    alpha: float = Field(0.6, ge=0.0, le=1.0, description="BM25 weight of the hybrid ranking, fill and fallback")
    fill: bool = Field(True, description="fill to k from hybrid over the target label")
    named_last: bool = Field(
        True,
        description="nodes the question names rank after the other results (a question asks for what it "
        "does not give: 'the other films of the studio that made X')",
    )


class SparkParams(GroupedParams):
    plan: PlanParams = Field(default_factory=PlanParams)
    execution: ExecutionParams = Field(default_factory=ExecutionParams)
    answer: AnswerParams = Field(default_factory=AnswerParams)
