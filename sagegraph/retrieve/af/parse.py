"""AF-Retriever's step 3 (af-retriever.txt Alg. 1): the LLM's derived Cypher is parsed, never run.

The restricted grammar is MATCH / WHERE / RETURN / AND / CONTAINS, so a handful of regular
expressions recover what grounding needs: the target variable, the (head)-[rel]->(tail) triplets
and each symbol's attribute conditions. What the parser cannot trust it weakens instead of
failing: an unknown node type becomes "any type", an unknown relation type "any relation", and
both are counted, so a per-run report can say how often the model invented schema. A reply with no
single RETURN yields no graph strand (the caller falls back to vector search), also counted.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from sagegraph.model import safe_label

ANY = None  # an unconstrained type or relation

_FENCE = re.compile(r"```(?:cypher)?\s*(.*?)```", re.DOTALL | re.IGNORECASE)
_STR = r"'(?:[^'\\]|\\.)*'|\"(?:[^\"\\]|\\.)*\""
_PROPS = rf"\{{((?:{_STR}|[^}}'\"])*)\}}"  # quote-aware: a '}' inside a name does not end the map
_NODE = rf"\(\s*(\w*)\s*(?::\s*`?([\w ]+?)`?)?\s*(?:{_PROPS.replace('((', '(?:(', 1)})?\s*\)"
_REL = r"-\s*\[\s*\w*\s*(?::\s*`?([\w ]+?)`?)?\s*\]\s*-"
_HOP = re.compile(rf"(?=({_NODE})\s*(<)?{_REL}(>)?\s*({_NODE}))")
_NODE_RE = re.compile(_NODE)
_INLINE = re.compile(rf"\(\s*(\w+)\s*(?::\s*`?[\w ]+?`?)?\s*{_PROPS}\s*\)")
_PAIR = re.compile(r"\b(\w+)\s*:\s*('(?:[^'\\]|\\.)*'|\"(?:[^\"\\]|\\.)*\"|-?\d+(?:\.\d+)?)")
_COND = re.compile(
    r"\b(\w+)\.(\w+)\s*(=|>=|<=|>|<|CONTAINS)\s*('(?:[^'\\]|\\.)*'|\"(?:[^\"\\]|\\.)*\"|-?\d+(?:\.\d+)?)", re.IGNORECASE
)
_IN = re.compile(r"\b(\w+)\.(\w+)\s+IN\s*\[([^\]]*)\]", re.IGNORECASE)
_RETURN = re.compile(r"\bRETURN\b\s+(?:DISTINCT\s+)?(\w+)", re.IGNORECASE)
_LOWER = re.compile(r"\b(?:toLower|lower)\s*\(\s*(\w+\.\w+)\s*\)", re.IGNORECASE)
_FORBIDDEN = re.compile(r"\b(OR|NOT)\b|<>", re.IGNORECASE)
NAME_KEYS = ("name", "title")


@dataclass
class Condition:
    prop: str
    op: str  # = > >= < <= contains in
    value: Any


@dataclass
class Symbol:
    var: str
    type: str | None = ANY
    conditions: list[Condition] = field(default_factory=list)

    @property
    def is_constant(self) -> bool:
        """A symbol the question names: it has a name or title to look up."""
        return any(c.prop.lower() in NAME_KEYS and c.op in ("=", "contains", "in") for c in self.conditions)


@dataclass
class Triplet:
    head: str
    rel: str | None  # None: any relation
    tail: str


@dataclass
class ParsedQuery:
    target: str | None
    symbols: dict[str, Symbol]
    triplets: list[Triplet]
    counters: dict[str, int]

    @property
    def target_type(self) -> str | None:
        return self.symbols[self.target].type if self.target in self.symbols else None

    @property
    def constants(self) -> list[Symbol]:
        return [s for s in self.symbols.values() if s.is_constant]


def _literal(raw: str) -> Any:
    raw = raw.strip()
    if raw[:1] in "'\"":
        return raw[1:-1].replace("\\'", "'").replace('\\"', '"')
    try:
        return int(raw)
    except ValueError:
        return float(raw)


def cypher_text(reply: str) -> str:
    m = _FENCE.search(reply)
    text = m.group(1) if m else reply
    text = re.sub(r"</?think>.*?(?=MATCH)", "", text, flags=re.DOTALL | re.IGNORECASE).strip()
    return _LOWER.sub(r"\1", text)  # toLower(m.description) CONTAINS 'x': the match is case-insensitive anyway


def parse_cypher(reply: str, node_types: set[str], rel_types: set[str]) -> ParsedQuery:
    """The model's Cypher as symbols and triplets. Direction is kept as written (h -> t)."""
    counters = {
        "parsed": 0,
        "no_single_return": 0,
        "unknown_type": 0,
        "unknown_relation": 0,
        "forbidden_syntax": 0,
        "no_triplet": 0,
    }
    text = cypher_text(reply)
    if _FORBIDDEN.search(text):
        counters["forbidden_syntax"] = 1  # OR / NOT / <> are outside the grammar: parsed anyway, counted
    returns = _RETURN.findall(text)
    symbols: dict[str, Symbol] = {}
    lower_types = {safe_label(t).lower(): t for t in node_types} | {t.lower(): t for t in node_types}
    lower_rels = {r.lower(): r for r in rel_types}

    unknown: set[tuple[str, str]] = set()

    def symbol(var: str, typ: str | None) -> Symbol:
        s = symbols.setdefault(var, Symbol(var))
        if typ:
            known = lower_types.get(typ.strip().lower())
            if known is None:
                if (var, typ) not in unknown:  # the same node is met by more than one pattern
                    unknown.add((var, typ))
                    counters["unknown_type"] += 1
            elif s.type is ANY:
                s.type = known
        return s

    anon = 0
    anon_at: dict[int, str] = {}
    for m in _NODE_RE.finditer(text):
        var = m.group(1)
        if var:
            symbol(var, m.group(2))
    triplets: list[Triplet] = []
    for m in _HOP.finditer(text):
        left, lvar, ltype, back, rel, fwd, right, rvar, rtype = m.groups()
        names = []
        for var, typ, pos in ((lvar, ltype, m.start(1)), (rvar, rtype, m.start(7))):
            if not var:  # an anonymous node is one symbol wherever the overlapping hops meet it
                if pos not in anon_at:
                    anon += 1
                    anon_at[pos] = f"_anon{anon}"
                var = anon_at[pos]
            symbol(var, typ)
            names.append(var)
        rel_type: str | None = ANY
        if rel:
            rel_type = lower_rels.get(rel.strip().lower())
            if rel_type is None:
                counters["unknown_relation"] += 1
        head, tail = (names[1], names[0]) if back and not fwd else (names[0], names[1])
        triplets.append(Triplet(head, rel_type, tail))
    for m in _INLINE.finditer(text):
        s = symbol(m.group(1), None)
        for key, raw in _PAIR.findall(m.group(2)):
            s.conditions.append(Condition(key, "=", _literal(raw)))
    for var, prop, op, raw in _COND.findall(text):
        symbol(var, None).conditions.append(Condition(prop, op.lower(), _literal(raw)))
    for var, prop, items in _IN.findall(text):
        values = [_literal(v) for v in re.findall(r"'(?:[^'\\]|\\.)*'|\"(?:[^\"\\]|\\.)*\"|-?\d+(?:\.\d+)?", items)]
        symbol(var, None).conditions.append(Condition(prop, "in", values))
    if len(set(returns)) != 1 or returns[0] not in symbols:
        counters["no_single_return"] = 1
        return ParsedQuery(None, symbols, triplets, counters)
    if not triplets:
        counters["no_triplet"] = 1
    counters["parsed"] = 1
    return ParsedQuery(returns[0], symbols, triplets, counters)


_RETURN_ID = re.compile(r"RETURN\s+(?:DISTINCT\s+)?(\w+)\.id(?:\s+AS\s+\w+)?", re.I)


def return_names(cypher: str, name_key=lambda label: "name") -> str:
    """A Cypher query that returns ids (`RETURN DISTINCT m.id AS id`, as gold and hints are written)
    in AF's form, returning the answer's name: `RETURN m.<name_key(label of m)>`."""

    def ret(m: re.Match) -> str:
        var = m.group(1)
        label = re.search(rf"\(\s*{var}\s*:\s*(\w+)", cypher)
        return f"RETURN {var}.{name_key(label.group(1) if label else None)}"

    return _RETURN_ID.sub(ret, cypher)


def grow_schedule(l_max: int, rule: str = "paper") -> list[int]:
    """Candidates kept per symbol in each grounding round, from l = 1 while l <= l_max.
    paper: l <- l^1.5 + 0.5 (Alg. 1), rounded, at least +1 -> 1, 2, 3, 6, 15, 59 (then l_max);
    code:  l <- int(1.5 l + 0.5), at least +1 -> 1, 2, 3, 5, 8, 12, 18, 27, 41, 62, 93 (the public code's)."""
    if l_max < 1:
        raise ValueError("l_max must be >= 1")
    out, width = [], 1
    while width <= l_max:
        out.append(width)
        nxt = round(width**1.5 + 0.5) if rule == "paper" else int(1.5 * width + 0.5)
        width = max(width + 1, nxt)
    if rule == "paper" and out[-1] < l_max:
        out.append(l_max)  # the last round uses the whole budget, as Alg. 1's loop bound does
    return out
