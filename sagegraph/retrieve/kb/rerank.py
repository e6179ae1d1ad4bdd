"""AF-Retriever's step 8: LLM reranking of the k candidates, pointwise, listwise or pairwise.

Every reply the model can get wrong has a defined outcome, counted (af-retriever.txt App. A.2;
LLM-RETRIEVERS.md §2.1):
- pointwise: the first number in [0, 1] is the score; anything else scores 0.5 (neutral);
- listwise: the ids in the reply, in order; duplicates and ids that are not candidates dropped,
  candidates the reply forgot appended in their previous order; no usable id keeps the order;
- pairwise: binary insertion (CPython's sort of 20 items is binary insertion too) with the LLM as
  comparator; a reply naming neither id, or both, is a tie, and a tie keeps the earlier rank.
  The higher-ranked item is shown first, so a model that always names the first keeps the order.
Candidates are shown by their graph row number as id. A request the endpoint refuses for its
length (HTTP 400) is retried with thinner documents: relations only among the candidates, then no
relations, then no rerank at all; each step counted.
"""

from __future__ import annotations

import re
from collections.abc import Callable

from sagegraph.llm import LLMClient, LLMRequestRefused
from sagegraph.retrieve.kb.view import KBView
from sagegraph.retrieve.timeline import Timeline

RERANKERS = ("none", "pointwise", "listwise", "pairwise")

POINTWISE = """Question: {question}

Decide whether the candidate answer below, a {node_type}, answers the question. Score it from 0.0
to 1.0: 0.0 when it does not answer the question, 1.0 when there is explicit, strong evidence that
it does, in between for partial or weak evidence. Reply with the score only.

The {node_type}:
{doc}"""

LISTWISE = """Question: {question}

Each entry below is a candidate answer: an ID number, then its type and description.
{docs}

Order the IDs from the candidate that answers the question best to the one that answers it worst.
Make sure the best answer comes first. Reply with the ID numbers only, separated by commas."""

PAIRWISE = """Question: {question}

Two candidate answers, each an ID number, then its type and description.
ID {id1}:
{doc1}

ID {id2}:
{doc2}

Which of the two answers the question better? Reply with its ID number only."""

_THINK = re.compile(r"<think>.*?</think>|\\boxed\{|\}", re.DOTALL)
_INT = re.compile(r"\d+")
_FLOAT = re.compile(r"\d*\.\d+|\d+")


def _clean(text: str) -> str:
    return _THINK.sub(" ", text or "")


def parse_score(text: str) -> float | None:
    m = _FLOAT.search(_clean(text))  # the first number; one outside [0, 1] is no score
    return float(m.group()) if m and 0.0 <= float(m.group()) <= 1.0 else None


def parse_order(text: str, ids: list[int]) -> tuple[list[int] | None, int, int]:
    """(order, invented, missing): the reply's candidate ids deduplicated, the rest appended;
    None when the reply names no candidate at all."""
    allowed = set(ids)
    named = [int(x) for x in _INT.findall(_clean(text))]
    kept = list(dict.fromkeys(x for x in named if x in allowed))
    invented = len({x for x in named if x not in allowed})
    if not kept:
        return None, invented, len(ids)
    missing = [x for x in ids if x not in set(kept)]
    return kept + missing, invented, len(missing)


def parse_choice(text: str, a: int, b: int) -> int | None:
    """The id the reply names, if it names exactly one of the two."""
    named = {int(x) for x in _INT.findall(_clean(text))} & {a, b}
    return named.pop() if len(named) == 1 else None


def binary_insertion(items: list[int], better: Callable[[int, int], bool]) -> list[int]:
    """Stable binary-insertion sort: `better(x, y)` means x strictly before y."""
    out: list[int] = []
    for x in items:
        lo, hi = 0, len(out)
        while lo < hi:
            mid = (lo + hi) // 2
            if better(x, out[mid]):
                hi = mid
            else:
                lo = mid + 1
        out.insert(lo, x)
    return out


class Reranker:
    """Reorders candidate rows for one question; counters and LLM events go to the trace."""

    def __init__(
        self,
        kind: str,
        llm: LLMClient,
        view: KBView,
        timeline: Timeline,
        counters: dict[str, int],
        relations: int = 8,
        text_chars: int = 240,
    ):
        self.kind, self.llm, self.view, self.timeline, self.c = kind, llm, view, timeline, counters
        self.relations, self.text_chars = relations, text_chars
        for key in (
            "rerank_calls",
            "rerank_parse_failures",
            "rerank_invented_ids",
            "rerank_missing_ids",
            "rerank_ties",
            "rerank_degraded",
            "rerank_skipped",
        ):
            self.c.setdefault(key, 0)

    def _docs(self, rows: list[int], level: int) -> dict[int, str]:
        among = set(rows) if level == 1 else None
        rels = self.relations if level < 2 else 0
        return {r: self.view.describe(r, relations=rels, among=among, text_chars=self.text_chars) for r in rows}

    def _ask(self, name: str, prompt: str, max_tokens: int) -> str:
        messages = [{"role": "user", "content": prompt}]
        with self.timeline.span("llm", name, messages) as ev:
            reply = self.llm.chat(messages, max_tokens=max_tokens)
            self.timeline.reply(ev, reply)
        self.c["rerank_calls"] += 1
        return reply.text

    def rerank(self, question: str, rows: list[int]) -> list[int]:
        if self.kind == "none" or len(rows) < 2:
            return rows
        for level in range(3):
            try:
                return getattr(self, f"_{self.kind}")(question, rows, self._docs(rows, level))
            except LLMRequestRefused:
                self.c["rerank_degraded"] += 1
        self.c["rerank_skipped"] = 1
        return rows

    def _pointwise(self, question: str, rows: list[int], docs: dict[int, str]) -> list[int]:
        scores = {}
        for r in rows:
            node_type = str(self.view.graph.types[r])
            s = parse_score(
                self._ask("rerank pointwise", POINTWISE.format(node_type=node_type, question=question, doc=docs[r]), 8)
            )
            if s is None:
                self.c["rerank_parse_failures"] += 1
                s = 0.5
            scores[r] = s
        return sorted(rows, key=lambda r: -scores[r])  # stable: equal scores keep the previous order

    def _listwise(self, question: str, rows: list[int], docs: dict[int, str]) -> list[int]:
        listing = "\n\n".join(f"ID {r}:\n{docs[r]}" for r in rows)
        text = self._ask("rerank listwise", LISTWISE.format(question=question, docs=listing), 8 * len(rows) + 16)
        order, invented, missing = parse_order(text, rows)
        self.c["rerank_invented_ids"] += invented
        if order is None:
            self.c["rerank_parse_failures"] += 1
            return rows
        self.c["rerank_missing_ids"] += missing
        return order

    def _pairwise(self, question: str, rows: list[int], docs: dict[int, str]) -> list[int]:
        def better(x: int, y: int) -> bool:  # y is already placed, so ranked higher: shown first
            text = self._ask(
                "rerank pairwise", PAIRWISE.format(question=question, id1=y, doc1=docs[y], id2=x, doc2=docs[x]), 8
            )
            choice = parse_choice(text, x, y)
            if choice is None:
                self.c["rerank_ties"] += 1
            return choice == x

        return binary_insertion(rows, better)
