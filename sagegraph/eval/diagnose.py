"""What a finished KB sweep says about its retrievers, read from its run files (0 calls, nothing
rerun): results per question group, why each first answer missed, and each method's own report.
Gold (answer ids, their type, relation paths) is read only to score and classify; it reaches no
retrieval path. The methods say how their misses and their runs read (`Retriever.miss_kind`,
`Retriever.run_report`), so this module names none."""

from __future__ import annotations

import collections
import csv
import json
from pathlib import Path
from typing import Any

from sagegraph.corpus.questions import load_questions
from sagegraph.errors import ConfigError
from sagegraph.eval.compare import display_label, load_results, per_query, row_label
from sagegraph.eval.runner import read_done
from sagegraph.retrieve.graph_index import GraphIndex
from sagegraph.retrieve.registry import retriever_class
from sagegraph.runfiles import complete_lines

QUALITY = ("hit@1", "hit@5", "recall@20", "mrr")
COST = {
    "calls/q": "llm_calls",
    "prompt_tok/q": "llm_work_prompt_tokens",
    "completion_tok/q": "llm_work_completion_tokens",
    "llm_s/q": "llm_work_seconds",
}
RATES = {
    "fallback": ("fallback", "fallback_answers"),
    "grounded": ("grounded",),
    "repair_calls": ("repair_calls",),
    "unnamed": ("unnamed",),
}


def _mean(values: list[float]) -> float | None:
    return round(sum(values) / len(values), 3) if values else None


def latest_runs(sweep: Path) -> dict[str, Path]:
    """Each finished configuration's run directory, by label: those of the sweep's summary.csv (its
    own grid), and of a label run more than once (under an older prompt version) the latest."""
    if not (sweep / "runs").is_dir():
        raise ConfigError(f"{sweep}: not a sweep directory (no runs/)")
    current = None
    if (sweep / "summary.csv").exists():
        with (sweep / "summary.csv").open(newline="") as f:
            current = {row["config"] for row in csv.DictReader(f)}
    latest: dict[str, Path] = {}
    for run in sorted((sweep / "runs").iterdir()):
        if not (run / "metrics.json").exists():
            continue
        label = json.loads((run / "config.json").read_text())["label"]
        if current is not None and label not in current:
            continue
        if (
            label not in latest
            or (run / "metrics.json").stat().st_mtime > (latest[label] / "metrics.json").stat().st_mtime
        ):
            latest[label] = run
    return dict(sorted(latest.items(), key=lambda item: item[1].name))


def _questions_file(sweep: Path) -> Path:
    path = sweep / "questions.sample.jsonl"
    if not path.exists():
        raise ConfigError(f"{sweep}: no questions.sample.jsonl (a sweep with `sample:`)")
    return path


def group_runs(sweep: Path, by: str) -> list[tuple[str, list[tuple[str, dict[str, Any]]]]]:
    """(label, [(group, per-question row)]) per finished configuration, in run directory order."""
    runs = latest_runs(sweep)
    group = {q.id: str(q.meta.get(by, "")) for q in load_questions(_questions_file(sweep))}
    out = []
    for label, run in runs.items():
        rows = read_done(run / "per_query.jsonl").values()  # a resumed run's last row per question
        out.append((label, [(group.get(row["qid"], ""), row) for row in rows]))
    return out


def group_table(
    label: str, rows: list[tuple[str, dict[str, Any]]], diagnostics: tuple[str, ...] = ()
) -> list[dict[str, Any]]:
    """One row per group and `all`: quality, cost per question as spent when the replies were made
    (a replay reports the same), the rates of fallback, repairs and unnamed questions, and any
    per-question diagnostic asked for (a question whose trace lacks it is left out, not scored 0)."""
    groups = sorted({g for g, _ in rows}, key=lambda g: (len(g), g))
    out = []
    for name in [*groups, "all"]:
        chosen = [row for g, row in rows if name in ("all", g)]
        line: dict[str, Any] = {"config": label, "group": name, "questions": len(chosen)}
        line |= {metric: _mean([row[metric] for row in chosen]) for metric in QUALITY}
        line |= {column: _mean([row.get(key) or 0 for row in chosen]) for column, key in COST.items()}
        for rate, keys in RATES.items():
            values = [
                next((float(counters[k]) for k in keys if k in counters), None)
                for counters in ((row.get("counters") or {}) for row in chosen)
            ]
            known = [v for v in values if v is not None]
            line[rate] = _mean(known) if known else None
        line["errors"] = _mean([float(bool(row.get("error"))) for row in chosen])
        for diagnostic in diagnostics:
            line[diagnostic] = _mean(
                [
                    float(row["diagnostics"][diagnostic])
                    for row in chosen
                    if diagnostic in (row.get("diagnostics") or {})
                ]
            )
        out.append(line)
    return out


def gold_relations(meta: dict[str, Any]) -> int | None:
    """How many relations the gold path walks: `relation_paths` where the file has it, else `hops`."""
    paths = meta.get("relation_paths")
    if paths:
        return len(paths[0])
    return int(meta["hops"]) if meta.get("hops") is not None else None


def misses(sweep: Path, labels: list[str], by: str) -> dict[str, dict[str, dict[str, int]]]:
    """Per configuration and group: how many first answers hit, and each miss by the first kind its
    method's `miss_kind` says applies."""
    runs = {label: run for label, run in latest_runs(sweep).items() if label in labels}
    missing = sorted(set(labels) - set(runs))
    if missing:
        raise ConfigError(f"{sweep}: no finished run labelled {missing}")
    questions = {q.id: q for q in load_questions(_questions_file(sweep))}
    out: dict[str, dict[str, dict[str, int]]] = {}
    graph: GraphIndex | None = None
    for label, run in runs.items():
        config = json.loads((run / "config.json").read_text())
        graph = graph or GraphIndex(Path(config["graph"]))
        method = retriever_class(config["retriever"])
        hits = per_query(run, "hit@1")
        # a resumed run appends: the last trace of each question
        traces = {trace["qid"]: trace for trace in map(json.loads, complete_lines(run / "traces.jsonl"))}
        table: dict[str, collections.Counter] = collections.defaultdict(collections.Counter)
        for trace in traces.values():
            question = questions[trace["qid"]]
            group = str(question.meta.get(by))
            if hits[question.id]:
                table[group]["hit"] += 1
                continue
            rows = graph.rows_for_ids(list(question.gold_sources))
            gold_type = str(graph.types[rows[0]]) if len(rows) else None
            table[group][method.miss_kind(trace, gold_type, gold_relations(question.meta))] += 1
        out[label] = {group: dict(counts) for group, counts in sorted(table.items())}
    return out


def run_reports(sweep: Path, partial: bool = False) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Each run's quality and cost per question, then its method's own columns (`run_report`);
    and the runs not finished (with `partial`, also in the rows, over the questions they have done)."""
    rows, unfinished = [], []
    results = load_results(sweep / "runs", partial=True)
    for config, metrics in results:
        if metrics.get("partial"):
            unfinished.append({"config": display_label(config, results), "questions_done": metrics["questions"]})
            if not partial:
                continue
        row: dict[str, Any] = {"config": row_label(config, metrics, results), "questions": metrics.get("questions")}
        row |= {metric: metrics.get(metric) for metric in QUALITY}
        row |= {column: metrics.get(f"{key}_per_query") for column, key in COST.items()}
        row |= retriever_class(config.retriever).run_report(sweep / "runs" / config.key(), metrics)
        rows.append(row)
    return rows, unfinished


def markdown(rows: list[dict[str, Any]]) -> str:
    columns = list(dict.fromkeys(c for row in rows for c in row))
    lines = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    for row in rows:
        cells = (
            "" if row.get(c) is None else f"{row[c]:.3f}" if isinstance(row[c], float) else str(row[c]) for c in columns
        )
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)
