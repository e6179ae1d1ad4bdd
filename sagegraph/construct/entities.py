"""Heuristic named-entity spans: runs of capitalised tokens, plus hyperlink targets.

Good enough to give the offline pipeline an entity-overlap signal without any model or API.
"""

from __future__ import annotations

import re
from urllib.parse import unquote

_CONNECTORS = {"of", "the", "de", "and", "for", "in", "on", "von", "van", "la", "le", "du", "del", "da", "di", "&"}
_STARTERS = {
    "the",
    "a",
    "an",
    "in",
    "on",
    "at",
    "he",
    "she",
    "it",
    "they",
    "we",
    "i",
    "his",
    "her",
    "its",
    "their",
    "this",
    "that",
    "these",
    "those",
    "there",
    "after",
    "before",
    "during",
    "when",
    "while",
    "as",
    "but",
    "and",
    "or",
    "if",
    "from",
    "with",
    "by",
    "for",
    "to",
    "of",
    "since",
    "although",
    "however",
    "also",
    "then",
    "thus",
    "later",
    "following",
    "january",
    "february",
    "march",
    "april",
    "may",
    "june",
    "july",
    "august",
    "september",
    "october",
    "november",
    "december",
}
_TOKEN = re.compile(r"[A-Za-z0-9À-ÿ][\w'’\-\.]*")
_PUNCTUATION = re.compile(r"[^\w\s]")


def normalise(name: str) -> str:
    return " ".join(_PUNCTUATION.sub(" ", name.lower()).split())


def capitalised_spans(text: str, max_spans: int = 30) -> list[str]:
    tokens = _TOKEN.findall(text)
    spans: list[str] = []
    run: list[str] = []

    def flush():
        while run and run[-1].lower() in _CONNECTORS:
            run.pop()
        if run:
            if not (len(run) == 1 and (run[0].lower() in _STARTERS or len(run[0]) < 2)):
                spans.append(" ".join(run).rstrip("."))
        run.clear()

    for tok in tokens:
        if tok[0].isupper():
            if not run and tok.lower() in _STARTERS:
                continue
            run.append(tok)
        elif run and tok.lower() in _CONNECTORS:
            run.append(tok)
        else:
            flush()
    flush()
    seen, out = set(), []
    for s in spans:
        key = normalise(s)
        if key and key not in seen:
            seen.add(key)
            out.append(s)
        if len(out) >= max_spans:
            break
    return out


def link_title(link: str) -> str:
    return unquote(link.rsplit("/", 1)[-1]).replace("_", " ")
