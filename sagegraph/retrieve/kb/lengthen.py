"""A query one relation short of its question, lengthened where the question says one more.

A small model's Cypher for a chain question often stops a relation early ('the nationality of X's
parent' run as X's parents, 'the occupation of X's parents' daughter' as the daughter): every
relation in it is stored, so it runs, and no grounding repair sees that it answers another
question. Here the query's path from the node it names to the node it returns, read as words (the
chain phrase DGR's and GraphRAFT's rankings read), is compared with the question (that name taken
out), and so is the same path one stored relation longer, for each relation the KB has at the
returned node's label. Where one longer path reads closer to the question than the query's own by
`margin`, the query returns that relation's far end instead; then the same test again, up to
`max_relations`. The candidates are the store's own patterns and the reading an encoder's, so
nothing here knows a KB; a query that is not one path from one named node is left as it is.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from sagegraph.retrieve.kb.chains import chain_phrase, masked_question
from sagegraph.retrieve.kb.grounding import KBSchema, Repair, _chains, _code, _Node, _return_along, _Rewrite
from sagegraph.store.readonly import Token, render, tokenize

# Unit vectors of texts, one row each: what reads a question against relation chains.
Reader = Callable[[list[str]], np.ndarray]


@dataclass(frozen=True)
class Hop:
    relation: str
    forward: bool  # walked along the stored direction
    end: str  # the label it reaches


@dataclass
class QueryPath:
    """A query that is one path from one named node to the node it returns."""

    tokens: list[Token]
    code: list[int]
    start_name: str
    start_label: str | None
    hops: list[Hop]
    returned: str  # the variable returned
    return_at: int  # code index of RETURN
    var_at: int  # code index of the returned variable


def query_path(query: str, schema: KBSchema) -> QueryPath | None:
    """The query's single path from its one named node to its `RETURN [DISTINCT] v.id`, hop by
    hop, or None where the query is anything else (branches, two named nodes, an untyped or
    undirected relationship, a label the schema cannot tell)."""
    try:
        tokens = tokenize(query)
    except Exception:
        return None
    code = _code(tokens)
    returns = [i for i in range(len(code)) if tokens[code[i]].word == "RETURN"]
    if len(returns) != 1:
        return None
    at = returns[0]
    k = at + 1 + int(at + 1 < len(code) and tokens[code[at + 1]].word == "DISTINCT")
    if (
        k + 2 >= len(code)
        or tokens[code[k]].kind not in ("name", "quoted")
        or tokens[code[k + 1]].text != "."
        or tokens[code[k + 2]].value.lower() != "id"
    ):
        return None
    returned = tokens[code[k]].value
    nodes, chains = _chains(tokens, code)

    def key(n: _Node) -> str:
        return n.var if n.var else f"#{n.start}"

    labels: dict[str, str] = {}
    for n in nodes:
        if n.label:
            labels.setdefault(key(n), n.label)
    named = {key(n): n.name for n in nodes if n.name}
    if len(named) != 1 or returned not in {key(n) for n in nodes}:
        return None
    ((start, start_name),) = named.items()
    steps: dict[str, list[tuple[str, str, bool]]] = {}  # node -> (other node, relation, walked forward)
    for a, r, b in chains:
        if r.rtype is None or (r.left_arrow is None) == (r.right_arrow is None):
            return None
        forward = r.right_arrow is not None
        steps.setdefault(key(a), []).append((key(b), r.rtype, forward))
        steps.setdefault(key(b), []).append((key(a), r.rtype, not forward))
    if start == returned or len(steps.get(start, [])) != 1 or len(steps.get(returned, [])) != 1:
        return None
    if _conditioned(tokens, code, at, returned, nodes):
        return None  # a condition on the returned node says the query means that node
    hops: list[Hop] = []
    previous, here = None, start
    while here != returned:
        onward = [s for s in steps[here] if s[0] != previous]
        if len(onward) != 1 or len(steps[here]) > 2:
            return None
        nxt, relation, forward = onward[0]
        end = labels.get(nxt) or _only_end(schema, labels.get(here), relation, forward)
        if end is None:
            return None
        hops.append(Hop(relation, forward, end))
        labels.setdefault(nxt, end)
        previous, here = here, nxt
    if len(hops) != len(chains):  # a relationship off the path: a condition this does not read
        return None
    return QueryPath(tokens, code, start_name, labels.get(start), hops, returned, at, k)


def _conditioned(tokens: list[Token], code: list[int], at: int, var: str, nodes: list[_Node]) -> bool:
    """Whether the query constrains `var` itself: a property map on its pattern or `var.key`
    anywhere before the RETURN."""
    if any(n.var == var and n.has_property_map(tokens, code) for n in nodes):
        return True
    return any(
        tokens[code[i]].kind in ("name", "quoted") and tokens[code[i]].value == var and tokens[code[i + 1]].text == "."
        for i in range(at - 1)
    )


def _only_end(schema: KBSchema, label: str | None, relation: str, forward: bool) -> str | None:
    ends = {
        (b if forward else a)
        for a, r, b in schema.patterns
        if r == relation and (label is None or (a if forward else b) == label)
    }
    return ends.pop() if len(ends) == 1 else None


def next_hops(schema: KBSchema, last: Hop) -> list[Hop]:
    """Every stored relation leaving the label `last` reaches, walked its stored way, but `last`
    walked straight back. Only the stored way: a relation's name reads from the node it leaves
    (X -[:parents]-> Y: Y is X's parent), and a phrase reads a relation walked back as the same
    words, which then name the wrong end ("the neighbouring countries of X" read on along
    `country` back to the countries' cities)."""
    options = {Hop(r, True, b) for a, r, b in schema.patterns if a == last.end}
    back = [h for h in options if h.relation == last.relation and h.forward != last.forward]
    return sorted(options - set(back), key=lambda h: (h.relation, h.end))


def _asked(question: str, path: QueryPath) -> str:
    """The question without the start's name, nor its label's words where it says them ('the
    city of X'): they say which node the path starts from, not a relation it walks. Kept where
    the path already ends at that label ('the neighbouring countries of X'): there the words may
    name the answer, which the path's own reading already has."""
    asked = masked_question(question, [path.start_name])
    if path.start_label and path.start_label != path.hops[-1].end:
        words = re.sub(r"(?<=[a-z])(?=[A-Z])|_", " ", path.start_label).lower().split()
        asked = re.sub(r"\b" + r"\s+".join(map(re.escape, words)) + r"s?\b", " ", asked, flags=re.IGNORECASE)
    return asked


def _phrase(hops: list[Hop]) -> str:
    return chain_phrase([(h.relation, h.end) for h in hops])


def lengthened(
    query: str,
    schema: KBSchema,
    question: str,
    read: Reader,
    margin: float,
    max_relations: int = 3,
) -> tuple[str, list[Repair]]:
    """The query, lengthened one stored relation at a time while a longer path reads closer to
    the question by `margin`; with a repair per relation added (none: the query as it was)."""
    repairs: list[Repair] = []
    while True:
        path = query_path(query, schema)
        if path is None or len(path.hops) >= max_relations:
            break
        options = next_hops(schema, path.hops[-1])
        if not options:
            break
        phrases = [_phrase(path.hops)] + [_phrase([*path.hops, o]) for o in options]
        vectors = read([_asked(question, path), *phrases])
        reads = vectors[1:] @ vectors[0]
        best = int(np.argmax(reads[1:]))
        if reads[1 + best] - reads[0] < margin:
            break
        option = options[best]
        query = _returning_along(path, option, f"lengthened_{len(path.hops) + 1}")
        direction = "->" if option.forward else "<-"
        repairs.append(
            Repair(
                "return_lengthened",
                f"{path.returned} on along {direction}[:{option.relation}] to :{option.end} "
                f"(reads {reads[1 + best]:.3f} against {reads[0]:.3f})",
            )
        )
    return query, repairs


def _returning_along(path: QueryPath, hop: Hop, new: str) -> str:
    rw = _Rewrite(path.tokens)
    forward, backward = ([hop.relation], []) if hop.forward else ([], [hop.relation])
    _return_along(rw, path.return_at, path.var_at, path.returned, hop.end, forward, backward, new)
    return render(rw.out)
