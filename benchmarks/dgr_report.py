"""The issue-15 table from a sweep directory: every finished run's quality (Hit@1, Hit@5, R@20,
MRR) and cost (LLM calls, prompt/completion tokens and seconds per question, as spent when the
replies were made), and for DGR runs the agents' behaviour: tool mix (share of global vs
neighbourhood calls, the paper's Fig. 2), steps per agent, share of agents stopped by T_max, by
repeating themselves, by finish, or answering with the fallback, and prompt tokens by step (the resent history's growth).

    .venv/bin/python -m benchmarks.dgr_report work/sweeps/kb-synth-dgr

Prints a Markdown table, then one JSON line. Unfinished runs (no metrics.json) are listed with the
number of questions they have done; `--partial` also puts them in the table over those questions.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np

from benchmarks.machine import machine
from benchmarks.report_table import QUALITY_COST, print_markdown, quality_cost_row
from sagegraph.eval.compare import display_label, load_results, row_label
from sagegraph.runfiles import read_traces


def dgr_behaviour(run: Path, m: dict) -> dict:
    c = {k[len("count_"):]: v for k, v in m.items() if k.startswith("count_")}
    agents = max(1, c.get("agents", 0))
    calls = c.get("global_calls", 0) + c.get("neighbour_calls", 0)
    by_step: dict[int, list[int]] = {}
    for row in read_traces(run / "traces.jsonl"):
        for a in row.get("agents") or []:
            for i, t in enumerate(a.get("prompt_tokens", []), start=1):
                by_step.setdefault(i, []).append(t)
    return {"global_share": round(c.get("global_calls", 0) / calls, 3) if calls else None,
            "neighbour_share": round(c.get("neighbour_calls", 0) / calls, 3) if calls else None,
            "steps_per_agent": round(c.get("steps", 0) / agents, 2), "t_max_share": round(c.get("stop_t_max", 0) / agents, 3),
            "finish_share": round(c.get("stop_finish", 0) / agents, 3),
            "repeats_share": round(c.get("stop_repeats", 0) / agents, 3), "fallback_share": round(c.get("fallback_answers", 0) / agents, 3),
            "answer_calls_per_agent": round(c.get("answer_calls", 0) / agents, 2), "parse_errors": c.get("parse_errors", 0),
            "repeated_calls_per_agent": round(c.get("repeated_calls", 0) / agents, 2),
            "no_neighbourhood_share": round(c.get("agents_without_neighbourhood", 0) / agents, 3),
            "prompt_tokens_by_step": {s: int(np.mean(v)) for s, v in sorted(by_step.items()) if s in (1, 2, 3, 5, 10, 15, 20)}}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("sweep_dir", type=Path)
    ap.add_argument("--partial", action="store_true", help="also unfinished runs, over the questions they have done (labelled so)")
    args = ap.parse_args()
    rows, unfinished = [], []
    results = load_results(args.sweep_dir / "runs", partial=True)
    for c, m in results:
        run = args.sweep_dir / "runs" / c.key()
        if m.get("partial"):
            unfinished.append({"config": display_label(c, results), "questions_done": m["questions"]})
            if not args.partial:
                continue
        row = quality_cost_row(row_label(c, m, results), m)
        if c.retriever == "dgr":
            row.update(dgr_behaviour(run, m))
        rows.append(row)
    print_markdown(rows, QUALITY_COST + ["global_share", "steps_per_agent", "t_max_share", "repeats_share", "fallback_share"])
    print(json.dumps({"benchmark": "dgr_report", "machine": machine(), "sweep": str(args.sweep_dir), "runs": rows, "unfinished": unfinished}))


if __name__ == "__main__":
    main()
