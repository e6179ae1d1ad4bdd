"""Per template family results of a KB sweep: where each retriever wins and loses.

    .venv/bin/python -m benchmarks.kb_families work/sweeps/kb-synth [--metric recall@20]

Reads each configuration's per_query.jsonl and the sweep's question file (its `family` field) and
prints one JSON line: per configuration, the metric's mean per family, plus SPARK's fallback and
empty-Cypher rates per family when the configuration ran a planner.
"""

from __future__ import annotations

import argparse
import json
from collections import defaultdict
from pathlib import Path

from sagegraph.corpus.questions import load_questions


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("sweep", type=Path)
    ap.add_argument("--metric", default="recall@20")
    args = ap.parse_args()
    qfile = args.sweep / "questions.sample.jsonl"
    if not qfile.exists():
        raise SystemExit(f"{args.sweep}: no questions.sample.jsonl (a sweep with `sample:`)")
    family = {q.id: q.meta.get("family", "") for q in load_questions(qfile)}
    out: dict = {"benchmark": "kb_families", "sweep": str(args.sweep), "metric": args.metric, "configs": {}}
    for run in sorted((args.sweep / "runs").iterdir()):
        if not (run / "metrics.json").exists():
            continue
        label = json.loads((run / "config.json").read_text())["label"]
        sums: dict[str, list[float]] = defaultdict(list)
        rates: dict[str, dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
        for line in (run / "per_query.jsonl").read_text().splitlines():
            row = json.loads(line)
            f = family.get(row["qid"], "")
            sums[f].append(row[args.metric])
            for name in ("fallback", "cypher_empty", "cypher_invalid"):
                if name in (row.get("counters") or {}):
                    rates[name][f].append(row["counters"][name])
        entry = {f: round(sum(v) / len(v), 3) for f, v in sorted(sums.items())}
        for name, per in rates.items():
            entry[f"rate_{name}"] = {f: round(sum(v) / len(v), 3) for f, v in sorted(per.items())}
        out["configs"][label] = entry
    print(json.dumps(out))


if __name__ == "__main__":
    main()
