"""A question restated in the KB's own relation names, by one model call: what a selector that
reads relation chains against a question (GraphRAFT's `similar`) reads beside the question itself.

Why: a sentence encoder reads 'the darling of X's other half' no closer to `spouse of spouse` than
to any other chain of people, and no word list drawn from the KB or the model's words per relation
holds every word a person may use. The model reads the question whole: asked to say each relation
the question asks for by one of the KB's relation names, keeping the names and the order, it
writes 'the spouse of X's spouse', which the encoder reads as the KB names it. The restatement is
read beside the question, not instead of it, so a restatement that drops or invents a relation
costs half a reading, not the question. The one example in the prompt uses relations of no KB
this project holds; the KB's own relations come from its schema (`KBView.patterns`).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from sagegraph.errors import ReplyRejected
from sagegraph.llm import Reply, parse_json_reply
from sagegraph.retrieve.kb.adapt import words
from sagegraph.retrieve.kb.view import KBView

MAX_RELATIONS = 60  # the most frequent relation patterns listed; a long tail is rarely asked for
MAX_GROWTH = 3  # a restatement longer than this many times the question (and 200 characters) is not one

RESTATE_SYSTEM = (
    "You restate questions about a knowledge graph in the graph's own words. You are given the graph's "
    "relations (each as: relation name (from type -> to type)) and a question. Rewrite the question so that "
    "each relation it asks about is said by one of the relation names listed, in the same order as the "
    "question walks them. Keep every name of a person, place or thing exactly as written. Change nothing else.\n"
    "Example. Relations: employer (Person -> Company), founder (Company -> Person), located in (Company -> City)\n"
    "Question: who set up the firm that pays Jane Roe?\n"
    'Reply: {"question": "who is the founder of the employer of Jane Roe?"}\n'
    'Reply with JSON only: {"question": "..."}.'
)


def said(name: str) -> str:
    """A relation or type name as a question says it: words apart ('CauseOfDeath': cause of death)."""
    return words(re.sub(r"(?<=[a-z0-9])(?=[A-Z])", " ", name))


def relation_lines(view: KBView) -> str:
    """Each relation name once, with the types it most often links, most frequent first."""
    seen: dict[str, tuple[str, str]] = {}
    for head, relation, tail, _ in view.patterns:
        if relation not in seen and len(seen) < MAX_RELATIONS:
            seen[relation] = (head, tail)
    return ", ".join(f"{said(rel)} ({said(head)} -> {said(tail)})" for rel, (head, tail) in seen.items())


def restate_messages(view: KBView, question: str) -> list[dict[str, str]]:
    return [
        {"role": "system", "content": RESTATE_SYSTEM},
        {"role": "user", "content": f"Relations: {relation_lines(view)}\nQuestion: {question}"},
    ]


def read_restatement(text: str, question: str) -> str:
    """The restated question; ValueError where the reply holds none (not JSON, no text, or far
    longer than the question: a model that answers or explains instead of restating)."""
    reply: Any = parse_json_reply(text)
    said = reply.get("question") if isinstance(reply, dict) else None
    if not isinstance(said, str) or not said.strip():
        raise ValueError("no 'question' text")
    said = " ".join(said.split())
    if len(said) > max(200, MAX_GROWTH * len(question)):
        raise ValueError("not a restatement: far longer than the question")
    return said


def restate(chat: Callable[..., Reply], view: KBView, question: str) -> str | None:
    """The question in the KB's relation names, or None where the model's reply holds none (the
    caller reads the question alone and counts it). A reply that cannot be read is refused by the
    client's `accept`, so it is never cached as a good one."""
    try:
        reply = chat(
            "restate",
            restate_messages(view, question),
            response_format={"type": "json_object"},
            max_tokens=128,
            accept=lambda text: read_restatement(text, question),
        )
    except ReplyRejected:
        return None
    try:
        return read_restatement(reply.text, question)
    except ValueError:
        return None
