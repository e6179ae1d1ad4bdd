"""Run artifacts (EVAL.md): per-query CSV, TREC run file, metrics.json; reading traces.jsonl back."""

from __future__ import annotations

import csv
import json
from pathlib import Path
from typing import Any, Iterable


def write_trec(path: Path, rows: Iterable[tuple[str, list[str], list[float]]], tag: str) -> None:
    """`qid Q0 docid rank score tag`, docids are source ids (what the gold set names)."""
    with path.open("w", encoding="utf-8") as fh:
        for qid, docs, scores in rows:
            for rank, (doc, score) in enumerate(zip(docs, scores), start=1):
                fh.write(f"{qid} Q0 {doc.replace(' ', '_')} {rank} {score:.6f} {tag}\n")


def write_per_query_csv(path: Path, rows: list[dict[str, Any]], metric_keys: list[str]) -> None:
    fields = ["qid", "gold", "ranked"] + metric_keys + ["latency_ms", "neighbourhood"]
    with path.open("w", encoding="utf-8", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=fields, extrasaction="ignore")
        w.writeheader()
        for r in rows:
            w.writerow({**r, "gold": "|".join(r["gold"]), "ranked": "|".join(r["ranked"][:100])})


def write_metrics(path: Path, metrics: dict[str, Any]) -> None:
    path.write_text(json.dumps(metrics, indent=1), encoding="utf-8")


def read_traces(path: Path) -> list[dict[str, Any]]:
    """The last trace per question (a resumed run appends), only those with recorded events; a
    line cut by a crash is skipped."""
    if not path.exists():
        return []
    rows: dict[str, dict[str, Any]] = {}
    for line in path.read_text(encoding="utf-8").splitlines():
        try:
            row = json.loads(line)
        except json.JSONDecodeError:
            continue
        if row.get("events"):
            rows[row["qid"]] = row
    return list(rows.values())
