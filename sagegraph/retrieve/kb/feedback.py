"""What a query that found nothing met in the KB, said back to the model that wrote it.

A small model's Cypher that runs and finds nothing has mostly walked a relation its node does not
have, or walked one the wrong way; the store's empty result says none of that, and the model
cannot mend what it is not told. Here the query's path is walked in the KB's adjacency hop by hop
from the node it names, and the message says where the walk stopped and which relations the KB
does hold there (relation, direction, the other end's label, how many nodes): the typed message
the executor of plan-and-execute KBQA gives its planner (SCD, arXiv 2511.07998). A query that is
not one path from one named node gets, instead, what the KB holds around each node the question
names. Every word of a message is the KB's own schema or the query's own text.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from sagegraph.retrieve.kb.grounding import KBSchema, query_names
from sagegraph.retrieve.kb.lengthen import Hop, query_path
from sagegraph.retrieve.kb.metapaths import hop_groups
from sagegraph.retrieve.kb.schema_card import cypher_literal, node_literal
from sagegraph.retrieve.kb.view import KBView, normalise

LINES = 12  # relations listed at one place: a hub's dozens of relation types would fill the prompt
NAMED = 3  # nodes of the question described where the query is not one path


def _step(relation: str, forward: bool, end: str) -> str:
    return f"-[:{relation}]->(:{end})" if forward else f"<-[:{relation}]-(:{end})"


def held_relations(view: KBView, rows: np.ndarray, limit: int = LINES) -> list[str]:
    """`-[:rel]->(:Label): n nodes` for each stored relation, either way, leaving the rows; most
    nodes first."""
    groups = hop_groups(view, rows)
    names = view.relation_types
    ranked = sorted(groups.items(), key=lambda item: (-len(item[1]), names[item[0][0]], not item[0][1], item[0][2]))
    return [
        f"{_step(names[code], forward, end)}: {len(ends)} node{'s' * (len(ends) != 1)}"
        for (code, forward, end), ends in ranked[:limit]
    ]


def _walk_stops(view: KBView, start: np.ndarray, hops: Sequence[Hop]) -> tuple[int, np.ndarray] | None:
    """The first hop (index) that reaches no node from the rows before it, with those rows; None
    where every hop reaches some (the store's empty result came from a condition, not the walk)."""
    codes = {name: code for code, name in enumerate(view.relation_types)}
    here = start
    for at, hop in enumerate(hops):
        code = codes.get(hop.relation)
        ends = None if code is None else hop_groups(view, here).get((code, hop.forward, hop.end))
        if ends is None or not len(ends):
            return at, here
        here = ends
    return None


def _named_rows(view: KBView, name: str, label: str | None) -> np.ndarray:
    rows = view.name_index.get(normalise(name), np.zeros(0, np.int64))
    return rows if label is None or not len(rows) else rows[view.graph.types[rows] == label]


def _path_feedback(view: KBView, start: np.ndarray, literal: str, hops: Sequence[Hop]) -> str | None:
    """Where the walk from `start` along `hops` stops and what the KB holds there; None where it
    reaches nodes all the way."""
    stop = _walk_stops(view, start, hops)
    if stop is None:
        return None
    at, rows = stop
    walked = literal + "".join(_step(hop.relation, hop.forward, hop.end) for hop in hops[:at])
    missing = _step(hops[at].relation, hops[at].forward, hops[at].end)
    where = walked if at == 0 else f"each of the {len(rows)} nodes {walked} reaches" if len(rows) > 1 else walked
    held = held_relations(view, rows)
    lines = [f"{walked}{missing} matches nothing: {where} has no {missing}."]
    lines += ["What the KB holds there:", *(f"  {line}" for line in held)] if held else ["It has no relations."]
    return "\n".join(lines)


def _around(view: KBView, named: Sequence[int]) -> list[str]:
    lines = []
    for row in list(dict.fromkeys(int(r) for r in named))[:NAMED]:
        held = held_relations(view, np.array([row], dtype=np.int64))
        lines.append(f"What the KB holds around {node_literal(str(view.graph.types[row]), view.fields[row])}:")
        lines += [f"  {line}" for line in held] or ["  no relations"]
    return lines


def empty_result_feedback(query: str, schema: KBSchema, view: KBView, named: Sequence[int] = ()) -> str | None:
    """Why the query found nothing, in the KB's terms, or None where the KB cannot say (its path
    reaches nodes all the way, so a condition removed them; or it names nothing the KB holds and
    the question names no node). `named`: the rows of the nodes the question names, described
    where the query is not one path from one named node, or its node is not in the KB."""
    path = query_path(query, schema)
    lines: list[str] = []
    named = [*(int(row) for name in query_names(query) for row in _named_rows(view, name, None)[:1]), *named]
    if path is not None:
        literal = f"({':' + path.start_label if path.start_label else ''} {{name: {cypher_literal(path.start_name)}}})"
        start = _named_rows(view, path.start_name, path.start_label)
        if len(start):
            return _path_feedback(view, start, literal, path.hops)
        lines.append(f"No node {literal} is in the KB.")
    lines += _around(view, named)
    return "\n".join(lines) if lines else None
