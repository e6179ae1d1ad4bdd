"""GraphRAFT's diagnostics: why a first answer missed (`sagegraph diagnose failures`) and what
selection did in a run (`sagegraph diagnose report`); how often its first pick was the best
template by gold is `sagegraph graphraft labels --run`. Gold is read only to classify."""

from __future__ import annotations

import re
from typing import Any

SELECTION_COUNTERS = (
    "ungrounded_replies",
    "unreadable_replies",
    "picks_from_prior",
    "templates",
    "no_templates",
    "resolved_exact",
    "resolved_vector",
)


def miss_kind(trace: dict[str, Any], gold_type: str | None, relations: int | None) -> str:
    """`no template` (nothing to run: no entity resolved, or the question names none), `answer
    type` (the chosen template ends at another type than the gold answer's), `right type` (the
    right type by the wrong chain, or no condition to single out the answer: templates carry no
    property filter and no text)."""
    chosen = trace.get("chosen_template")
    if not chosen:
        return "no template"
    end = re.search(r"\(x:(\w+)\)", chosen)  # a template's answers are its `x`
    if gold_type and (end.group(1) if end else None) != gold_type:
        return "answer type"
    return "right type"


def run_report(metrics: dict[str, Any]) -> dict[str, Any]:
    """What selection did per question: replies that named no candidate, picks from the no-model
    order, templates offered, how the entities resolved."""
    questions = max(1, metrics.get("questions") or 1)
    return {name: round(metrics.get(f"count_{name}", 0) / questions, 3) for name in SELECTION_COUNTERS}
