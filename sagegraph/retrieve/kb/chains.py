"""A relation chain read as words, and a question with its names taken out: what a text encoder
compares when a method ranks walks or templates by how they read against the question (GraphRAFT's
`similar` selector, DGR's `fallback: chain`). One reading for both, so a chain scores the same
whichever method walked it."""

from __future__ import annotations

import re
from collections.abc import Sequence


def chain_phrase(hops: Sequence[tuple[str, str | None]]) -> str:
    """(relation, type of the node it reaches) per hop, from the start, read back from the end as a
    question reads ('the mother of X's child': `parents (Person) of children (Person)`). Directions
    are left out: a KB that stores both directions of a relation pair names each its own way, and
    either reads the same in a question. A hop whose end type is unknown is its relation alone."""
    words = [f"{rel.replace('_', ' ').lower()}" + (f" ({t})" if t else "") for rel, t in hops]
    return " of ".join(reversed(words))


def masked_question(question: str, names: list[str]) -> str:
    """The question with these entity names taken out: what a chain's phrase is read against (a
    name says which node, not which relation). GraphRAFT's `similar` selector and its training
    labels mask alike, so a tuned encoder sees at run time what it was trained on."""
    for name in names:
        question = re.sub(re.escape(name), " ", question, flags=re.IGNORECASE)
    return question


def name_window(question: str, name: str, words: int) -> str:
    """The `words` words on each side of the name's first mention in the question, the name left
    out: where a question says which relation leaves the named node ('the director of X', "X's
    child"), whatever the rest of it says about the relations after. '' where the question does
    not hold the name (a start the agent found by search)."""
    found = re.search(re.escape(name), question, flags=re.IGNORECASE) if name.strip() else None
    if found is None:
        return ""
    before = re.findall(r"\S+", question[: found.start()])[-words:] if words else []
    after = re.findall(r"\S+", question[found.end():])[:words] if words else []
    return " ".join(before + after)
