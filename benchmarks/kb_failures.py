"""Why an LLM retriever's first answer missed, per question group, read from a finished sweep's
traces (0 calls, nothing rerun). The README's "where each default still fails" is this script's
output, so a reader can check it on their own KB's sweep.

    .venv/bin/python -m benchmarks.kb_failures work/sweeps/kb-pq-all --label 'spark[k=20]' --group hops

Each question whose Hit@1 is 0 gets one kind, the first that applies:
- spark: `no query` (the plan wrote none), `empty` (the query, after the repairs, found nothing: the
  hybrid fallback answered), `fewer relations` (the query that ran walks fewer relations than the
  question's gold path), `enough relations` (it walks enough, and still misses), `missed` (the
  question has no gold path to compare: a descriptive one);
- af: `no query`, `answer type` (its type step named another type than the gold answer's),
  `fewer relations` (fewer triplets than the gold path), `enough relations`, `missed`;
- graphraft: `no template` (nothing to run: no entity resolved, or the question names none),
  `answer type` (the chosen template ends at another type than the gold answer's), `right type`
  (the right type, the wrong chain or no condition to single out the answer: templates carry no
  property filter and no text).

Gold (answer ids, their type, `relation_paths` or `hops`) is read only to classify a miss, a
diagnostic; it reaches no retrieval path. The relations a query walks are counted as its
relationship patterns (`-[`), a diagnostic's reading, not a parse.
"""

from __future__ import annotations

import argparse
import collections
import json
import re
from pathlib import Path

from benchmarks.kb_groups import latest_runs
from benchmarks.machine import machine
from sagegraph.eval.evaluate import read_questions
from sagegraph.retrieve.graph_index import GraphIndex


def gold_relations(meta: dict) -> int | None:
    """How many relations the gold path walks: `relation_paths` where the file has it, else `hops`."""
    paths = meta.get("relation_paths")
    if paths:
        return len(paths[0])
    return int(meta["hops"]) if meta.get("hops") is not None else None


def walked(cypher: str | None) -> int:
    return len(re.findall(r"-\[", cypher or ""))


def spark_kind(trace: dict, gold_type: str | None, relations: int | None) -> str:
    model = trace.get("cypher_model") or (trace.get("plan") or {}).get("cypher")
    if not model:
        return "no query"
    if trace["counters"].get("fallback"):
        return "empty"
    if not relations:
        return "missed"
    return "fewer relations" if walked(trace.get("cypher_executed")) < relations else "enough relations"


def af_kind(trace: dict, gold_type: str | None, relations: int | None) -> str:
    steps = trace.get("steps") or {}
    parsed = steps.get("parsed")
    if not parsed:
        return "no query"
    if gold_type and steps.get("target_type") != gold_type:
        return "answer type"
    if not relations:
        return "missed"
    return "fewer relations" if len(parsed.get("triplets") or []) < relations else "enough relations"


def graphraft_kind(trace: dict, gold_type: str | None, relations: int | None) -> str:
    chosen = trace.get("chosen_template")
    if not chosen:
        return "no template"
    end = re.search(r"\(x:(\w+)\)", chosen)  # a template's answers are its `x`
    if gold_type and (end.group(1) if end else None) != gold_type:
        return "answer type"
    return "right type"


KINDS = {"spark": spark_kind, "af": af_kind, "graphraft": graphraft_kind}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("sweep", type=Path, help="a finished sweep directory")
    ap.add_argument("--label", action="append", required=True, help="a configuration's label (as in summary.csv); repeatable")
    ap.add_argument("--group", default="hops", help="the questions' grouping field (hops, family, qtype)")
    args = ap.parse_args()
    runs = {label: run for label, run in latest_runs(args.sweep).items() if label in args.label}
    missing = set(args.label) - set(runs)
    if missing:
        raise SystemExit(f"{args.sweep}: no finished run labelled {sorted(missing)}")
    questions = {q.id: q for q in read_questions(args.sweep / "questions.sample.jsonl")}
    g = GraphIndex(Path(json.loads(next(iter(runs.values())).joinpath("config.json").read_text())["graph"]))
    out = {}
    for label, run in runs.items():
        kind_of = KINDS[label.split("[", 1)[0]]
        hits = {r["qid"]: r["hit@1"] for r in map(json.loads, (run / "per_query.jsonl").open())}
        table: dict[str, collections.Counter] = collections.defaultdict(collections.Counter)
        for trace in map(json.loads, (run / "traces.jsonl").open()):
            q = questions[trace["qid"]]
            group = str(q.meta.get(args.group))
            if hits[q.id]:
                table[group]["hit"] += 1
                continue
            rows = g.rows_for_ids(list(q.gold_sources))
            gold_type = str(g.types[rows[0]]) if len(rows) else None
            table[group][kind_of(trace, gold_type, gold_relations(q.meta))] += 1
        out[label] = {group: dict(c) for group, c in sorted(table.items())}
        for group, c in sorted(table.items()):
            print(f"{label}  {args.group}={group}: " + ", ".join(f"{k} {n}" for k, n in c.most_common()))
    print(json.dumps({"benchmark": "kb_failures", "machine": machine(), "sweep": str(args.sweep), "group": args.group, "misses": out}))


if __name__ == "__main__":
    main()
