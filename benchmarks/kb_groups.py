"""Per question group results of a KB sweep (a template `family`, a hop count): where each
retriever wins and loses, and what it paid there.

    .venv/bin/python -m benchmarks.kb_groups work/sweeps/kb-synth [--by family] [--metric recall@20]
    .venv/bin/python -m benchmarks.kb_groups work/sweeps/kb-pq-spark --by hops --table

Reads each configuration's per_query.jsonl (those of the sweep's summary.csv; of a label run more
than once, e.g. under an older prompt version, the latest) and the sweep's question file (its `--by` field). The
default prints one JSON line: per configuration, the metric's mean per group, plus the planners'
fallback and empty-Cypher rates per group. `--table` prints a Markdown table, one row per
configuration and group (and `all`): Hit@1, Hit@5, Recall@20, MRR, LLM calls, prompt and
completion tokens and LLM seconds per question (as spent when the replies were made: a replay
reports the same), and the rates of fallback, grounding repairs, repair calls and unnamed questions;
`--diag seen_hit` adds the mean of a per-question diagnostic (DGR's `seen_hit`: an agent was shown a
gold node), which says whether a method failed to find the answer or to commit it.
"""

from __future__ import annotations

import argparse
import json
from collections import defaultdict
from pathlib import Path
from typing import Any

from sagegraph.corpus.questions import load_questions

QUALITY = ("hit@1", "hit@5", "recall@20", "mrr")
COST = {"calls/q": "llm_calls", "prompt_tok/q": "llm_work_prompt_tokens", "completion_tok/q": "llm_work_completion_tokens", "llm_s/q": "llm_work_seconds"}
RATES = {"fallback": ("fallback", "fallback_answers"), "grounded": ("grounded",), "repair_calls": ("repair_calls",), "unnamed": ("unnamed",),
         "errors": ()}


def _mean(xs: list[float]) -> float | None:
    return round(sum(xs) / len(xs), 3) if xs else None


def latest_runs(sweep: Path) -> dict[str, Path]:
    """Each finished configuration's run directory (those of the sweep's summary.csv; of a label run
    more than once, e.g. under an older prompt version, the latest), in run directory order."""
    current = None  # the sweep's own grid, as its summary names it; runs of configurations since removed are left out
    if (sweep / "summary.csv").exists():
        import csv

        with (sweep / "summary.csv").open(newline="") as f:
            current = {row["config"] for row in csv.DictReader(f)}
    latest: dict[str, Path] = {}  # a label run again under a newer prompt version: its latest run only
    for run in sorted((sweep / "runs").iterdir()):
        if not (run / "metrics.json").exists():
            continue
        label = json.loads((run / "config.json").read_text())["label"]
        if current is not None and label not in current:
            continue
        if label not in latest or (run / "metrics.json").stat().st_mtime > (latest[label] / "metrics.json").stat().st_mtime:
            latest[label] = run
    return dict(sorted(latest.items(), key=lambda x: x[1].name))


def runs(sweep: Path, by: str) -> list[tuple[str, list[tuple[str, dict[str, Any]]]]]:
    """(label, [(group, per-question row)]) per finished configuration, in run directory order."""
    qfile = sweep / "questions.sample.jsonl"
    if not qfile.exists():
        raise SystemExit(f"{sweep}: no questions.sample.jsonl (a sweep with `sample:`)")
    group = {q.id: str(q.meta.get(by, "")) for q in load_questions(qfile)}
    out = []
    for label, run in latest_runs(sweep).items():
        rows = [json.loads(line) for line in (run / "per_query.jsonl").read_text().splitlines() if line.strip()]
        out.append((label, [(group.get(r["qid"], ""), r) for r in rows]))
    return out


def table_rows(label: str, rows: list[tuple[str, dict[str, Any]]], diags: tuple[str, ...] = ()) -> list[dict[str, Any]]:
    groups = sorted({g for g, _ in rows}, key=lambda g: (len(g), g))
    out = []
    for g in [*groups, "all"]:
        sel = [r for gg, r in rows if g == "all" or gg == g]
        row: dict[str, Any] = {"config": label, "group": g, "questions": len(sel)}
        row |= {m: _mean([r[m] for r in sel]) for m in QUALITY}
        row |= {c: _mean([r.get(key) or 0 for r in sel]) for c, key in COST.items()}
        for name, keys in RATES.items():
            if name == "errors":
                row[name] = _mean([float(bool(r.get("error"))) for r in sel])
                continue
            vals = [next((float((r.get("counters") or {})[k]) for k in keys if k in (r.get("counters") or {})), None) for r in sel]
            row[name] = _mean([v for v in vals if v is not None]) if any(v is not None for v in vals) else None
        for d in diags:  # a question whose trace lacks the step (an error, another method) is left out, not scored 0
            row[d] = _mean([float(r["diagnostics"][d]) for r in sel if d in (r.get("diagnostics") or {})])
        out.append(row)
    return out


def print_markdown(rows: list[dict[str, Any]]) -> None:
    cols = list(rows[0])
    print("| " + " | ".join(cols) + " |")
    print("|" + "---|" * len(cols))
    for r in rows:
        print("| " + " | ".join("" if r.get(c) is None else (f"{r[c]:.3f}" if isinstance(r[c], float) else str(r[c])) for c in cols) + " |")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("sweep", type=Path)
    ap.add_argument("--by", default="family", help="the question field that groups (family, hops, qtype)")
    ap.add_argument("--metric", default="recall@20")
    ap.add_argument("--table", action="store_true", help="a Markdown table of quality, cost and rates per configuration and group")
    ap.add_argument("--diag", action="append", default=[], help="with --table, a per-question diagnostic to add as a column (e.g. seen_hit); repeatable")
    args = ap.parse_args()
    found = runs(args.sweep, args.by)
    if args.table:
        rows = [r for label, per in found for r in table_rows(label, per, tuple(args.diag))]
        if rows:
            print_markdown(rows)
        return
    out: dict = {"benchmark": "kb_groups", "sweep": str(args.sweep), "by": args.by, "metric": args.metric, "configs": {}}
    for label, per in found:
        sums: dict[str, list[float]] = defaultdict(list)
        rates: dict[str, dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
        for g, row in per:
            sums[g].append(row[args.metric])
            for name in ("fallback", "cypher_empty", "cypher_invalid"):
                if name in (row.get("counters") or {}):
                    rates[name][g].append(row["counters"][name])
        entry: dict[str, Any] = {g: round(sum(v) / len(v), 3) for g, v in sorted(sums.items())}
        for name, vals in rates.items():
            entry[f"rate_{name}"] = {g: round(sum(v) / len(v), 3) for g, v in sorted(vals.items())}
        out["configs"][label] = entry
    print(json.dumps(out))


if __name__ == "__main__":
    main()
