"""Grounding a model-written Cypher query in the KB it runs on: deterministic repairs between the
model and the store, each one named, so a trace shows what the model wrote and what ran.

A 1.5B model on a KB it has never seen reverses stored directions, invents relationship types and
puts a name on the wrong label (issue: real KBs). These repairs read only the store's own schema
(its `(label)-[type]->(label)` patterns) and the names of its nodes; nothing here knows a KB.

langchain-neo4j's `CypherQueryCorrector` (the Cypher direction competition's winner) does the
direction part, but importing it pulls langchain-classic, langchain-core, langgraph and
neo4j-graphrag, it reads raw text with regular expressions (the failure the read-only guard had),
and it blanks a query it cannot validate instead of repairing it. This works on the guard's
tokens (`sagegraph.store.readonly.tokenize`), so strings and comments cannot mislead it.
"""

from __future__ import annotations

import difflib
import functools
import re
from collections import Counter
from collections.abc import Callable, Collection, Iterable
from dataclasses import dataclass, field

from sagegraph.errors import ReadOnlyViolation
from sagegraph.model import safe_label
from sagegraph.retrieve.kb.view import NAME_FIELDS, KBView, normalise
from sagegraph.store.readonly import Token, render, tokenize

GROUND_KINDS = (
    "quote_escaped",
    "name_respelled",
    "name_dropped",
    "year_bounds",
    "direction",
    "type_mapped",
    "type_relaxed",
    "label_moved",
    "node_split",
    "name_key",
    "property_mapped",
    "return_id",
    "return_rebound",
    "return_extended",
    "return_retargeted",
    "return_path_end",
    "return_to_target",
    "return_lengthened",
    "direction_relaxed",
    "text_relaxed",
)
# One relationship type among several that join two labels, as the question reads them (SPARK
# ranks them by the graph encoder); without one, the extension takes any relationship.
RelationChooser = Callable[[list[str]], str]


@dataclass(frozen=True)
class Repair:
    kind: str  # one of GROUND_KINDS
    detail: str


def ground_counters() -> dict[str, int]:
    """Every repair kind at zero, so a run's averages say 0 for a kind that never fired."""
    return {"grounded": 0, **{f"ground_{kind}": 0 for kind in GROUND_KINDS}}


def count_repairs(repairs: list[Repair], counters: dict[str, int]) -> list[str]:
    """One place that turns repairs into the per-question counters and the trace's lines, so
    SPARK and AF report the same names for the same repairs."""
    if repairs:
        counters["grounded"] = 1
        for rep in repairs:
            counters[f"ground_{rep.kind}"] = counters.get(f"ground_{rep.kind}", 0) + 1
    return [f"{rep.kind}: {rep.detail}" for rep in repairs]


@dataclass
class KBSchema:
    """What the repairs may rely on: the stored patterns, and which labels hold a name."""

    patterns: set[tuple[str, str, str]]
    labels_of_name: Callable[[str], set[str]] = lambda name: set()
    spellings: Callable[[str], set[str]] = lambda name: set()  # the stored names a name normalises to
    properties: Callable[[str], Collection[str]] = lambda label: set()  # a label's property keys; empty: not known
    relationship_types: set[str] = field(init=False)
    labels: set[str] = field(init=False)

    def __post_init__(self) -> None:
        self.relationship_types = {r for _, r, _ in self.patterns}
        self.labels = {a for a, _, _ in self.patterns} | {b for _, _, b in self.patterns}

    def connects(self, a: str | None, r: str | None, b: str | None) -> bool:
        return any((a is None or a == x) and r == y and (b is None or b == z) for x, y, z in self.patterns)


def view_schema(view: KBView, patterns: Iterable[tuple[str, str, str]] | None = None) -> KBSchema:
    """The KB's patterns (the store's introspected ones where given, else the in-memory graph's)
    and, for a name, the labels of the nodes whose normalised name or alias it is. Labels and
    relationship types as the store has them (`safe_label`: a KB's `gene/protein` is the label
    `gene_protein`), since the repairs write them into Cypher."""
    types = view.graph.types
    type_of_label = {safe_label(t): t for t in view.graph.node_types()}

    def labels_of_name(name: str) -> set[str]:
        rows = view.name_index.get(normalise(name))
        return {safe_label(str(types[r])) for r in rows} if rows is not None else set()

    def spellings(name: str) -> set[str]:
        rows = view.name_index.get(normalise(name))
        return {view.names[r] for r in rows} if rows is not None else set()

    @functools.cache  # asked per node and name of every query; a label's keys come from a scan of its nodes
    def properties(label: str) -> frozenset[str]:
        return frozenset(view.properties(type_of_label.get(label, label)))

    stored = (
        set(patterns)
        if patterns is not None
        else {(safe_label(h), safe_label(r), safe_label(t)) for h, r, t, _ in view.patterns}
    )
    return KBSchema(stored, labels_of_name, spellings, properties)


@dataclass
class _Node:
    start: int  # index of `(` in the code list
    end: int  # index of `)`
    var: str | None
    label_at: int | None  # code index of the (first) label token
    label: str | None
    name: str | None  # a literal {name: '...'} or {title: '...'}

    def has_property_map(self, tokens: list[Token], code: list[int]) -> bool:
        """Whether the pattern carries a property map (`{year: 1999}`): the query constrains the node."""
        return any(tokens[code[x]].text == "{" for x in range(self.start + 1, self.end))


@dataclass
class _Rel:
    start: int  # index of `[`
    end: int  # index of `]`
    left_arrow: int | None  # code index of `<` before `-[`
    right_arrow: int | None  # code index of `>` after `]-`
    type_at: int | None
    rtype: str | None


def _code(tokens: list[Token]) -> list[int]:
    return [i for i, t in enumerate(tokens) if t.kind != "ws"]


@dataclass
class _Rewrite:
    """One query being repaired: its tokens as parsed, the positions of its code tokens in them
    (`code`: no whitespace), the tokens as rewritten so far (`out`) and the repairs made. Each
    repair step reads `tokens` and writes `out`, so a later step still sees the query the model
    wrote, and the result is rendered once at the end."""

    tokens: list[Token]
    repairs: list[Repair] = field(default_factory=list)
    code: list[int] = field(init=False)
    out: list[Token] = field(init=False)

    def __post_init__(self) -> None:
        self.code = _code(self.tokens)
        self.out = list(self.tokens)

    def result(self, query: str) -> tuple[str, list[Repair]]:
        """The rewritten query and its repairs, or the query as it was where nothing was repaired."""
        return (render(self.out), self.repairs) if self.repairs else (query, [])


def _node_at(tokens: list[Token], code: list[int], k: int) -> _Node | None:
    """A node pattern `(var:Label {name: '...'})` opening at code[k], or None."""
    if tokens[code[k]].text != "(":
        return None
    j, depth = k + 1, 1
    while j < len(code) and depth:
        t = tokens[code[j]].text
        depth += (t == "(") - (t == ")")
        j += 1
    end = j - 1
    inner = [tokens[code[x]] for x in range(k + 1, end)]
    if any(t.kind == "name" and t.word in ("MATCH", "WHERE", "RETURN", "WITH") for t in inner):
        return None  # a subexpression, not a node pattern
    var = label = name = None
    label_at = None
    x = k + 1
    if x < end and tokens[code[x]].kind in ("name", "quoted") and tokens[code[x]].text != ":":
        var = tokens[code[x]].value
        x += 1
    if x + 1 < end and tokens[code[x]].text == ":" and tokens[code[x + 1]].kind in ("name", "quoted"):
        label, label_at = tokens[code[x + 1]].value, x + 1
    for y in range(k + 1, end - 2):
        a, b, c = tokens[code[y]], tokens[code[y + 1]], tokens[code[y + 2]]
        if a.kind == "name" and a.value.lower() in NAME_FIELDS and b.text == ":" and c.kind == "string":
            name = c.value
    if (
        var is None
        and label is None
        and end - k > 1
        and tokens[code[k + 1]].text != ":"
        and tokens[code[k + 1]].text != "{"
    ):
        return None  # `(x + 1)`, `(count(...))`: an expression
    return _Node(k, end, var, label_at, label, name)


def _rel_after(tokens: list[Token], code: list[int], k: int) -> tuple[_Rel, int] | None:
    """A relationship `<-[r:TYPE]->` starting right after a node's `)` at code[k]; returns it and
    the code index where the next node opens."""
    x = k + 1
    left = None
    if x < len(code) and tokens[code[x]].text == "<":
        left, x = x, x + 1
    if x + 1 >= len(code) or tokens[code[x]].text != "-" or tokens[code[x + 1]].text != "[":
        return None
    start = x + 1
    end = start
    while end < len(code) and tokens[code[end]].text != "]":
        end += 1
    if end + 1 >= len(code) or tokens[code[end + 1]].text != "-":
        return None
    y = end + 2
    right = None
    if y < len(code) and tokens[code[y]].text == ">":
        right, y = y, y + 1
    rtype = type_at = None
    inner = list(range(start + 1, end))
    for z in inner:
        if tokens[code[z]].text == ":" and z + 1 < end and tokens[code[z + 1]].kind in ("name", "quoted"):
            if not any(tokens[code[w]].text in ("|", "*") for w in inner):
                rtype, type_at = tokens[code[z + 1]].value, z + 1
            break
    return _Rel(start, end, left, right, type_at, rtype), y


def _chains(tokens: list[Token], code: list[int]) -> tuple[list[_Node], list[tuple[_Node, _Rel, _Node]]]:
    """Every node pattern, and every (node, relationship, node) step of the query's paths."""
    nodes: list[_Node] = []
    chains: list[tuple[_Node, _Rel, _Node]] = []
    k = 0
    while k < len(code):
        node = _node_at(tokens, code, k)
        if node is None:
            k += 1
            continue
        nodes.append(node)
        while (rel := _rel_after(tokens, code, node.end)) is not None:
            r, nxt = rel
            other = _node_at(tokens, code, nxt) if nxt < len(code) else None
            if other is None:
                break
            chains.append((node, r, other))
            nodes.append(other)
            node = other
        k = node.end + 1
    return nodes, chains


def undirected(query: str) -> tuple[str, list[Repair]]:
    """The query with every directed relationship made undirected, for a second run when the
    grounded query found nothing: where both ends have one label (a person's parents, children
    or spouse) the schema cannot say which way the model meant, and a KB may store a symmetric
    relation once. The labels still constrain both ends."""
    try:
        tokens = tokenize(query)
    except Exception:
        return query, []
    rw = _Rewrite(tokens)
    code, out, repairs = rw.code, rw.out, rw.repairs
    for _, r, _ in _chains(tokens, code)[1]:
        if (r.left_arrow is None) == (r.right_arrow is None):
            continue
        arrow = r.left_arrow if r.left_arrow is not None else r.right_arrow
        assert arrow is not None  # exactly one of the two is set here
        out[code[arrow]] = Token("ws", "", "")
        repairs.append(Repair("direction_relaxed", f"[:{r.rtype or ''}] either way (the directed query found nothing)"))
    return rw.result(query)


_APOSTROPHE = re.compile(r"(?<=[A-Za-z])'(?=[A-Za-z])")


def _tokens_escaping_apostrophes(query: str) -> tuple[list[Token], list[Repair]]:
    """The query's tokens; where it does not tokenise, with every apostrophe between two letters
    escaped first ('Emma O'Neill' ends its string at the O for the engine; a string's own quotes
    meet a space, a bracket or punctuation, never a letter on both sides). Raises as `tokenize`
    does when that does not help."""
    try:
        return tokenize(query), []
    except Exception:
        fixed = _APOSTROPHE.sub(lambda m: "\\'", query)
        if fixed == query:
            raise
        return tokenize(fixed), [
            Repair("quote_escaped", f"{len(_APOSTROPHE.findall(query))} apostrophe(s) inside a name escaped")
        ]


def _mentioned(name: str, question: str, linked: Collection[str]) -> bool:
    n = normalise(name)
    return bool(n) and (f" {n} " in f" {normalise(question)} " or n in {normalise(x) for x in linked})


def _drop_unmentioned_names(
    rw: _Rewrite,
    nodes: list[_Node],
    question: str,
    linked: Collection[str],
    schema: KBSchema,
) -> None:
    """A name the question does not mention (nor names through a linked KB node), in a query that
    also holds one it does: a value copied from the schema card's examples (`WHERE s.name =
    'Highgate Studios'` for "the studio that produced X"), so the condition is dropped and the node
    is left to the relationships. So is an unmentioned name no node of the KB holds in a query with
    text conditions ('Ethan Hunt' for "which film brings together a refugee, a garden and a
    spy"), which could only find nothing; the text then decides. Otherwise a query whose every name
    is unmentioned is left alone (without its name it would list a whole label)."""
    tokens, code, out, repairs = rw.tokens, rw.code, rw.out, rw.repairs
    places = []  # (first code index, last code index, name, replacement)
    for j in _name_literals(tokens, code):
        t, op = tokens[code[j]], tokens[code[j - 1]]
        if (
            op.text == "="
            and j >= 4
            and tokens[code[j - 3]].text == "."
            and tokens[code[j - 4]].kind in ("name", "quoted")
        ):
            places.append((j - 4, j, t.value, "true"))  # v.name = 'X'
        elif op.text == ":":
            places.append((j - 2, j, t.value, ""))  # {name: 'X'}
    kept = [p for p in places if _mentioned(p[2], question, linked)]
    worded = any(tokens[code[c]].word == "CONTAINS" for c in range(len(code)))
    for first, last, name, replacement in places:
        if _mentioned(name, question, linked) or not (kept or (worded and not schema.labels_of_name(name))):
            continue
        if replacement == "":  # a map entry: its comma too, and the braces when it was the only entry
            before, after = tokens[code[first - 1]].text, tokens[code[last + 1]].text if last + 1 < len(code) else ""
            if before == "{" and after == "}":
                first, last = first - 1, last + 1
            elif after == ",":
                last += 1
            elif before == ",":
                first -= 1
        for x in range(first, last + 1):
            out[code[x]] = Token("ws", "", "")
        if replacement:
            out[code[first]] = Token("name", replacement, replacement)
        for n in nodes:
            if n.name == name:
                n.name = None
        repairs.append(Repair("name_dropped", f"{name!r}: the question does not mention it"))


def _name_literals(tokens: list[Token], code: list[int]) -> list[int]:
    """Code indices of the string literals that pin a node by name (`{name: 'X'}`, `v.title = 'X'`)."""
    return [
        j
        for j in range(2, len(code))
        if tokens[code[j]].kind == "string"
        and tokens[code[j - 1]].text in (":", "=")
        and tokens[code[j - 2]].kind == "name"
        and tokens[code[j - 2]].value.lower() in NAME_FIELDS
    ]


def query_names(query: str) -> list[str]:
    """The names a query pins its nodes by (`{name: 'X'}`, `v.name = 'X'`), in order; none where
    it does not tokenize."""
    try:
        tokens = tokenize(query)
    except ReadOnlyViolation:
        return []
    code = _code(tokens)
    return [tokens[code[j]].value for j in _name_literals(tokens, code)]


def text_conditions(query: str) -> tuple[list[str], bool]:
    """The words of the query's `CONTAINS 'words'` conditions, and whether it pins a node by name."""
    try:
        tokens = tokenize(query)
    except Exception:
        return [], False
    code = _code(tokens)
    words = [
        tokens[code[c + 1]].value
        for c in range(len(code) - 1)
        if tokens[code[c]].word == "CONTAINS" and tokens[code[c + 1]].kind == "string"
    ]
    return words, bool(_name_literals(tokens, code))


def text_relaxed(query: str) -> tuple[str, list[Repair]]:
    """The query with every `expr CONTAINS 'words'` condition made `true`, for another run when it
    found nothing: the model's words for a theme (`'mechanical humanoid'`) are rarely the text's
    (`robot`), and the nodes the rest of the query finds (the films of a named director) are then
    ranked by how their text reads against the question. Only for a query that still pins a node
    by name; without one it would return a whole label."""
    try:
        tokens = tokenize(query)
    except Exception:
        return query, []
    rw = _Rewrite(tokens)
    code, out, repairs = rw.code, rw.out, rw.repairs
    if not _name_literals(tokens, code):
        return query, []
    for c in range(1, len(code) - 1):
        if tokens[code[c]].word != "CONTAINS" or tokens[code[c + 1]].kind != "string":
            continue
        s = c - 1
        if tokens[code[s]].text == ")":  # toLower(m.description)
            depth = 0
            while s >= 0:
                depth += (tokens[code[s]].text == ")") - (tokens[code[s]].text == "(")
                if depth == 0:
                    break
                s -= 1
            if s > 0 and tokens[code[s - 1]].kind == "name":
                s -= 1
        else:  # m.description
            while s >= 2 and tokens[code[s - 1]].text == "." and tokens[code[s - 2]].kind in ("name", "quoted"):
                s -= 2
        if s < 0:
            continue
        for x in range(s, c + 2):
            out[code[x]] = Token("ws", "", "")
        out[code[s]] = Token("name", "true", "true")
        repairs.append(
            Repair("text_relaxed", f"CONTAINS {tokens[code[c + 1]].text} -> true (the text condition matched nothing)")
        )
    return rw.result(query)


def ground_query(
    query: str,
    schema: KBSchema,
    target: str | None = None,
    return_ids: bool = True,
    question: str | None = None,
    linked: Collection[str] = (),
    choose: RelationChooser | None = None,
) -> tuple[str, list[Repair]]:
    """The query with its relationship directions, unknown relationship types and misplaced name
    labels repaired against `schema`, and, when it returns the named topic node itself while the
    plan's `target` is another label, extended from the topic to the target; with the repairs
    made. Given the `question` (and the KB names `linked` from it), names it does not mention are
    dropped from a query that keeps one it does; `choose` picks the relationship of an extension
    where several join two labels. A query that does not tokenise, even with its names'
    apostrophes escaped, is returned as it is (the read-only guard will refuse it with its reason)."""
    try:
        tokens, escaped = _tokens_escaping_apostrophes(query)
    except Exception:
        return query, []
    rw = _Rewrite(tokens, repairs=escaped)
    code, out, repairs = rw.code, rw.out, rw.repairs
    nodes, chains = _chains(tokens, code)
    if question is not None:
        _drop_unmentioned_names(rw, nodes, question, linked, schema)

    def put(code_index: int, text: str, kind: str = "name") -> None:
        out[code[code_index]] = Token(kind, text, text)

    # a name written as people write it ('Augustus Keppel', 'Zoe Saldana') where the KB spells it
    # otherwise ('augustus keppel', 'Zoë Saldaña'): the one stored spelling, so `=` matches
    respelled: dict[str, str] = {}
    for j in _name_literals(tokens, code):
        t = tokens[code[j]]
        stored = schema.spellings(t.value)
        if len(stored) == 1 and t.value not in stored:
            new = next(iter(stored))
            out[code[j]] = Token("string", "'" + new.replace("\\", "\\\\").replace("'", "\\'") + "'", new)
            repairs.append(Repair("name_respelled", f"{t.value!r} -> {new!r}"))
            respelled[t.value] = new
    for n in nodes:
        n.name = respelled.get(n.name or "", n.name)

    if question is not None:
        _year_bounds(rw, question)

    # a literal name on a label that holds no node of that name: the label that does, or, where the
    # node's relationships cannot reach that label, two nodes (see `_split_node`)
    labels = {n.var: n.label for n in nodes if n.var and n.label}
    for n in nodes:
        if n.name and n.label and n.label_at is not None:  # a label the KB has not got (`Director`) too
            holders = schema.labels_of_name(n.name)
            if holders and n.label not in holders and len(holders) == 1:
                new = next(iter(holders))
                if _split_node(rw, n, new, chains, labels, schema, choose):
                    continue
                put(n.label_at, new)
                repairs.append(Repair("label_moved", f"{n.name!r}: :{n.label} -> :{new}"))
                n.label = new
    labels = {n.var: n.label for n in nodes if n.var and n.label}
    _name_keys(rw, nodes, labels, schema)
    _property_keys(rw, nodes, labels, schema)
    for a, r, b in chains:
        la, lb = a.label or labels.get(a.var or ""), b.label or labels.get(b.var or "")
        if r.rtype is not None and r.rtype not in schema.relationship_types:
            assert r.type_at is not None  # a typed relationship knows where its type is
            # the one type that joins the two labels, else a type spelled much like the model's
            # (has_language -> in_language); a guess between several types is worse than all of them
            near = sorted(
                {y for x, y, z in schema.patterns if schema.connects(la, y, lb) or schema.connects(lb, y, la)}
            )
            close = (
                near
                if len(near) == 1 and la and lb
                else difflib.get_close_matches(r.rtype, near or sorted(schema.relationship_types), n=1, cutoff=0.8)
            )
            if close:
                put(r.type_at, close[0])
                repairs.append(Repair("type_mapped", f"[:{r.rtype}] -> [:{close[0]}]"))
                r.rtype = close[0]
            else:  # no close type: any relationship between the two ends
                put(r.type_at - 1, "", "ws")
                put(r.type_at, "", "ws")
                repairs.append(Repair("type_relaxed", f"[:{r.rtype}] -> [] (no such relationship type)"))
                r.rtype = None
        if r.rtype is None or (r.left_arrow is None) == (r.right_arrow is None):
            continue  # untyped or undirected: nothing to turn
        src, dst = (la, lb) if r.right_arrow is not None else (lb, la)
        if schema.connects(src, r.rtype, dst) or not schema.connects(dst, r.rtype, src):
            continue
        if r.right_arrow is not None:
            put(r.right_arrow, "", "ws")
            out[code[r.start - 1]] = Token("sym", "<-", "<-")
        else:
            assert r.left_arrow is not None  # directed: one arrow, and it is not the right one
            put(r.left_arrow, "", "ws")
            out[code[r.end + 1]] = Token("sym", "->", "->")
        repairs.append(
            Repair("direction", f"({src or ''})-[:{r.rtype}]->({dst or ''}) turned: the KB stores it the other way")
        )
    _ground_return(rw, nodes, chains, labels, schema, target if target in schema.labels else None, return_ids, choose)
    return rw.result(query)


ANSWER_VAR = "grounded_answer"
NAMED_VAR = "grounded_named"
_YEAR_LITERAL = re.compile(r"(\d{4})(?:-01-01|-12-31)?")
_YEAR_BOUND = {">": "-12-31", "<=": "-12-31", "<": "-01-01", ">=": "-01-01"}


def _year_bounds(rw: _Rewrite, question: str) -> None:
    """A date compared with a year the question gives as a year ("came out after 2003"), written as
    that year's first day or the bare year (`release_date > '2003-01-01'`, `> '2003'`): the bound
    the comparison means for the whole year, so "after 2003" leaves out the films of 2003 (`>` and
    `<=` compare with its last day, `<` and `>=` with its first). Only where the question holds no
    other number, a day or a month count, that would make the year part of a date."""
    tokens, code, out, repairs = rw.tokens, rw.code, rw.out, rw.repairs
    numbers = re.findall(r"\d+", question)
    for c in range(1, len(code)):
        t, op = tokens[code[c]], tokens[code[c - 1]].text
        if op == "=" and c >= 2 and tokens[code[c - 2]].text in ("<", ">"):  # the tokens spell `<=` as `<`, `=`
            op = tokens[code[c - 2]].text + op
        m = _YEAR_LITERAL.fullmatch(t.value) if t.kind == "string" else None
        if m is None or op not in _YEAR_BOUND or numbers != [m.group(1)]:
            continue
        bound = m.group(1) + _YEAR_BOUND[op]
        if bound != t.value:
            out[code[c]] = Token("string", f"'{bound}'", bound)
            repairs.append(Repair("year_bounds", f"{op} {t.text} -> {op} '{bound}' (the question gives a year)"))


def _split_node(
    rw: _Rewrite,
    n: _Node,
    named_label: str,
    chains: list[tuple[_Node, _Rel, _Node]],
    labels: dict[str, str],
    schema: KBSchema,
    choose: RelationChooser | None,
) -> bool:
    """`(d:Director {name: 'Restless Season', year: 2015})-[:DIRECTED]->(m:Movie)` for "the actors who
    worked with the director of Restless Season": the model wrote one node for two, the named one
    and its neighbour the question goes through, labelled as the neighbour and named as the
    other. Where the name's label cannot have the node's relationships but another label can (the
    written one, the only one, or the one spelled closest), the node becomes that label's, unnamed,
    and the named node joins it at the path's end along the relationship the model wrote where it
    joins the two labels (the node's role: who directed), else the one `choose` reads closest to
    the question: `(grounded_named:Movie {name: 'Restless Season', year:
    2015})<-[:DIRECTED]-(d:Person)-[:DIRECTED]->(m:Movie)`.
    The named node keeps the properties its label has. False (nothing done) where the name's
    label fits, no other label does, or the node is inside a path."""
    tokens, code, out, repairs = rw.tokens, rw.code, rw.out, rw.repairs
    own = [(a, r, b) for a, r, b in chains if (a is n or b is n) and r.rtype in schema.relationship_types]

    def far(a: _Node, b: _Node) -> str | None:
        o = b if a is n else a
        lab = o.label or labels.get(o.var or "")
        return lab if lab in schema.labels else None

    def fits(label: str) -> bool:
        return all(
            schema.connects(label, r.rtype, far(a, b)) or schema.connects(far(a, b), r.rtype, label) for a, r, b in own
        )

    if not own or n.label is None or n.label_at is None or fits(named_label):
        return False
    roles = [lab for lab in sorted(schema.labels) if lab != named_label and fits(lab)]
    role = (
        n.label
        if n.label in roles
        else roles[0]
        if len(roles) == 1
        else next(iter(difflib.get_close_matches(n.label, roles, n=1, cutoff=0.6)), None)
    )
    path = next((p for p in _paths(chains) if p[0] is n or p[-1] is n), None)
    joining = sorted({r for a, r, b in schema.patterns if (a, b) in ((role, named_label), (named_label, role))})
    if role is None or path is None or not joining:
        return False
    braces = _map_braces(tokens, code, n)
    kept, dropped = _named_properties(rw, n, schema.properties(named_label))
    if braces is None or not any(key.lower() in _OTHER_NAME_KEY for key, _ in kept):
        return False  # a map this cannot read whole: the named node would lose its name
    written = [r.rtype for _, r, _ in own if r.rtype in joining]
    along = written[:1] or ([choose(joining)] if len(joining) > 1 and choose is not None else joining)
    for i in range(code[n.label_at] + 1, code[braces[1]] + 1):
        out[i] = Token("ws", "", "")  # the map and the space before it
    out[code[n.label_at]] = Token("name", role, role)
    split_before = sum(r.kind == "node_split" for r in repairs)  # a second split's node needs a name of its own
    props = ", ".join(f"{key}: {value}" for key, value in kept)
    named = f"({NAMED_VAR}{split_before + 1 if split_before else ''}:{named_label} {{{props}}})"
    first = path[0] is n
    if len(along) != 1:
        hop = "--"
    elif first:
        hop = f"-[:{along[0]}]->" if (named_label, along[0], role) in schema.patterns else f"<-[:{along[0]}]-"
    else:
        hop = f"-[:{along[0]}]->" if (role, along[0], named_label) in schema.patterns else f"<-[:{along[0]}]-"
    if first:
        out[code[n.start]] = Token("sym", f"{named}{hop}(", "(")
    else:
        out[code[n.end]] = Token("sym", f"){hop}{named}", ")")
    repairs.append(
        Repair(
            "node_split",
            f"{n.name!r} (a :{named_label}) on the model's :{n.label} node split off: :{role} "
            f"joined to it along {along[0] if len(along) == 1 else 'any relationship'}"
            + (f", {', '.join(dropped)} dropped (no :{named_label} has it)" if dropped else ""),
        )
    )
    labels.update({n.var: role} if n.var else {})
    n.label, n.name = role, None
    return True


_OTHER_NAME_KEY = dict(zip(NAME_FIELDS, reversed(NAME_FIELDS)))  # the key a node is named by, the other way


def _name_key(key: str, known: Collection[str]) -> str:
    """The key that names a node of a label with properties `known`: `title` for `name` where the
    label's nodes have a title and no name (a film), and the other way round."""
    other = _OTHER_NAME_KEY.get(key.lower())
    return other if other and known and key not in known and other in known else key


def _name_keys(
    rw: _Rewrite,
    nodes: list[_Node],
    labels: dict[str, str],
    schema: KBSchema,
) -> None:
    """`{name: 'Restless Season'}` on a label whose nodes have a title and no name finds nothing:
    the key its nodes are named by. Reads the labels as moved; a map the split emptied is skipped."""
    tokens, code, out, repairs = rw.tokens, rw.code, rw.out, rw.repairs
    for j in _name_literals(tokens, code):
        if out[code[j]].kind == "ws":
            continue
        if tokens[code[j - 1]].text == ":":
            node = next((n for n in nodes if n.start < j < n.end), None)
            label = (node.label or labels.get(node.var or "")) if node is not None else None
        else:
            label = labels.get(tokens[code[j - 4]].value) if j >= 4 and tokens[code[j - 3]].text == "." else None
        key = tokens[code[j - 2]].value
        new = _name_key(key, schema.properties(label)) if label in schema.labels else key
        if new != key:
            out[code[j - 2]] = Token("name", new, new)
            repairs.append(Repair("name_key", f"{key} -> {new} (a :{label} is named by its {new})"))


def _property_key(key: str, known: Collection[str]) -> str | None:
    """The label's own key for a key its nodes lack, where exactly one of them is a word of it
    (`birth_year` on a film, whose key is `year`: the model named the property after the node it
    had in mind); None where none or several are. A key the label has, or any key where the
    label's keys are not known, is itself."""
    if not known or key in known:
        return key
    words = {w.lower() for w in re.split(r"[_\W]+|(?<=[a-z])(?=[A-Z])", key) if w}
    hits = sorted(k for k in known if k.lower() in words)
    return hits[0] if len(hits) == 1 else None


def _map_braces(tokens: list[Token], code: list[int], n: _Node) -> tuple[int, int] | None:
    """The code indices of a node's `{` and `}`; None without a map or with a nested one."""
    braces = [x for x in range(n.start + 1, n.end) if tokens[code[x]].text in ("{", "}")]
    return (braces[0], braces[1]) if len(braces) == 2 else None


def _map_entries(tokens: list[Token], code: list[int], n: _Node) -> list[list[int]]:
    """The code indices of each `key: value` entry of a node's property map (none without one)."""
    braces = _map_braces(tokens, code, n)
    if braces is None:
        return []
    entries: list[list[int]] = [[]]
    for x in range(braces[0] + 1, braces[1]):
        if tokens[code[x]].text == ",":
            entries.append([])
        else:
            entries[-1].append(x)
    return [e for e in entries if len(e) >= 3 and tokens[code[e[1]]].text == ":"]


def _property_keys(
    rw: _Rewrite,
    nodes: list[_Node],
    labels: dict[str, str],
    schema: KBSchema,
) -> None:
    """A map key the node's label never has, one of whose words is a key it has, renamed to that key
    (`{title: 'X', birth_year: 1974}` on a film: `year`); one that matches nothing is left (the
    query then finds nothing and says so)."""
    tokens, code, out, repairs = rw.tokens, rw.code, rw.out, rw.repairs
    for n in nodes:
        label = n.label or labels.get(n.var or "")
        if label not in schema.labels:
            continue
        known = schema.properties(label)
        for e in _map_entries(tokens, code, n):
            key = tokens[code[e[0]]].value
            if out[code[e[0]]].kind == "ws" or key.lower() in _OTHER_NAME_KEY:
                continue
            new = _property_key(key, known)
            if new is not None and new != key:
                out[code[e[0]]] = Token("name", new, new)
                repairs.append(Repair("property_mapped", f"{key} -> {new} (a :{label} has {new}, not {key})"))


def _named_properties(rw: _Rewrite, n: _Node, known: Collection[str]) -> tuple[list[tuple[str, str]], list[str]]:
    """The `(key, value)` entries of a node's property map as written (names as respelled), split
    into those a node of the named label can have, under its keys (all, where its keys are not
    known; names always), and the keys of the others."""
    tokens, code, out = rw.tokens, rw.code, rw.out
    kept, dropped = [], []
    for e in _map_entries(tokens, code, n):
        key = tokens[code[e[0]]].value
        new = _name_key(key, known) if key.lower() in _OTHER_NAME_KEY else _property_key(key, known)
        if new is not None:
            kept.append((new, "".join(out[code[x]].text for x in e[2:])))
        else:
            dropped.append(key)
    return kept, dropped


def _ground_return(
    rw: _Rewrite,
    nodes: list[_Node],
    chains: list[tuple[_Node, _Rel, _Node]],
    labels: dict[str, str],
    schema: KBSchema,
    target: str | None,
    return_ids: bool = True,
    choose: RelationChooser | None = None,
) -> None:
    """The single `RETURN [DISTINCT] v.prop` of a query, made to return what the plan asks for:

    - (`return_ids`) a node's name or title where its id is asked for: the id (a name matches no
      answer id, and two nodes may share it);
    - a property that is really a relationship of v's label (`RETURN d.gender` where the KB stores
      `(:Person)-[:gender]->(:Gender)`): followed to that relationship's other end;
    - the named topic returned by a query with no relationship, while the plan's target is another
      label (`MATCH (n:Film {name: 'X'}) RETURN n.id` for "when was X released"): extended along
      the relationship joining the two labels (the one stored either way, else any);
    - with relationships, v of another label than the target while exactly one variable of the
      query has the target label and the query gives it no name
      (`(h:Person)-[:cause_of_death]->(c:CauseOfDeath) RETURN h.id`
      for "what did X's husband die of"): that variable returned instead;
    - otherwise, v inside a path that goes on past it to nodes nothing constrains (`(p {name:
    'X'})-[:parents]->(pp)-[:nationality]->(c)
      RETURN pp.id` for "the nationality of X's parent"): the path's far end returned. An
      unconstrained tail only asks that pp have some nationality, which no question means; the
      model wrote the last hop and returned the node before it (3-hop questions, most often); and
      where the node it returned was one the question names and that end is not of the plan's
      target label while a relationship joins the two, one hop more to the target
      (`(p {name: 'X'})-[:DIRECTED]->(m:Movie) RETURN p.id` for "the actors of films directed by
      X"), along a relationship other than the one that reached the end where there is one
      (`choose` picks among several)."""
    tokens, code, out, repairs = rw.tokens, rw.code, rw.out, rw.repairs
    returns = [k for k in range(len(code)) if tokens[code[k]].word == "RETURN"]
    if len(returns) != 1:
        return
    k = returns[0] + 1
    if k < len(code) and tokens[code[k]].word == "DISTINCT":
        k += 1
    if k + 2 >= len(code) or tokens[code[k + 1]].text != "." or tokens[code[k]].kind not in ("name", "quoted"):
        return
    var, prop = tokens[code[k]].value, tokens[code[k + 2]].value
    bound = {n.var for n in nodes if n.var}
    if var not in bound and len(bound) == 1:
        # RETURN of a variable no pattern binds while the query binds only one: what the model
        # wrote it about (`MATCH (p:Person {name: 'X'}) RETURN y.name`), so the rules below take
        # it from there (to the plan's target where that is another label)
        (only,) = bound
        out[code[k]] = Token("name", only, only)
        rw.repairs.append(Repair("return_rebound", f"RETURN {var} (bound nowhere) -> {only}, the query's one node"))
        var = only
    label = labels.get(var)
    itself = prop.lower() in ("id", *NAME_FIELDS)  # the node, by its id or its name
    if return_ids and prop.lower() in NAME_FIELDS:
        out[code[k + 2]] = Token("name", "id", "id")
        repairs.append(Repair("return_id", f"RETURN {var}.{prop} -> {var}.id"))
    if label is None:
        return
    if not itself:
        joined = {(a, r, b) for a, r, b in schema.patterns if label in (a, b)}
        kinds = sorted({r for _, r, _ in joined})
        close = [r for r in kinds if r.lower() == prop.lower()] or difflib.get_close_matches(
            prop, kinds, n=1, cutoff=0.8
        )
        ends = {(b if a == label else a) for a, r, b in joined if close and r == close[0]}
        if len(ends) != 1:
            return
        end = ends.pop()
        forward = sorted({r for a, r, b in joined if r == close[0] and a == label and b == end})
        backward = [] if forward else sorted({r for a, r, b in joined if r == close[0] and a == end and b == label})
        _return_along(rw, returns[0], k, var, end, forward, backward)
        out[code[k + 2]] = Token("name", "id", "id")
        repairs.append(
            Repair("return_extended", f"RETURN of {var}.{prop} (:{label}) followed along {close[0]} to :{end}")
        )
        return
    if chains:
        if target is not None and label != target:
            # never to a variable the query names: the question gives that node, it does not ask for it
            # (a plan whose target is the named entity's label is more often wrong than its RETURN)
            named = {n.var for n in nodes if n.var and n.name}
            others = {v for v, lab in labels.items() if lab == target}
            if len(others) == 1 and not others & named:
                other = others.pop()
                out[code[k]] = Token("name", other, other)
                repairs.append(
                    Repair("return_retargeted", f"RETURN {var} (:{label}) -> {other} (:{target}), the plan's target")
                )
                return
        _return_path_end(rw, chains, var, k, returns[0], labels, schema, target, choose)
        return
    if target is None or label == target:
        return
    if not any(n.var == var and n.name for n in nodes):
        return
    forward = sorted({r for a, r, b in schema.patterns if a == label and b == target})
    backward = sorted({r for a, r, b in schema.patterns if a == target and b == label})
    if not forward and not backward:
        return
    along = _return_along(rw, returns[0], k, var, target, forward, backward)
    repairs.append(
        Repair("return_extended", f"RETURN of the topic {var} (:{label}) extended to :{target} along {along}")
    )


def _paths(chains: list[tuple[_Node, _Rel, _Node]]) -> list[list[_Node]]:
    """The query's paths as node sequences (`_chains` links one path's steps by shared nodes)."""
    paths: list[list[_Node]] = []
    for a, _, b in chains:
        if paths and paths[-1][-1] is a:
            paths[-1].append(b)
        else:
            paths.append([a, b])
    return paths


def _return_path_end(
    rw: _Rewrite,
    chains: list[tuple[_Node, _Rel, _Node]],
    var: str,
    k: int,
    at: int | None = None,
    labels: dict[str, str] | None = None,
    schema: KBSchema | None = None,
    target: str | None = None,
    choose: RelationChooser | None = None,
) -> None:
    """RETURN var -> the far end of the one unconstrained tail of var's path, then on to the plan's
    target label when the end is of another (see `_ground_return`). Reads `out`: a condition
    dropped already constrains nothing."""
    code, out, repairs = rw.code, rw.out, rw.repairs
    count = Counter(out[i].value for i in code if out[i].kind in ("name", "quoted"))

    def given(n: _Node) -> bool:  # a name or a property map: the question gives this node
        return bool(n.name) or n.has_property_map(out, code)

    def free(n: _Node) -> bool:  # nothing but a label, and used nowhere else
        return not given(n) and (n.var is None or count.get(n.var, 0) == 1)

    places = [(p, i) for p in _paths(chains) for i, n in enumerate(p) if n.var == var]
    if len(places) != 1:
        return
    path, i = places[0]
    tails = [t for t in (path[i + 1 :], path[:i][::-1]) if t and all(free(n) for n in t)]
    rest = [n for n in path if not any(n is m for t in tails for m in t)]
    if len(tails) != 1 or not any(given(n) for n in rest):
        return  # no tail, two, or nothing in the path that the question gives
    end = tails[0][-1]
    before = tails[0][-2] if len(tails[0]) > 1 else path[i]
    end_label = end.label or (labels or {}).get(end.var or "")
    # on to the target only from a returned node the question names: a plan's target echoes the
    # label of the variable its query returns, so past an unnamed one (`pp:Person` for "the
    # nationality of X's parent") the path's end is the answer and the target is wrong
    onward = (
        _onward(schema, chains, before, end, end_label, target, choose)
        if schema is not None and at is not None and given(path[i])
        else None
    )
    name = end.var
    if name is None:
        name = ANSWER_VAR if onward is None else "grounded_end"
        out[code[end.start]] = Token("sym", f"({name}", "(")
    out[code[k]] = Token("name", name, name)
    repairs.append(
        Repair("return_path_end", f"RETURN {var} -> {name}{':' + end.label if end.label else ''}, the end of its path")
    )
    if onward is not None:
        assert at is not None and target is not None  # what `_onward` needs to have found a way on
        forward, backward = onward
        along = _return_along(rw, at, k, name, target, forward, backward)
        repairs.append(
            Repair("return_to_target", f"{name} (:{end_label}) on to :{target}, the plan's target, along {along}")
        )


def _onward(
    schema: KBSchema,
    chains: list[tuple[_Node, _Rel, _Node]],
    before: _Node,
    end: _Node,
    end_label: str | None,
    target: str | None,
    choose: RelationChooser | None,
) -> tuple[list[str], list[str]] | None:
    """The one relationship (as forward, backward type lists) from a path's end to the target
    label: any that joins them but the one the path reached the end by, unless that is the only
    one; `choose` decides among several (without it, `_return_along` takes any relationship)."""
    if target is None or end_label is None or end_label == target:
        return None
    joining = {r for a, r, b in schema.patterns if (a, b) in ((end_label, target), (target, end_label))}
    arrived = {r.rtype for a, r, b in chains if {id(a), id(b)} == {id(before), id(end)}}
    options = sorted(joining - arrived) or sorted(joining)
    if not options:
        return None
    if len(options) > 1 and choose is not None:
        options = [choose(options)]
    forward = [r for r in options if (end_label, r, target) in schema.patterns]
    backward = [r for r in options if (target, r, end_label) in schema.patterns and r not in forward]
    return forward, backward


def _return_along(
    rw: _Rewrite,
    at: int,
    k: int,
    var: str,
    end: str,
    forward: list[str],
    backward: list[str],
    new: str = ANSWER_VAR,
) -> str:
    """`MATCH (var)-[:r]->(new:End) RETURN new...` in place of `RETURN var...` (`new`: the
    grounding's answer variable unless the caller names another)."""
    code, out = rw.code, rw.out
    if len(forward) == 1 and not backward:
        hop, along = f"-[:{forward[0]}]->", forward[0]
    elif len(backward) == 1 and not forward:
        hop, along = f"<-[:{backward[0]}]-", backward[0]
    else:
        hop, along = "--", "any relationship"
    out[code[at]] = Token("name", f"MATCH ({var}){hop}({new}:{end}) RETURN", "RETURN")
    out[code[k]] = Token("name", new, new)
    return along
