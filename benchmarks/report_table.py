"""What the per-method sweep reports share: a run's quality and cost row, and the Markdown table."""

from __future__ import annotations

from typing import Any

QUALITY_COST = ["config", "questions", "hit@1", "hit@5", "recall@20", "mrr", "calls/q", "prompt_tok/q", "completion_tok/q", "llm_s/q"]


def quality_cost_row(label: str, m: dict[str, Any]) -> dict[str, Any]:
    """Quality and cost per question as spent when the replies were made (a replay reports the same)."""
    return {"config": label, "questions": m.get("questions"), "hit@1": m.get("hit@1"), "hit@5": m.get("hit@5"), "recall@20": m.get("recall@20"),
            "mrr": m.get("mrr"), "calls/q": m.get("llm_calls_per_query"), "prompt_tok/q": m.get("llm_work_prompt_tokens_per_query"),
            "completion_tok/q": m.get("llm_work_completion_tokens_per_query"), "llm_s/q": m.get("llm_work_seconds_per_query")}


def print_markdown(rows: list[dict[str, Any]], cols: list[str]) -> None:
    print("| " + " | ".join(cols) + " |")
    print("|" + "---|" * len(cols))
    for r in rows:
        print("| " + " | ".join("" if r.get(c) is None else (f"{r[c]:.3f}" if isinstance(r[c], float) else str(r[c])) for c in cols) + " |")
