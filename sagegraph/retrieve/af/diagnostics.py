"""Why AF's first answer missed, read from a question's trace (`sagegraph diagnose failures`).
Gold (the answer's type, the gold path's length) is given only to classify a miss."""

from __future__ import annotations

from typing import Any


def miss_kind(trace: dict[str, Any], gold_type: str | None, relations: int | None) -> str:
    """`no query` (no Cypher parsed), `answer type` (its type step named another type than the
    gold answer's), `fewer relations` (fewer triplets than the gold path), `enough relations`,
    `missed` (no gold path to compare)."""
    steps = trace.get("steps") or {}
    parsed = steps.get("parsed")
    if not parsed:
        return "no query"
    if gold_type and steps.get("target_type") != gold_type:
        return "answer type"
    if not relations:
        return "missed"
    return "fewer relations" if len(parsed.get("triplets") or []) < relations else "enough relations"
