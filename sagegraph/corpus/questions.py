"""Question files for `evaluate` and sweeps, in either layout, told apart line by line:

- KB questions: `{"id", "question", "answer_ids": [...]}`; answers are KB object ids (a node's
  `source_id`); any other field (template, hops, target type, gold Cypher) is kept in `meta`;
- OTT-QA's `questions.jsonl` (`question_id`, `question`, `table_id`, `answer-node`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from sagegraph.corpus.jsonl import ErrorPolicy, require
from sagegraph.corpus.ottqa import load_records
from sagegraph.corpus.ottqa import parse_question as parse_ottqa_question
from sagegraph.corpus.records import Question
from sagegraph.errors import InputError

KB_KEYS = {"id", "question", "answer_ids"}


def parse_kb_question(obj: dict[str, Any], path: Path, lineno: int) -> Question:
    answers = require(obj, "answer_ids", list, path, lineno)
    if not answers or not all(isinstance(a, (str, int)) for a in answers):
        raise InputError(path, lineno, "answer_ids", "expected a non-empty list of KB object ids")
    text = require(obj, "question", str, path, lineno)
    if not text.strip():
        raise InputError(path, lineno, "question", "empty")
    return Question(id=str(require(obj, "id", (str, int), path, lineno)), text=text, gold_sources=[str(a) for a in answers],
                    meta={k: v for k, v in obj.items() if k not in KB_KEYS})


def parse_question(obj: dict[str, Any], path: Path, lineno: int) -> Question:
    if "answer_ids" in obj:
        return parse_kb_question(obj, path, lineno)
    return parse_ottqa_question(obj, path, lineno)


def load_questions(path: Path, policy: ErrorPolicy | None = None) -> list[Question]:
    path = Path(path)
    if not path.exists():
        raise InputError(path, None, None, "questions file not found")
    qs = load_records(path, parse_question, policy or ErrorPolicy())
    seen: set[str] = set()
    for q in qs:
        if q.id in seen:
            raise InputError(path, None, "id", f"question id {q.id!r} appears twice")
        seen.add(q.id)
    return qs
