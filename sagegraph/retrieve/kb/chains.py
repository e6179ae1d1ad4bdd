"""A relation chain read as words, and a question with its names taken out: what a text encoder
compares when a method ranks walks or templates by how they read against the question (GraphRAFT's
`similar` selector, DGR's `fallback: chain`). One reading for both, so a chain scores the same
whichever method walked it."""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from itertools import combinations, permutations


def chain_phrase(hops: Sequence[tuple[str, str | None]]) -> str:
    """(relation, type of the node it reaches) per hop, from the start, read back from the end as a
    question reads ('the mother of X's child': `parents (Person) of children (Person)`). Directions
    are left out: a KB that stores both directions of a relation pair names each its own way, and
    either reads the same in a question. A hop whose end type is unknown is its relation alone."""
    words = [f"{rel.replace('_', ' ').lower()}" + (f" ({t})" if t else "") for rel, t in hops]
    return " of ".join(reversed(words))


def joint_phrase(relations: Sequence[str], target: str | None) -> str:
    """Relations that each lead from a named node to the same node ('acted in (Movie) and directed
    (Movie)'): a conjunction as a selector reads it, whichever method enumerated or drew it."""
    return " and ".join(chain_phrase([(rel, target)]) for rel in relations)


def masked_question(question: str, names: list[str]) -> str:
    """The question with these entity names taken out: what a chain's phrase is read against (a
    name says which node, not which relation). GraphRAFT's `similar` selector and its training
    labels mask alike, so a tuned encoder sees at run time what it was trained on."""
    for name in names:
        question = re.sub(re.escape(name), " ", question, flags=re.IGNORECASE)
    return question


def words_around(question: str, name: str) -> tuple[list[str], list[str]] | None:
    """The question's words before and after the name's first mention (case aside); None where
    the question does not hold the name."""
    found = re.search(re.escape(name), question, flags=re.IGNORECASE) if name.strip() else None
    if found is None:
        return None
    return re.findall(r"\S+", question[: found.start()]), re.findall(r"\S+", question[found.end() :])


def name_distances(question: str, name: str, farthest: int | None = None) -> list[tuple[str, int]]:
    """The question's words in order, the name's first mention left out, each with how many words
    it stands from that mention (1: beside it, on either side). A question says the relation that
    leaves the named node nearest the name and each later one farther out ('the nationality of the
    mother of X', "X's mother's nationality", 'films directed by people who acted in a film
    produced by X'), whichever side it reads from. [] where the question does not hold the name.
    With `farthest`, words beyond it count as that far: the bands read (`distance_bands`) grow with
    the square of the depth, so a long question costs a bounded number of encodings."""
    around = words_around(question, name)
    if around is None:
        return []
    before, after = around
    cap = farthest if farthest is not None else max(len(before), len(after))
    return [(w, min(len(before) - i, cap)) for i, w in enumerate(before)] + [
        (w, min(i + 1, cap)) for i, w in enumerate(after)
    ]


def distance_bands(words: Sequence[tuple[str, int]]) -> dict[tuple[int, int], str]:
    """For every band of distances lo <= d < hi, the words standing that far from the name, in the
    question's order: what one relation of a chain is read against when the chain's relations are
    laid outward from the name in their order (`order_gap`). Each band holds a word."""
    depth = max((d for _, d in words), default=0)
    return {
        (lo, hi): " ".join(w for w, d in words if lo <= d < hi)
        for lo in range(1, depth + 1)
        for hi in range(lo + 1, depth + 2)
    }


def order_gap(hops: Sequence[str], fit: Callable[[str, tuple[int, int]], float], depth: int) -> float:
    """How much worse a chain's relations read laid outward from its start's name in their own
    order than in the best order of the same relations (0: its own order reads best, or it has one
    relation; otherwise below 0). A layout cuts the distances 1..depth into one band per relation,
    nearest first, and reads as the mean of `fit(relation, band)`; each order takes its best cut.
    A sentence encoder reads a chain's phrase nearly as a bag of relations, so two chains of the
    same relations in another order tie on it (synthetic q00886: 0.489 against 0.492); this
    compares only orders of the same relations, so chains of different relations rank as before."""
    k = len(hops)
    if k < 2 or depth < k:
        return 0.0
    cuts = [(1, *c, depth + 1) for c in combinations(range(2, depth + 1), k - 1)]

    def best(order: Sequence[str]) -> float:
        return max(sum(fit(h, (c[i], c[i + 1])) for i, h in enumerate(order)) for c in cuts) / k

    read = {order: best(order) for order in set(permutations(hops))}  # its own order among them
    return read[tuple(hops)] - max(read.values())
