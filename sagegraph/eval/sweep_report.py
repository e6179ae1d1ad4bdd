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
from sagegraph.runfiles import replaced

COST_KEYS = (
    "llm_calls_per_query",
    "llm_cached_per_query",
    "llm_prompt_tokens_per_query",
    "llm_completion_tokens_per_query",
    "llm_seconds_per_query",
    "llm_cost_usd_per_query",
    "llm_work_prompt_tokens_per_query",
    "llm_work_completion_tokens_per_query",
    "llm_work_seconds_per_query",
)


def write_summary(path: Path, results: list[tuple[EvalConfig, dict[str, Any]]]) -> Path:
    """One row per configuration: quality, latency, and (when any configuration called an LLM) what
    it cost per query, how often each method counter fired (plan parsed, fallback, ...), and the
    per-step diagnostics against gold that multi-step retrievers' traces allow."""
    keys = metric_names() + ["latency_p50_ms", "questions", "errors"]
    if any(m.get("llm_calls") for _, m in results):
        keys += list(COST_KEYS) + sorted({k for _, m in results for k in m if k.startswith("rate_")})
    keys += sorted({k for _, m in results for k in m if k.startswith("diag_")})  # per-step diagnostics (AF)
    groups = {k: None for _, m in results for k in group_columns(m)}  # per question group (hops, family, qtype)
    with replaced(path) as tmp, tmp.open("w", newline="", encoding="utf-8") as fh:
        w = csv.writer(fh)
        w.writerow(["config", "retriever", "k", "total", "edges", "params", *keys, *groups])
        for c, m in ordered(results):
            params = json.dumps(c.params, sort_keys=True) if c.params else ""
            by = group_columns(m)
            w.writerow(
                [
                    c.label(),
                    c.retriever,
                    c.k,
                    c.total,
                    c.edges,
                    params,
                    *[m.get(k) for k in keys],
                    *[by.get(k) for k in groups],
                ]
            )
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


def comparison_lines(rows: list[dict[str, Any]], metrics: tuple[str, ...] = ("hit@1", "recall@20", "mrr")) -> list[str]:
    """`sagegraph compare` for a person: each configuration's questions, metrics and LLM calls, and
    its paired difference to the baseline with the bootstrap interval, aligned in columns."""

    def cell(row: dict[str, Any], m: str) -> str:
        vs = next((v for k, v in row.items() if k.startswith(f"{m} vs ") and isinstance(v, dict)), None)
        value = f"{row[m]:.3f}" if isinstance(row.get(m), (int, float)) else "-"
        if vs and vs.get("diff") is not None:
            value += f" ({vs['diff']:+.3f} [{vs['ci_low']:+.3f}, {vs['ci_high']:+.3f}])"
        return value

    def versus(m: str) -> str:
        base = next((k.split(" vs ", 1)[1] for r in rows for k in r if k.startswith(f"{m} vs ")), None)
        return f"{m} (vs {base} [95% CI])" if base else m

    head = ["config", "q", *[versus(m) for m in metrics], "llm calls/q"]
    table = [head] + [
        [
            str(r["config"]),
            str(r.get("questions", "")),
            *[cell(r, m) for m in metrics],
            f"{r.get('llm_calls/q') or 0:g}",
        ]
        for r in rows
    ]
    widths = [max(len(line[i]) for line in table) for i in range(len(head))]
    return ["  ".join(v.ljust(w) for v, w in zip(line, widths)).rstrip() for line in table]


def variant_summary(graphs: dict[str, Path]) -> dict[str, Any]:
    out = {}
    for name, g in graphs.items():
        stats = g.parent / "stats" / "graph_stats.json"
        counts = json.loads(stats.read_text()) if stats.exists() else {}
        out[name or "(as built)"] = {
            "graph": str(g),
            "edges": counts.get("edges"),
            "edges_by_type": counts.get("edges_by_type"),
        }
    return out


def plain_lines(figure4_rows: list[dict[str, Any]], graph: Path, questions: int) -> list[str]:
    """Three lines a reader needs after a sweep with a Fig. 4 comparison: what was built, what was
    compared, and what it means, in numbers; [] when the sweep compared no expansion with its
    seed retriever."""
    rows = [r for r in figure4_rows if r.get("gain") is not None and not r.get("edges")]
    if not rows:
        return []
    stats = graph.parent / "stats" / "graph_stats.json"
    counts = json.loads(stats.read_text()) if stats.exists() else {}
    base = rows[0].get("baseline", "the seed retriever")
    ks = " / ".join(str(r["k"]) for r in rows)
    gains = " / ".join(f"{100 * r['gain']:+.1f}" for r in rows)
    helped = [r for r in rows if r["gain"] > 0]
    verdict = (
        "the graph's edges add Recall@k at every k"
        if len(helped) == len(rows)
        else "the graph's edges add Recall@k at some k only"
        if helped
        else "the graph's edges do not help here"
    )
    return [
        f"built:     {graph} ({counts.get('nodes', '?')} nodes, {counts.get('edges', '?')} edges)",
        f"compared:  {base} seeds expanded along the graph's edges (BL+Graph, the best k1 + k2 split per k, "
        "chosen on these"
        f" questions) against {base} alone at the same k (Extended BL), on {questions} questions",
        f"means:     {verdict}: {gains} points at k = {ks}",
    ]
