"""A dependency-free sentence splitter: no tokenizer data has to be downloaded at run time."""

from __future__ import annotations

import re

_ABBREV = {
    "mr",
    "mrs",
    "ms",
    "dr",
    "st",
    "jr",
    "sr",
    "vs",
    "no",
    "inc",
    "ltd",
    "co",
    "corp",
    "u.s",
    "e.g",
    "i.e",
    "etc",
    "fig",
    "mt",
    "ft",
    "gen",
    "col",
    "lt",
    "sgt",
    "prof",
    "rev",
    "jan",
    "feb",
    "mar",
    "apr",
    "jun",
    "jul",
    "aug",
    "sep",
    "sept",
    "oct",
    "nov",
    "dec",
}
_BOUNDARY = re.compile(r"(?<=[.!?])[\"')\]]*\s+(?=[\"'(\[]?[A-Z0-9])")


def split_sentences(text: str) -> list[str]:
    """Split at ., ! or ? followed by space and a capital or digit, skipping common abbreviations."""
    text = " ".join(text.split())
    if not text:
        return []
    out, start = [], 0
    for m in _BOUNDARY.finditer(text):
        piece = text[start : m.start()].rstrip()
        last = piece.rsplit(" ", 1)[-1].rstrip(".").lower()
        # "Dr. Smith", "U.S. Army", "J. Smith": the dot ends an abbreviation or an initial.
        if last in _ABBREV or (len(last) == 1 and last.isalpha()):
            continue
        out.append(text[start : m.end()].strip())
        start = m.end()
    tail = text[start:].strip()
    if tail:
        out.append(tail)
    return out
