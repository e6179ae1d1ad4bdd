"""What a sweep writes and prints about its configurations: the summary CSV (quality, cost per
query, method counters, per-step diagnostics, per question group), the CLI's brief table, and the
edge variants' sizes. Pure functions over finished results: the sweep flow, the CLI and `compare`
read the same rows."""

from __future__ import annotations

import csv
import json
from pathlib import Path
from typing import Any

from sagegraph.eval.compare import ordered
from sagegraph.eval.metrics import metric_names
from sagegraph.eval.runner import EvalConfig, group_columns


COST_KEYS = ("llm_calls_per_query", "llm_cached_per_query", "llm_prompt_tokens_per_query", "llm_completion_tokens_per_query",
             "llm_seconds_per_query", "llm_cost_usd_per_query", "llm_work_prompt_tokens_per_query",
             "llm_work_completion_tokens_per_query", "llm_work_seconds_per_query")


def write_summary(path: Path, results: list[tuple[EvalConfig, dict[str, Any]]]) -> Path:
    """One row per configuration: quality, latency, and (when any configuration called an LLM) what
    it cost per query, how often each method counter fired (plan parsed, fallback, ...), and the
    per-step diagnostics against gold that multi-step retrievers' traces allow."""
    keys = metric_names() + ["latency_p50_ms", "questions", "errors"]
    if any(m.get("llm_calls") for _, m in results):
        keys += list(COST_KEYS) + sorted({k for _, m in results for k in m if k.startswith("rate_")})
    keys += sorted({k for _, m in results for k in m if k.startswith("diag_")})  # per-step diagnostics (AF)
    groups = {k: None for _, m in results for k in group_columns(m)}  # per question group (hops, family, qtype)
    with path.open("w", newline="", encoding="utf-8") as fh:
        w = csv.writer(fh)
        w.writerow(["config", "retriever", "k", "total", "edges", "params", *keys, *groups])
        for c, m in ordered(results):
            params = json.dumps(c.params, sort_keys=True) if c.params else ""
            by = group_columns(m)
            w.writerow([c.label(), c.retriever, c.k, c.total, c.edges, params, *[m.get(k) for k in keys], *[by.get(k) for k in groups]])
    return path


def brief_table(results: list[tuple[EvalConfig, dict[str, Any]]]) -> list[dict[str, Any]]:
    """What the CLI prints: per configuration Hit@1, Recall@20, MRR and LLM calls per query."""
    rows = []
    for c, m in ordered(results):
        row = {"config": c.label(), "hit@1": m.get("hit@1"), "recall@20": m.get("recall@20"), "mrr": m.get("mrr")}
        if m.get("llm_calls"):
            row["llm_calls/q"] = m.get("llm_calls_per_query")
        rows.append({k: (round(v, 4) if isinstance(v, float) else v) for k, v in row.items()})
    return rows


def variant_summary(graphs: dict[str, Path]) -> dict[str, Any]:
    out = {}
    for name, g in graphs.items():
        stats = g.parent / "stats" / "graph_stats.json"
        counts = json.loads(stats.read_text()) if stats.exists() else {}
        out[name or "(as built)"] = {"graph": str(g), "edges": counts.get("edges"), "edges_by_type": counts.get("edges_by_type")}
    return out
