"""Where the gold answers sit in DGR's fallback chain ranking (`sagegraph dgr gold-rank`), per
question, so a change to the ranking reads as a distance moved, not only as Hit@1 on a few
questions. Gold is read only to score; the agents' replies are replayed from the reply cache (0
calls; a request without a recorded reply is an error)."""

from __future__ import annotations

import statistics
from typing import Any

from sagegraph.config import LLMConfig
from sagegraph.corpus.records import Question
from sagegraph.retrieve.dgr.agent import AgentRun
from sagegraph.retrieve.dgr.params import DGRParams
from sagegraph.retrieve.dgr.retriever import DGRRetriever
from sagegraph.retrieve.graph_index import GraphIndex
from sagegraph.retrieve.resources import open_resources


class _RankingsKept(DGRRetriever):
    """DGR keeping each fallback ranking it makes, whole (not cut at k)."""

    rankings: list[list[int]]

    def rank_chains(self, query: str, run: AgentRun, named: list[int] | None = None) -> list[int]:
        ranked = super().rank_chains(query, run, named)
        self.rankings.append(ranked)
        return ranked


def gold_ranks(graph: GraphIndex, questions: list[Question], params: DGRParams, llm: LLMConfig) -> dict[str, Any]:
    """Per question, the position of its first gold answer in the fallback's whole ranking (None:
    no gold answer ranked, or the agents answered themselves); their median and how many are first."""
    llm = llm.model_copy(update={"cache_mode": "replay"})
    retriever = _RankingsKept(open_resources(graph, llm), params)
    positions: dict[str, int | None] = {}
    lengths: dict[str, int] = {}
    for question in questions:
        retriever.rankings = []
        retriever.search(question.text, 1)
        gold = set(graph.rows_for_ids(list(question.gold_sources)))
        firsts = [next((i for i, row in enumerate(ranked) if row in gold), None) for ranked in retriever.rankings]
        found = [p for p in firsts if p is not None]
        positions[question.id] = min(found) if found else None
        lengths[question.id] = max((len(r) for r in retriever.rankings), default=0)
    known = [p for p in positions.values() if p is not None]
    return {
        "questions": len(positions),
        "first": sum(p == 0 for p in known),
        "median_position": statistics.median(known) if known else None,
        "positions": positions,
        "ranked": lengths,
    }
