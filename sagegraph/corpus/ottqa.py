"""OTT-QA dev: tables.jsonl, passages.jsonl, questions.jsonl (github wenhuchen/OTT-QA layout)."""

from __future__ import annotations

from pathlib import Path
from typing import Any
from urllib.parse import unquote

from sagegraph.corpus.jsonl import ErrorPolicy, load_records, require
from sagegraph.corpus.records import Document, Question, Table
from sagegraph.errors import InputError

TABLES = "tables.jsonl"
PASSAGES = "passages.jsonl"
QUESTIONS = "questions.jsonl"


def wiki_title(page_id: str) -> str:
    """'/wiki/Cartier_Field' -> 'Cartier Field': the passage title is only in its id."""
    return unquote(page_id.rsplit("/", 1)[-1]).replace("_", " ")


def _cell(value: Any, path: Path, lineno: int, where: str) -> tuple[str, list[str]]:
    if isinstance(value, list) and len(value) == 2 and isinstance(value[0], str):
        return value[0], [link for link in value[1] or [] if isinstance(link, str)]
    if isinstance(value, str):
        return value, []
    raise InputError(path, lineno, where, "expected [text, [links]]")


def parse_table(obj: dict[str, Any], path: Path, lineno: int) -> Table:
    uid = require(obj, "uid", str, path, lineno)
    header = [_cell(h, path, lineno, "header")[0] for h in require(obj, "header", list, path, lineno)]
    rows, links = [], []
    for r, row in enumerate(require(obj, "data", list, path, lineno)):
        if not isinstance(row, list) or len(row) != len(header):
            got = len(row) if isinstance(row, list) else type(row).__name__
            raise InputError(path, lineno, f"data[{r}]", f"ragged row: {got} cells, header has {len(header)}")
        cells = [_cell(c, path, lineno, f"data[{r}]") for c in row]
        rows.append([c[0] for c in cells])
        links.append([c[1] for c in cells])
    return Table(
        id=uid,
        title=require(obj, "title", str, path, lineno),
        header=header,
        rows=rows,
        section_title=obj.get("section_title") or "",
        section_text=obj.get("section_text") or "",
        intro=obj.get("intro") or "",
        cell_links=links,
    )


def parse_passage(obj: dict[str, Any], path: Path, lineno: int) -> Document:
    pid = require(obj, "id", str, path, lineno)
    text = require(obj, "text", str, path, lineno)
    return Document(id=pid, title=wiki_title(pid), text=text)


def parse_question(obj: dict[str, Any], path: Path, lineno: int) -> Question:
    gold = [require(obj, "table_id", str, path, lineno)]
    for node in obj.get("answer-node") or []:
        if isinstance(node, list) and len(node) >= 4 and node[3] == "passage" and isinstance(node[2], str):
            if node[2] not in gold:
                gold.append(node[2])
    return Question(
        id=require(obj, "question_id", str, path, lineno),
        text=require(obj, "question", str, path, lineno),
        gold_sources=gold,
        answer=obj.get("answer-text") or "",
    )


def load_ottqa(
    root: Path, policy: ErrorPolicy, max_sources: int | None = None, around: list[str] | None = None
) -> tuple[list[Table], list[Document]]:
    """Tables first, then passages; a --max-sources subset keeps tables and the passages they link,
    taken from the start of the files, or, with `around` (the questions' table ids), around them."""
    tables = load_records(root / TABLES, parse_table, policy, key=lambda t: t.id, key_field="uid")
    passages = load_records(root / PASSAGES, parse_passage, policy, key=lambda p: p.id)
    if max_sources is None or max_sources >= len(tables) + len(passages):
        return tables, passages
    if around is not None:
        return subset_around(tables, passages, around, max_sources)
    # A subset that still has cross-modal structure: n tables plus the passages they link to.
    by_id = {p.id: p for p in passages}
    n_tables = max(1, max_sources // 10)
    chosen_tables = tables[:n_tables]
    chosen: list[Document] = []
    seen: set[str] = set()
    for t in chosen_tables:
        for row in t.cell_links:
            for cell in row:
                for link in cell:
                    if link in by_id and link not in seen and len(chosen) < max_sources - len(chosen_tables):
                        seen.add(link)
                        chosen.append(by_id[link])
    for p in passages:
        if len(chosen) >= max_sources - len(chosen_tables):
            break
        if p.id not in seen:
            seen.add(p.id)
            chosen.append(p)
    return chosen_tables, chosen


def _linked(t: Table) -> list[str]:
    return list(dict.fromkeys(link for row in t.cell_links for cell in row for link in cell))


def subset_around(
    tables: list[Table],
    passages: list[Document],
    around: list[str],
    max_sources: int,
    question_share: float = 0.7,
    seed: int = 0,
) -> tuple[list[Table], list[Document]]:
    """A subset that keeps what the graph is for: up to `question_share` of the budget goes to the
    questions' tables (in question order) with every passage each table links, so neighbourhoods are
    whole; the rest are random distractor tables and passages (one table per ten sources, like the
    full corpus). Hyperlinks choose which sources enter; they never become edges here (the build
    decides edges as for any corpus)."""
    import random

    by_table = {t.id: t for t in tables}
    by_passage = {p.id: p for p in passages}
    chosen_t: dict[str, Table] = {}
    chosen_p: dict[str, Document] = {}
    budget = int(max_sources * question_share)
    for tid in dict.fromkeys(around):
        t = by_table.get(tid)
        if t is None or tid in chosen_t:
            continue
        links = [by_passage[p] for p in _linked(t) if p in by_passage and p not in chosen_p]
        if len(chosen_t) + len(chosen_p) + 1 + len(links) > budget:
            break
        chosen_t[tid] = t
        chosen_p.update((p.id, p) for p in links)
    rng = random.Random(seed)
    rest_t = [t for t in tables if t.id not in chosen_t]
    rest_p = [p for p in passages if p.id not in chosen_p]
    room = max_sources - len(chosen_t) - len(chosen_p)
    n_t = min(len(rest_t), room // 10)
    extra_t = rng.sample(rest_t, n_t)
    extra_p = rng.sample(rest_p, min(len(rest_p), room - n_t))
    return list(chosen_t.values()) + extra_t, list(chosen_p.values()) + extra_p


def load_questions(path: Path, policy: ErrorPolicy | None = None) -> list[Question]:
    return load_records(path, parse_question, policy or ErrorPolicy(), key=lambda q: q.id, key_field="question_id")
