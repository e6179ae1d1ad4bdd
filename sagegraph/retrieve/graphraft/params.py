"""GraphRAFT's parameters, grouped by what they govern: the templates enumerated around the
question's entities (`TemplateParams`), how one is chosen (`SelectionParams`) and how the chosen
templates' nodes become the k results (`AnswerParams`). A sweep or `-p KEY=VALUE` names each by
its own name. The paper's GraphRAFT is `selector: grammar, three_hop: false, unnamed: resolve,
selector_encoder: null`."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from sagegraph.retrieve.base import GroupedParams, ParamGroup
from sagegraph.retrieve.kb.unnamed import UNNAMED_HELP, Unnamed


class TemplateParams(ParamGroup):
    """Which templates are enumerated, and where they run."""

    two_hop: bool = Field(True, description="enumerate 2-hop templates")
    three_hop: bool = Field(
        True, description="also enumerate 3-hop chains from one entity (not the paper's; needs two_hop)"
    )
    paths: bool = Field(True, description="enumerate connecting paths between two entities")
    max_mid_degree: int | None = Field(
        5000, ge=1, description="2-hop middles with more KB edges are skipped (hubs); None: keep all"
    )
    execute: Literal["memory", "store"] = Field(
        "memory", description="run templates on the in-memory adjacency or as Cypher in the graph store (same rows)"
    )
    cypher_timeout_ms: int = Field(10_000, ge=100, description="store execution: per-template timeout")


class SelectionParams(ParamGroup):
    """How the question's entities are named and a template chosen."""

    ner: Literal["llm", "gazetteer"] = Field(
        "llm", description="name entities with one LLM call (paper) or by matching KB names in the question (no model)"
    )
    selector: Literal["score", "grammar", "listed", "similar", "prior"] = Field(
        "similar",
        description="similar (not the paper's): templates whose relation chains read closest to the question, no "
        "selection call; grammar (the paper's): constrained decoding among the templates; score: exact "
        "log-probability of each template by a local model; listed: a zero-shot choice from a menu; prior: no model",
    )
    selector_encoder: str | None = Field(
        "adapted",
        description="similar: `adapted`, the encoder `sagegraph adapt` drew from the KB itself read together with the "
        "graph's own (the graph's own alone until the graph is adapted); the path of one trained on labels "
        "(`sagegraph graphraft train-selector`), read alone; None, the graph's own; not the paper's",
    )
    length_norm: bool = Field(
        True, description="score: rank by log-probability per token (Hugging Face beam search's default), not the sum"
    )
    scorer_model: str | None = Field(
        None, description="score: the GGUF chat model that scores (default: the local model profile's file)"
    )
    m: int = Field(5, ge=1, le=50, description="templates chosen and run in order (the paper's beam width)")
    max_candidates: int = Field(
        300, ge=1, description="templates offered to a model's selector, in the no-model order (the grammar grows)"
    )


class AnswerParams(ParamGroup):
    """How the chosen templates' nodes become the k results."""

    rank: Literal["name", "dense"] = Field(
        "name", description="order each template's nodes by name similarity (paper) or by content similarity"
    )
    fill: bool = Field(True, description="fill the rest of k from the vector index")
    second_stage: Literal["none", "dense", "listwise"] = Field(
        "none",
        description="reorder the k nodes by content similarity or one LLM listwise call (training-free stand-ins "
        "for the paper's fine-tuned L2 reader)",
    )
    unnamed: Unnamed = Field("motifs", description=UNNAMED_HELP)


class GraphRAFTParams(GroupedParams):
    selection: SelectionParams = Field(default_factory=SelectionParams)
    templates: TemplateParams = Field(default_factory=TemplateParams)
    answer: AnswerParams = Field(default_factory=AnswerParams)
