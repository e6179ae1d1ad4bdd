"""Question files for `evaluate` and sweeps, in either layout, told apart line by line:

- KB questions: `{"id", "question", "answer_ids": [...]}`; answers are KB object ids (a node's
  `source_id`); any other field (template, hops, target type, gold Cypher) is kept in `meta`;
- OTT-QA's `questions.jsonl` (`question_id`, `question`, `table_id`, `answer-node`).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from sagegraph.corpus.jsonl import ErrorPolicy, load_records, require
from sagegraph.corpus.ottqa import parse_question as parse_ottqa_question
from sagegraph.corpus.records import Question
from sagegraph.errors import ConfigError, InputError
from sagegraph.runfiles import write_text_whole

KB_KEYS = {"id", "question", "answer_ids"}


def parse_kb_question(obj: dict[str, Any], path: Path, lineno: int) -> Question:
    answers = require(obj, "answer_ids", list, path, lineno)
    if not answers or not all(isinstance(a, (str, int)) for a in answers):
        raise InputError(path, lineno, "answer_ids", "expected a non-empty list of KB object ids")
    text = require(obj, "question", str, path, lineno)
    if not text.strip():
        raise InputError(path, lineno, "question", "empty")
    return Question(
        id=str(require(obj, "id", (str, int), path, lineno)),
        text=text,
        gold_sources=[str(a) for a in answers],
        meta={k: v for k, v in obj.items() if k not in KB_KEYS},
    )


# A question is sent to retrievers, encoders and models whole and written into every trace: one of
# 50 MB took 88 s and 7.7 GB. Longer ones are refused with their line; SAGEGRAPH_MAX_QUESTION_CHARS
# raises the bound for a collection that needs it (read where questions are read, Dask workers too).
MAX_QUESTION_CHARS = 4_000


def max_question_chars() -> int:
    value = os.environ.get("SAGEGRAPH_MAX_QUESTION_CHARS", "")
    if not value:
        return MAX_QUESTION_CHARS
    if not value.isdigit() or int(value) < 1:
        raise ConfigError(f"SAGEGRAPH_MAX_QUESTION_CHARS={value!r}: expected a positive whole number")
    return int(value)


def question_too_long(text: str) -> str | None:
    """Why `text` is past the bound (`max_question_chars`), or None."""
    limit = max_question_chars()
    return f"{len(text):,} characters; at most {limit:,} (SAGEGRAPH_MAX_QUESTION_CHARS)" if len(text) > limit else None


def checked_question_text(text: str, where: str = "question") -> str:
    """`text` when it is within the bound; raises ConfigError otherwise."""
    if (why := question_too_long(text)) is not None:
        raise ConfigError(f"{where}: {why}")
    return text


def parse_question(obj: dict[str, Any], path: Path, lineno: int) -> Question:
    question = parse_kb_question(obj, path, lineno) if "answer_ids" in obj else parse_ottqa_question(obj, path, lineno)
    if (why := question_too_long(question.text)) is not None:
        raise InputError(path, lineno, "question", why)
    return question


def load_questions(path: Path, policy: ErrorPolicy | None = None) -> list[Question]:
    path = Path(path)
    if not path.exists():
        raise InputError(path, None, None, "questions file not found")
    return load_records(path, parse_question, policy or ErrorPolicy(), key=lambda q: q.id)


def matching_questions(questions: list[Question], where: dict[str, Any]) -> list[Question]:
    """The questions whose metadata field equals the stated value (or one of the listed values),
    for every field of `where`, e.g. `{"split": "test"}` for a file that holds every split.
    Compared as text, so `hops: 2` matches a file's `"hops": 2` and `"2"` alike."""

    def wanted(v: Any) -> set[str]:
        return {str(x) for x in v} if isinstance(v, (list, tuple, set)) else {str(v)}

    wants = {k: wanted(v) for k, v in where.items()}
    return [q for q in questions if all(str(q.meta.get(k)) in vals for k, vals in wants.items())]


def sample_questions(questions: list[Question], n: int, by: str | None = None, seed: int = 0) -> list[Question]:
    """`n` questions drawn with `seed`, spread as evenly as possible over the values of `meta[by]`
    (round robin over the groups, each shuffled), returned in file order. Depends on nothing but
    the questions' ids and metadata: never on gold answers or on any retriever's results."""
    import random

    if n >= len(questions):
        return list(questions)
    rng = random.Random(seed)
    groups: dict[str, list[Question]] = {}
    for q in questions:
        groups.setdefault(str(q.meta.get(by, "")) if by else "", []).append(q)
    pools = [rng.sample(groups[g], len(groups[g])) for g in sorted(groups)]
    picked: set[str] = set()
    while len(picked) < n:
        for pool in pools:
            if pool and len(picked) < n:
                picked.add(pool.pop().id)
    return [q for q in questions if q.id in picked]


def write_question_subset(src: Path, ids: set[str], out: Path) -> Path:
    """The lines of `src` whose question is in `ids`, verbatim (any layout, every extra field)."""
    import json

    src, out = Path(src), Path(out)
    lines = []
    for lineno, line in enumerate(src.read_text(encoding="utf-8").splitlines(), start=1):
        if line.strip() and parse_question(json.loads(line), src, lineno).id in ids:
            lines.append(line)
    return write_text_whole(out, "\n".join(lines) + "\n")


def split_at(x: float, splits: Sequence[tuple[str, float]]) -> str:
    """The split a point x in [0, 1) falls in, the splits laid end to end by their shares."""
    acc = 0.0
    for name, share in splits:
        acc += share
        if x < acc:
            return name
    return splits[-1][0]
