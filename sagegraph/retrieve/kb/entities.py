"""GraphRAFT's first step (graphraft.txt §4.1): name the question's entities, then resolve each to
one node.

Naming is one LLM call (typed where the schema allows: the reply's `type` is constrained to the
KB's node types) or, as a model-free alternative for cheap label generation, a gazetteer match of
the question's word n-grams against the KB's names and aliases. Resolution follows the public code
(exact normalised-name match first, else the name-vector top-1) and keeps what it did per entity:
how it matched, its score, and misses, so a run can say where a wrong answer began.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any, Literal

import numpy as np

from sagegraph.llm import Reply, parse_json_reply
from sagegraph.retrieve.kb.view import KBView, normalise

NER_SYSTEM = """You find the named entities in a question about a knowledge graph: the people, titles, organisations,
places, genres, awards or other named things the question mentions by name. Give each with its node type.
Node types: {types}
Reply with JSON only: {{"entities": [{{"name": "...", "type": "..."}}]}}. Copy names exactly as written in the question.
Descriptions that are not names (a topic, a theme, a kind of thing) are not entities; if there are none, reply {{"entities": []}}."""  # noqa: E501 - a prompt: its text is the recorded replies' key

Match = Literal["exact", "vector", "miss"]


@dataclass
class Entity:
    """A named entity and the node it resolved to (`row` None: a miss), with every node of that
    type sharing its name (`rows`): templates start from all of them, as the public code's
    queries match by name."""

    name: str
    type: str | None
    row: int | None = None
    rows: list[int] = field(default_factory=list)
    match: Match = "miss"
    score: float = 0.0

    def record(self, view: KBView) -> dict[str, Any]:
        d = asdict(self)
        if self.row is not None:
            d["node"] = f"{view.graph.types[self.row]}: {view.names[self.row]}"
        return d


def ner_schema(node_types: list[str]) -> dict[str, Any]:
    return {
        "type": "object",
        "required": ["entities"],
        "properties": {
            "entities": {
                "type": "array",
                "items": {
                    "type": "object",
                    "required": ["name", "type"],
                    "properties": {"name": {"type": "string"}, "type": {"enum": node_types}},
                },
            }
        },
    }


def read_entities(text: str, node_types: list[str]) -> list[tuple[str, str | None]]:
    """(name, type) pairs from a reply; a type outside the schema is dropped (the name kept).
    Raises ValueError on a reply that is not the JSON asked for."""
    data = parse_json_reply(text)
    items = data.get("entities")
    if not isinstance(items, list):
        raise ValueError("no 'entities' list")
    types = {t.lower(): t for t in node_types}
    out: list[tuple[str, str | None]] = []
    for it in items:
        if isinstance(it, str):
            it = {"name": it}
        if not isinstance(it, dict) or not isinstance(it.get("name"), str) or not it["name"].strip():
            continue
        t = it.get("type")
        out.append((it["name"].strip(), types.get(str(t).lower()) if t else None))
    return list(dict.fromkeys(out))


def ner_messages(view: KBView, question: str) -> list[dict[str, str]]:
    return [
        {"role": "system", "content": NER_SYSTEM.format(types=", ".join(view.graph.node_types()))},
        {"role": "user", "content": f"Question: {question}"},
    ]


def llm_entities(
    chat: Callable[..., Reply], view: KBView, question: str, constrain: bool = True
) -> tuple[list[tuple[str, str | None]], bool]:
    """(entities, parse_failed): a reply that cannot be read counts as naming none."""
    types = view.graph.node_types()
    fmt = {"type": "json_object", "schema": ner_schema(types)} if constrain else {"type": "json_object"}
    reply = chat("entities", ner_messages(view, question), response_format=fmt, max_tokens=256)
    try:
        return read_entities(reply.text, types), False
    except (ValueError, json.JSONDecodeError):
        return [], True


_WORD = re.compile(r"\w+(?:['’.-]\w+)*")
_POSSESSIVE = re.compile(r"['’]s$", re.IGNORECASE)


def gazetteer_entities(view: KBView, question: str) -> list[tuple[str, str | None]]:
    """Longest non-overlapping word n-grams of the question that are a KB name or alias, up to the
    KB's longest name. Case does not decide: a KB's questions may be written in lower case
    ("the husband of kalama"); only a question's opening word that is also a KB name ("Name the
    ...") is not read as one."""
    words = _WORD.findall(question)
    out: list[tuple[str, str | None]] = []
    i = 0
    while i < len(words):
        for n in range(min(view.longest_name_words, len(words) - i), 0, -1):
            span = words[i : i + n]
            key = normalise(" ".join(span))
            rows = view.name_index.get(key)
            if rows is None and _POSSESSIVE.search(span[-1]):  # "Ana Silva's films": the name without its 's
                span = [*span[:-1], _POSSESSIVE.sub("", span[-1])]
                key = normalise(" ".join(span))
                rows = view.name_index.get(key)
            if n > 1 and rows is not None and key == normalise(" ".join(span[1:])):
                continue  # "the X": the name starts a word later, where its key is the same
            if rows is not None and len(rows) and (i > 0 or n > 1 or key not in _OPENERS):
                types = {str(view.graph.types[r]) for r in rows}
                out.append((" ".join(span), types.pop() if len(types) == 1 else None))
                i += n
                break
        else:
            i += 1
    return list(dict.fromkeys(out))


_OPENERS = {"which", "what", "who", "where", "when", "how", "name", "list", "find"}


def linked_rows(view: KBView, question: str, per_name: int = 3) -> list[tuple[str, int]]:
    """(span, row) for the KB nodes (at most `per_name` a span) whose name the question holds:
    the prompt-side linking SPARK and DGR share."""
    return [
        (span, int(r))
        for span, _ in gazetteer_entities(view, question)
        for r in view.name_index.get(normalise(span), np.zeros(0, np.int64))[:per_name]
    ]


def resolve(view: KBView, name: str, node_type: str | None) -> Entity:
    """Exact normalised name or alias (of the named type when one was given and it has one), else
    the nearest name (of that type when given), read as `KBView.nearest_names` reads names."""
    e = Entity(name, node_type)
    rows = view.name_index.get(normalise(name), np.zeros(0, np.int64))
    if node_type:
        typed = rows[view.graph.types[rows] == node_type] if len(rows) else rows
        rows = typed if len(typed) else rows
    if len(rows):
        # Several nodes share the name: the best connected stands for them in prompts.
        e.row = int(rows[np.lexsort((rows, -view.degree[rows]))[0]])
        e.rows = _namesakes(view, e.row)
        e.match, e.score = "exact", 1.0
        return e
    pool = view.graph.rows_of_type(node_type) if node_type else np.arange(len(view.graph))
    if not len(pool):
        pool = np.arange(len(view.graph))
    nearest, cosines = view.nearest_names(name, pool, 1)
    if not len(nearest):
        return e
    e.row, e.match, e.score = int(nearest[0]), "vector", float(cosines[0])
    e.rows = _namesakes(view, e.row)
    return e


def _namesakes(view: KBView, row: int) -> list[int]:
    """The nodes of the row's type with its exact normalised name (itself included)."""
    same = view.name_index.get(view.norm_names[row], np.array([row], np.int64))
    return sorted({int(r) for r in same if view.graph.types[r] == view.graph.types[row]} | {row})


def resolve_all(view: KBView, named: list[tuple[str, str | None]]) -> list[Entity]:
    return [resolve(view, n, t) for n, t in named]


def entity_slots(entities: list[Entity]) -> list[Entity]:
    """The entities that become the templates' `$e0, $e1, ...`, in that order: misses left out and
    one slot per node set (two names of one film are one entity). The prompt's entity lines and the
    enumeration both number from this list, so `$e1` in a reply is `$e1` in the query run."""
    seen: dict[tuple[int, ...], Entity] = {}
    for e in entities:
        key = tuple(sorted(set(e.rows)))
        if key and key not in seen:
            seen[key] = e
    return list(seen.values())
