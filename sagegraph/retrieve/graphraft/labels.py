"""GraphRAFT's training labels (graphraft.txt §4.2, the public `llm1.py`): for each training
question, the template that answers it best, by gold hits then result size (where the questions
file annotates relation paths, the template that walks one), kept when its recall is 1 and its
precision at least 0.1.

Labels read gold, so this module is evaluation and training-data code, never a retrieval path:
the retriever's own entity and template steps produce the candidates (same prompts, same reply
cache), and gold only picks among them. The same computation on test questions gives the oracle
ceiling (Recall@20 of the best template's nodes, ranked as the retriever ranks them) and the
reference for selection accuracy (how often the selector's first pick is the best template).
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import numpy as np

from sagegraph.corpus.records import Question
from sagegraph.retrieve.graphraft.retriever import GraphRAFTRetriever
from sagegraph.retrieve.graphraft.select import entity_lines, grammar_messages
from sagegraph.retrieve.kb.chains import masked_question
from sagegraph.retrieve.kb.entities import entity_slots
from sagegraph.retrieve.timeline import Timeline
from sagegraph.runfiles import write_jsonl_whole

MIN_PRECISION = 0.1  # the paper's rule, with recall 1
MAX_NEGATIVES = 50


def label_question(r: GraphRAFTRetriever, q: Question, k: int = 20) -> dict[str, Any]:
    counters: Counter = Counter()
    ents = r.entities(q.text, Timeline(), counters)
    _, templates = r.templates(ents)
    gold = set(q.gold_sources)
    out: dict[str, Any] = {
        "qid": q.id,
        "question": q.text,
        "family": q.meta.get("family"),
        "entities": [e.record(r.view) for e in ents],
        "entities_text": entity_lines(ents, r.view),
        "candidates": len(templates),
        "best": None,
        "kept": False,
    }
    if not templates or not gold:
        out["oracle_recall@20"] = 0.0
        return out
    src = r.graph.source_ids
    hits = [len({str(src[x]) for x in t.rows.tolist()} & gold) for t in templates]
    best = min(range(len(templates)), key=lambda i: (-hits[i], templates[i].count, i))
    # Where the questions file annotates the relation path (PathQuestion's `relation_paths`), the
    # template that walks it is the label: the paper's rule (fewest results among the most hits)
    # prefers a shortcut that happens to hold the same answers (the gender of X for "the sex of
    # X's child": Gender has two nodes), which teaches a selector to ignore hops.
    # A KB may store only one relation of an inverse pair (PathQuestion's `parents` step is often
    # a `children` edge walked backwards), so a chain of the path's length counts as walking it,
    # one that names its relations first.
    gold_paths = {tuple(x) for x in q.meta.get("relation_paths") or []}
    lengths = {len(x) for x in gold_paths}
    walks = [i for i, u in enumerate(templates) if u.kind != "path" and len(u.hops) in lengths and hits[i]]
    if walks:
        best = min(
            walks,
            key=lambda i: (-hits[i], tuple(h.rel for h in templates[i].hops) not in gold_paths, templates[i].count, i),
        )
    t = templates[best]
    recall, precision = hits[best] / len(gold), hits[best] / max(1, t.count)
    top = r.rank_rows(q.text, t.rows)[:k]
    # For a tuned `similar` encoder (retrieve/kb/chain_encoder.py): the question as that selector reads it
    # against this template, and the phrases of the templates around the same entities that hold
    # fewer gold answers (its hard negatives).
    worse = dict.fromkeys(
        u.phrase()
        for i, u in enumerate(templates)
        if u.slots == t.slots and (i not in walks if walks else hits[i] < hits[best])
    )
    worse.pop(t.phrase(), None)
    slots = entity_slots(ents)
    # A path no template walks (one that returns to a node it passed: "X's children's father's
    # son") leaves the paper's rule, whose shortcut is right for retrieval but wrong as a reading
    # of the question: marked, so a tuned encoder is not taught that three relation words are one.
    label_by = "relation_path" if walks else "hits_unwalked" if gold_paths else "hits"
    out.update(
        {
            "label_by": label_by,
            "masked": masked_question(q.text, [slots[i].name for i in t.slots]),
            "phrase": t.phrase(),
            "negatives": list(worse)[:MAX_NEGATIVES],
        }
    )
    out.update(
        {
            "best": t.cypher(),
            "kind": t.kind,
            "hits": hits[best],
            "size": t.count,
            "recall": round(recall, 6),
            "precision": round(precision, 6),
            "kept": recall == 1.0 and precision >= MIN_PRECISION,
            f"oracle_recall@{k}": len({str(src[x]) for x in top.tolist()} & gold) / len(gold),
        }
    )
    return out


def label_questions(
    r: GraphRAFTRetriever, questions: Iterable[Question], out: Path, k: int = 20
) -> list[dict[str, Any]]:
    """Written whole or not at all: `make encoders` takes an existing labels file as done, so a
    killed run must not leave half of one."""
    rows = [label_question(r, q, k) for q in questions]
    write_jsonl_whole(out, rows)
    return rows


def label_stats(rows: list[dict[str, Any]], k: int = 20) -> dict[str, Any]:
    n = max(1, len(rows))
    kept = [x for x in rows if x["kept"]]
    with_best = [x for x in rows if x["best"]]
    fam: dict[str, list[float]] = {}
    for x in rows:
        fam.setdefault(x.get("family") or "all", []).append(x.get(f"oracle_recall@{k}", 0.0))
    return {
        "questions": len(rows),
        "with_entities": sum(1 for x in rows if x["entities"]),
        "with_templates": len(with_best),
        "kept": len(kept),
        "kept_share": round(len(kept) / n, 4),
        "kept_by_kind": dict(Counter(x["kind"] for x in kept)),
        "mean_candidates": round(float(np.mean([x["candidates"] for x in rows])) if rows else 0.0, 2),
        f"oracle_recall@{k}": round(
            float(np.mean([x.get(f"oracle_recall@{k}", 0.0) for x in rows])) if rows else 0.0, 4
        ),
        f"oracle_recall@{k}_by_family": {f: round(float(np.mean(v)), 4) for f, v in sorted(fam.items())},
    }


def read_labels(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in Path(path).read_text(encoding="utf-8").splitlines() if line.strip()]


def selection_accuracy(run_dir: Path, labels: list[dict[str, Any]]) -> dict[str, Any]:
    """How often a run's first chosen template is the labelled best one: over questions that have
    a best template, and over those whose label is kept (the paper's training rule)."""
    chosen: dict[str, str | None] = {}
    with (Path(run_dir) / "traces.jsonl").open(encoding="utf-8") as fh:
        for line in fh:
            t = json.loads(line)
            if "chosen_template" in t:
                chosen[t["qid"]] = t["chosen_template"]
    scored = [x for x in labels if x["best"] and x["qid"] in chosen]
    kept = [x for x in scored if x["kept"]]

    def acc(xs):
        return round(sum(chosen[x["qid"]] == x["best"] for x in xs) / len(xs), 4) if xs else None

    return {"questions": len(scored), "accuracy": acc(scored), "kept_questions": len(kept), "accuracy_kept": acc(kept)}


def sft_records(labels: list[dict[str, Any]]) -> Iterable[dict[str, Any]]:
    """Chat records (question and entity parameters -> the best template as the `grammar`
    selector's JSON reply) for the kept labels: what a user fine-tunes the selector on."""
    for x in labels:
        if not x["kept"]:
            continue
        yield {
            "messages": [
                *grammar_messages(x["question"], x["entities_text"]),
                {"role": "assistant", "content": json.dumps({"query": x["best"]})},
            ],
            "meta": {"qid": x["qid"], "kind": x["kind"], "size": x["size"]},
        }


def export_labels(labels_path: Path, out: Path) -> int:
    return write_jsonl_whole(out, sft_records(read_labels(labels_path)))
