"""The issue-16 GraphRAFT table from a sweep directory: each finished run's quality (Hit@1, Hit@5,
R@20, MRR), cost (LLM calls, prompt/completion tokens and seconds per question, as spent when the
replies were made), what selection did (ungrounded or unreadable replies, picks from the no-model
order, templates offered) and, given the labels of the same questions, its selection accuracy
(first pick == the best template by gold), next to the oracle ceiling of those labels.

    .venv/bin/sagegraph graphraft labels work/kb-synth --questions work/sweeps/kb-synth-graphraft/questions.sample.jsonl \\
        --ner llm --llm conf/llm_local.yaml --out work/graphraft/labels-sample-llm.jsonl
    .venv/bin/python -m benchmarks.graphraft_report work/sweeps/kb-synth-graphraft --labels work/graphraft/labels-sample-llm.jsonl

Prints a Markdown table, then one JSON line.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from benchmarks.machine import machine
from benchmarks.report_table import QUALITY_COST, print_markdown, quality_cost_row
from sagegraph.eval.compare import load_results
from sagegraph.retrieve.graphraft.labels import label_stats, read_labels, selection_accuracy


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("sweep_dir", type=Path)
    ap.add_argument("--labels", type=Path, help="labels of the sweep's questions (same entity step as the runs)")
    args = ap.parse_args()
    labels = read_labels(args.labels) if args.labels else None
    rows = []
    for c, m in load_results(args.sweep_dir / "runs"):
        row = quality_cost_row(c.label(), m)
        if c.retriever == "graphraft":
            n = max(1, m.get("questions") or 1)
            for k in ("ungrounded_replies", "unreadable_replies", "picks_from_prior", "templates", "no_templates", "resolved_exact", "resolved_vector"):
                row[k] = round(m.get(f"count_{k}", 0) / n, 3)
            if labels is not None:
                acc = selection_accuracy(args.sweep_dir / "runs" / c.key(), labels)
                row.update({"selection_acc": acc["accuracy"], "selection_acc_kept": acc["accuracy_kept"], "labelled": acc["questions"]})
        rows.append(row)
    oracle = label_stats(labels) if labels is not None else None
    print_markdown(rows, QUALITY_COST + ["ungrounded_replies", "picks_from_prior", "selection_acc", "selection_acc_kept"])
    if oracle:
        print(f"\noracle (best template per question by gold, labels {args.labels}): Recall@20 {oracle['oracle_recall@20']:.3f}, "
              f"kept {oracle['kept']}/{oracle['questions']}")
    print(json.dumps({"benchmark": "graphraft_report", "machine": machine(), "sweep": str(args.sweep_dir), "runs": rows, "oracle": oracle}))


if __name__ == "__main__":
    main()
