"""Why SPARK's first answer missed, read from a question's trace (`sagegraph diagnose failures`).
Gold (the answer's type, the gold path's length) is given only to classify a miss."""

from __future__ import annotations

import re
from typing import Any


def relations_walked(cypher: str | None) -> int:
    """The relationship patterns (`-[`) a query holds: a diagnostic's reading, not a parse."""
    return len(re.findall(r"-\[", cypher or ""))


def miss_kind(trace: dict[str, Any], gold_type: str | None, relations: int | None) -> str:
    """`no query` (the plan wrote none), `empty` (the query, after the repairs, found nothing and
    hybrid answered), `fewer relations` (the query walks fewer relations than the gold path),
    `enough relations` (it walks enough and still misses), `missed` (no gold path to compare)."""
    model = trace.get("cypher_model") or (trace.get("plan") or {}).get("cypher")
    if not model:
        return "no query"
    if (trace.get("counters") or {}).get("fallback"):
        return "empty"
    if not relations:
        return "missed"
    return "fewer relations" if relations_walked(trace.get("cypher_executed")) < relations else "enough relations"
