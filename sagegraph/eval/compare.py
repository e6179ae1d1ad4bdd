"""All retrievers side by side on one question set: quality, cost per query, and whether a
difference to the baseline is more than the questions' sampling noise.

Differences are paired (the same questions under both configurations), so the interval is a
paired bootstrap of the mean per-question difference (scipy's BCa by default); two configurations
with overlapping marginal intervals can still differ reliably, which unpaired intervals hide.
Only questions both runs scored are compared, and their number is reported.
"""

from __future__ import annotations

import csv
import json
import re
from pathlib import Path
from typing import Any

import numpy as np

from sagegraph.eval.runner import EvalConfig, group_columns, read_done, read_partial, run_dir
from sagegraph.retrieve.registry import default_baseline
from sagegraph.runfiles import replaced, write_text_whole

METRICS = ("hit@1", "recall@20")


def load_results(runs: Path, partial: bool = False) -> list[tuple[EvalConfig, dict[str, Any]]]:
    """The finished runs under a sweep's runs/ directory (config.json and metrics.json each); with
    `partial`, also the runs not finished yet, summarised over the questions they have done."""
    out = []
    for d in sorted(Path(runs).iterdir()):
        if not (d / "config.json").exists():
            continue
        cfg = json.loads((d / "config.json").read_text())
        c = EvalConfig.from_record(cfg)
        if (d / "metrics.json").exists():
            out.append((c, json.loads((d / "metrics.json").read_text())))
        elif partial and (m := read_partial(d, c)) is not None:
            out.append((c, m))
    return ordered(out)


def ordered(results: list[tuple[EvalConfig, dict[str, Any]]]) -> list[tuple[EvalConfig, dict[str, Any]]]:
    """Configurations in the order tables and plots show them (a sweep's and `compare`'s alike, not
    the run keys' hash order): by retriever, edge variant, total k, seed k, then label, its numbers
    compared as numbers so that a t_max or n axis reads 5, 10, 20 and not 10, 20, 5."""
    return sorted(
        results, key=lambda cm: (cm[0].retriever, cm[0].edges, cm[0].total, cm[0].k, natural_key(cm[0].label()))
    )


def natural_key(text: str) -> tuple[str | int, ...]:
    # re.split with a captured group alternates text and digits, so equal positions compare like types
    return tuple(int(p) if i % 2 else p for i, p in enumerate(re.split(r"(\d+)", text)))


def per_query(run_dir: Path, metric: str) -> dict[str, float]:
    return {q: float(r[metric]) for q, r in read_done(Path(run_dir) / "per_query.jsonl").items() if metric in r}


def paired_bootstrap(
    a: dict[str, float], b: dict[str, float], n_resamples: int = 5000, seed: int = 0, level: float = 0.95
) -> dict[str, Any]:
    """Mean of a - b over the questions both have, with its bootstrap confidence interval."""
    import scipy.stats

    qids = sorted(set(a) & set(b))
    if len(qids) < 2:
        return {"questions": len(qids), "diff": None, "ci_low": None, "ci_high": None}
    d = np.array([a[q] - b[q] for q in qids])
    out = {"questions": len(qids), "diff": round(float(d.mean()), 6)}
    if np.all(d == d[0]):  # no spread: the interval is the point (BCa is undefined there)
        return {**out, "ci_low": out["diff"], "ci_high": out["diff"]}
    res = scipy.stats.bootstrap(
        (d,), np.mean, n_resamples=n_resamples, confidence_level=level, random_state=np.random.default_rng(seed)
    )
    lo, hi = float(res.confidence_interval.low), float(res.confidence_interval.high)
    if not (np.isfinite(lo) and np.isfinite(hi)):  # BCa can fail on very skewed 0/1 data: percentile instead
        res = scipy.stats.bootstrap(
            (d,),
            np.mean,
            n_resamples=n_resamples,
            confidence_level=level,
            method="percentile",
            random_state=np.random.default_rng(seed),
        )
        lo, hi = float(res.confidence_interval.low), float(res.confidence_interval.high)
    return {**out, "ci_low": round(lo, 6), "ci_high": round(hi, 6)}


def interval(values: dict[str, float], **kw) -> dict[str, Any]:
    """One configuration's mean over its questions with a bootstrap interval: the error bar of
    the bar chart (the paired differences, not these, say whether two configurations differ)."""
    d = paired_bootstrap(values, dict.fromkeys(values, 0.0), **kw)
    return {"questions": d["questions"], "mean": d.pop("diff"), "ci_low": d["ci_low"], "ci_high": d["ci_high"]}


def display_label(c: EvalConfig, results: list[tuple[EvalConfig, dict[str, Any]]]) -> str:
    """The configuration's label, with its prompt version (else its run key) where another run in
    the directory has the same label: a run left from before a prompt change is not the new one."""
    same = [o for o, _ in results if o.label() == c.label() and o.key() != c.key()]
    if not same:
        return c.label()
    return (
        f"{c.label()} ({c.prompt})"
        if c.prompt and all(o.prompt != c.prompt for o in same)
        else f"{c.label()} ({c.key()})"
    )


def row_label(c: EvalConfig, m: dict[str, Any], results: list[tuple[EvalConfig, dict[str, Any]]]) -> str:
    """The label a table or plot shows: `display_label`, and for an unfinished run how far it got."""
    return display_label(c, results) + (f" (partial: {m.get('questions')} q)" if m.get("partial") else "")


def comparison(
    results: list[tuple[EvalConfig, dict[str, Any]]], runs: Path, baseline: str | None = None
) -> list[dict[str, Any]]:
    """One row per configuration: quality, LLM cost per query, and for each of METRICS the paired
    difference to the baseline configuration (the first with that retriever) with its interval."""
    baseline = baseline or default_baseline()
    base = next((c for c, _ in results if c.retriever == baseline), None)
    base_q = {metric: per_query(run_dir(runs, base), metric) for metric in METRICS} if base is not None else {}
    rows = []
    for c, m in results:
        row: dict[str, Any] = {
            "config": row_label(c, m, results),
            "retriever": c.retriever,
            "questions": m.get("questions"),
            "partial": bool(m.get("partial")),
            "errors": m.get("errors", 0),
        }
        for k in ("hit@1", "hit@5", "recall@20", "mrr"):
            row[k] = m.get(k)
        row.update(
            {
                "llm_calls/q": m.get("llm_calls_per_query"),
                "llm_seconds/q": m.get("llm_work_seconds_per_query", m.get("llm_seconds_per_query")),
                "usd/q": m.get("llm_cost_usd_per_query"),
                "prompt_tokens/q": m.get("llm_work_prompt_tokens_per_query"),
                "latency_p50_ms": m.get("latency_p50_ms"),
            }
        )
        row.update({k: v for k, v in group_columns(m).items() if not k.startswith("questions")})  # 'hit@1 hops=2', ...
        mine = {metric: per_query(run_dir(runs, c), metric) for metric in METRICS}
        for metric in METRICS:
            row[f"{metric} interval"] = interval(mine[metric])
        if base is not None and c.key() != base.key():
            for metric in METRICS:
                row[f"{metric} vs {baseline}"] = paired_bootstrap(mine[metric], base_q[metric])
        rows.append(row)
    return rows


def write_comparison(rows: list[dict[str, Any]], path: Path) -> Path:
    flat = []
    for r in rows:
        f = {k: v for k, v in r.items() if not isinstance(v, dict)}
        for k, v in r.items():
            if isinstance(v, dict):
                f.update({f"{k} {sk}": v[sk] for sk in ("diff", "mean", "ci_low", "ci_high") if sk in v})
        flat.append(f)
    keys = list(dict.fromkeys(k for f in flat for k in f))
    with replaced(path) as tmp, tmp.open("w", newline="", encoding="utf-8") as fh:
        w = csv.DictWriter(fh, fieldnames=keys)
        w.writeheader()
        w.writerows(flat)
    return path


def _plt():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def plot_bars(rows: list[dict[str, Any]], path: Path) -> Path:
    """Hit@1 and Recall@20 per configuration, each with its 95% bootstrap interval over the questions."""
    plt = _plt()
    labels = [r["config"] for r in rows]
    x = np.arange(len(rows))
    fig, ax = plt.subplots(figsize=(max(6.0, 0.6 * len(rows) + 2), 4.2))
    for i, metric in enumerate(METRICS):
        h = np.array([100 * (r.get(metric) or 0) for r in rows])
        iv = [r.get(f"{metric} interval") or {} for r in rows]
        lo = np.array([100 * v["ci_low"] if v.get("ci_low") is not None else hi for v, hi in zip(iv, h)])
        up = np.array([100 * v["ci_high"] if v.get("ci_high") is not None else hi for v, hi in zip(iv, h)])
        ax.bar(
            x + (i - 0.5) * 0.38,
            h,
            0.38,
            label=metric,
            yerr=np.vstack([np.maximum(h - lo, 0), np.maximum(up - h, 0)]),
            capsize=2,
            error_kw={"elinewidth": 0.8, "alpha": 0.7},
        )
    ax.set_xticks(x)
    ax.set_xticklabels(labels, rotation=40, ha="right", fontsize=7)
    ax.set_ylabel("%")
    ax.set_title("Hit@1 and Recall@20 per retriever (bars: 95% bootstrap intervals)")
    ax.grid(axis="y", alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def plot_quality_cost(rows: list[dict[str, Any]], path: Path) -> Path:
    """Recall@20 against LLM seconds per query (and dollars, where any configuration paid).

    Points are numbered and named in a legend beside the axes: configurations that reuse one
    another's replies (SPARK and SAGE seeded by it) sit on the same spot, where labels written at
    the points would print over each other."""
    plt = _plt()
    paid = any((r.get("usd/q") or 0) > 0 for r in rows)
    axes_keys = [("llm_seconds/q", "LLM seconds per query")] + ([("usd/q", "USD per query")] if paid else [])
    fig, axes = plt.subplots(1, len(axes_keys), figsize=(5.0 * len(axes_keys) + 4.5, 4.4), squeeze=False)
    markers = "osD^vP*Xh<>p"
    for ax, (key, label) in zip(axes[0], axes_keys):
        pts = [(float(r.get(key) or 0.0), 100 * float(r.get("recall@20") or 0)) for r in rows]
        span = max((c for c, _ in pts), default=0.0) or 1.0
        groups: list[tuple[float, float, list[str]]] = []  # points closer than a label's size share one
        for i, ((cost, rec), r) in enumerate(zip(pts, rows), start=1):
            ax.scatter([cost], [rec], marker=markers[(i - 1) % len(markers)], s=36, label=f"{i}  {r['config']}")
            near = next((g for g in groups if abs(g[0] - cost) <= 0.03 * span and abs(g[1] - rec) <= 2.5), None)
            if near:
                near[2].append(str(i))
            else:
                groups.append((cost, rec, [str(i)]))
        for cost, rec, names in groups:
            ax.annotate(",".join(names), (cost, rec), fontsize=7, xytext=(5, 3), textcoords="offset points")
        ax.set_xlabel(label)
        ax.set_ylabel("Recall@20 (%)")
        ax.grid(alpha=0.3)
        ax.margins(x=0.12, y=0.08)
    if not paid:
        axes[0][0].set_title("no configuration paid for its LLM calls (USD 0 per query)", fontsize=8)
    axes[0][-1].legend(loc="center left", bbox_to_anchor=(1.02, 0.5), fontsize=7, frameon=False)
    fig.suptitle("Quality against cost")
    fig.tight_layout()
    fig.savefig(path, dpi=110, bbox_inches="tight")
    plt.close(fig)
    return path


def compare_files(
    results: list[tuple[EvalConfig, dict[str, Any]]], runs: Path, out: Path, baseline: str | None = None
) -> list[Path]:
    """comparison.csv/.json and the two plots, written under `out`; nothing when fewer than two
    retrievers ran."""
    if len({c.retriever for c, _ in results}) < 2:
        return []
    rows = comparison(results, runs, baseline)
    write_text_whole(out / "comparison.json", json.dumps(rows, indent=1))
    return [
        write_comparison(rows, out / "comparison.csv"),
        out / "comparison.json",
        plot_bars(rows, out / "retrievers_bar.png"),
        plot_quality_cost(rows, out / "quality_vs_cost.png"),
    ]
