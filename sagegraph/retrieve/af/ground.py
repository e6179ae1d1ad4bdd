"""AF-Retriever's steps 4-5 (af-retriever.txt Alg. 1 lines 4-10, Alg. 2): candidates per symbol,
then grounding by iterated typed set intersection, growing the candidates kept per constant.

Pure functions over a KBView: no LLM, no store, no gold. Candidate sets are boolean masks over the
graph's rows, so one propagation along a relation is two vectorised gathers over that relation's
edge arrays. `None` stands for an unconstrained symbol (no type, no attribute): it can be narrowed
by its neighbours but never expanded. A symbol with `cap` candidates or more is not expanded
either (the paper caps huge candidate sets; expanding 10k persons would constrain nothing).

Alg. 2 as printed intersects S(h) with h's own neighbours; the text says constraints propagate
bidirectionally along each triplet, which is what we do: S(t) &= Out_e(S(h)), S(h) &= In_e(S(t)).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from itertools import islice
from typing import Any

import numpy as np

from sagegraph.retrieve.af.parse import (
    NAME_KEYS,
    Condition,
    ParsedQuery,
    Symbol,
    grow_schedule,
)
from sagegraph.retrieve.kb.view import Column, KBView, normalise

_DATE = re.compile(r"^\d{4}(-\d{2}(-\d{2})?)?$")


@dataclass
class Candidates:
    """One symbol's candidates: constants rank (`ranked`, top l_max), variables filter (`allowed`)."""

    var: str
    constant: bool
    ranked: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))  # a constant's, best first
    allowed: np.ndarray | None = None  # bool mask; None: unconstrained
    exact: int = 0
    search: str = ""
    filters_applied: list[str] = field(default_factory=list)
    filters_unapplied: list[str] = field(default_factory=list)
    value_filters: int = 0  # of filters_applied, those that compare a value (not `CONTAINS` words)

    def mask(self, width: int, n: int) -> np.ndarray | None:
        """The first `width` candidates of a constant (the paper's l), else what filters allow."""
        if not self.constant:
            return self.allowed
        m = np.zeros(n, dtype=bool)
        m[self.ranked[:width]] = True
        return m

    def summary(self, view: KBView, show: int = 5) -> dict[str, Any]:
        out: dict[str, Any] = {
            "constant": self.constant,
            "filters": self.filters_applied,
            "unapplied": self.filters_unapplied,
        }
        if self.constant:
            out.update(
                search=self.search,
                exact=self.exact,
                n=len(self.ranked),
                top=[view.names[i] for i in self.ranked[:show]],
            )
        else:
            out["n"] = None if self.allowed is None else int(self.allowed.sum())
        return out


def _number(v: Any) -> float | None:
    if isinstance(v, bool):
        return None
    if isinstance(v, (int, float)):
        return float(v)
    try:
        return float(str(v))
    except ValueError:
        return None


def _find(values: np.ndarray, rows: np.ndarray, needle: str) -> np.ndarray:
    """Rows (among `rows`) whose text contains `needle`, as a mask over all rows."""
    out = np.zeros(len(values), dtype=bool)
    out[[i for i in rows if needle in values[i]]] = True
    return out


def _test(col: Column, cond: Condition, within: np.ndarray) -> np.ndarray:
    """Rows (of the mask `within`) whose value satisfies the condition: numbers numerically, ISO
    dates and other text case-insensitively as text; equality on a list attribute (aliases) means
    membership. Substring tests only visit `within`: a plot filter scans one type, not the KB."""
    op, want = cond.op, cond.value
    rows = np.flatnonzero(within & col.present)
    if op == "in":
        wanted = {normalise(w) for w in (want if isinstance(want, list) else [want])}
        out = np.zeros(len(col.present), dtype=bool)
        out[[i for i in rows if col.norm[i] in wanted]] = True
        return out
    if op == "contains":
        return _find(col.text, rows, str(want).lower())
    num = None if isinstance(want, str) and _DATE.match(want) and "-" in want else _number(want)
    if num is not None and (col.numeric or not np.isnan(col.year).all()):
        a, b = (col.number if col.numeric else col.year), num
        with np.errstate(invalid="ignore"):
            res = (
                (a == b)
                if op == "="
                else (a > b)
                if op == ">"
                else (a >= b)
                if op == ">="
                else (a < b)
                if op == "<"
                else (a <= b)
            )
        return within & col.present & res
    if op == "=":
        w = normalise(want)
        return within & col.present & ((col.norm == w) | _find(col.members, rows, f" | {w} | "))
    bound = str(want).lower()
    out = np.zeros(len(col.present), dtype=bool)
    keep = [
        i
        for i in rows
        if (
            col.text[i] > bound
            if op == ">"
            else col.text[i] >= bound
            if op == ">="
            else col.text[i] < bound
            if op == "<"
            else col.text[i] <= bound
        )
    ]
    out[keep] = True
    return out


def _rows_naming(view: KBView, rows: np.ndarray, words: str):
    """The rows whose normalised name holds `words` (normalised), lazily: a caller may want one."""
    return (int(i) for i in rows if words in view.norm_names[i])


def _names_a_node(view: KBView, sym: Symbol) -> bool:
    """The symbol is pinned by a name the KB holds (exactly, once normalised)."""
    return any(
        normalise(v) in view.name_index
        for c in sym.conditions
        if c.prop.lower() in NAME_KEYS and c.op in ("=", "in")
        for v in (c.value if isinstance(c.value, list) else [c.value])
        if isinstance(v, str)
    )


def theme_conditions(view: KBView, parsed: ParsedQuery, use_type: bool) -> list[Condition]:
    """The target's `CONTAINS 'words'` conditions that say what the answer is about, not what it is
    called or holds word for word: on a name key, words in no name of its type ("the films Nina
    Rossi directed that involve a theatre" written `m.title CONTAINS 'theatre'`, where the KB keeps
    the theme in the film's text); on any other key, words in no value of it. Only where another
    symbol is pinned by a name the KB holds, so the rest of the query still finds a small set to
    rank; without one the words stay the paper's way (a name to search, or a filter dropped). A
    misspelled title beside a named node is read as a theme too: the named node's answers then rank
    by how their text, not their names, reads against it."""
    target = parsed.symbols.get(parsed.target) if parsed.target else None
    if target is None or not any(_names_a_node(view, s) for v, s in parsed.symbols.items() if v != parsed.target):
        return []
    pool = np.zeros(view.n, dtype=bool)
    if use_type and target.type:
        pool[view.graph.rows_of_type(target.type)] = True
    else:
        pool[:] = True
    themes = []
    for cond in target.conditions:
        if cond.op != "contains" or not isinstance(cond.value, str) or not normalise(cond.value):
            continue
        if cond.prop.lower() in NAME_KEYS:
            held = next(_rows_naming(view, np.flatnonzero(pool), normalise(cond.value)), None) is not None
        else:
            held = bool(_test(view.column(cond.prop), cond, pool).any())
        if not held:
            themes.append(cond)
    return themes


def filter_symbol(view: KBView, sym: Symbol, use_type: bool) -> Candidates:
    """Step 4, first half: type and non-name attributes filter hard. A filter that matches nothing
    is dropped and, for a constant, its text joins the search string (the paper's rule)."""
    mask = np.zeros(view.n, dtype=bool)
    if use_type and sym.type:
        mask[view.graph.rows_of_type(sym.type)] = True
    else:
        mask[:] = True
    names = [c for c in sym.conditions if c.prop.lower() in NAME_KEYS]
    c = Candidates(sym.var, constant=bool(names))
    extra_search: list[str] = []
    for cond in sym.conditions:
        if cond.prop.lower() in NAME_KEYS:
            continue
        hit = _test(view.column(cond.prop), cond, mask)
        label = f"{cond.prop} {cond.op} {cond.value!r}"
        if hit.any():
            mask = hit
            c.filters_applied.append(label)
            c.value_filters += cond.op != "contains"
        else:
            c.filters_unapplied.append(label)
            extra_search.append(f"{cond.prop} {cond.value}")
    if not c.constant:
        constrained = (use_type and bool(sym.type)) or bool(c.filters_applied)
        c.allowed = mask if constrained else None
        return c
    c.allowed = mask  # the pool the constant's candidates come from
    terms = [str(v) for cond in names for v in (cond.value if isinstance(cond.value, list) else [cond.value])]
    c.search = " ".join(terms + extra_search)
    return c


def rank_constant(view: KBView, sym: Symbol, c: Candidates, l_max: int) -> Candidates:
    """Step 4, second half: exact normalised name/alias matches first, then the rest of the pool by
    how close their names read to the search string (`KBView.nearest_names`); l_max kept."""
    mask = c.allowed if c.allowed is not None else np.ones(view.n, dtype=bool)
    exact: list[int] = []
    for cond in (x for x in sym.conditions if x.prop.lower() in NAME_KEYS):
        for v in cond.value if isinstance(cond.value, list) else [cond.value]:
            rows = view.name_index.get(normalise(v), np.zeros(0, np.int64))
            if cond.op == "contains" and not len(rows):
                w = normalise(v)
                rows = np.array(list(islice(_rows_naming(view, np.flatnonzero(mask), w), l_max)), dtype=np.int64)
            exact += [int(i) for i in rows if mask[i]]
    exact = list(dict.fromkeys(exact))
    c.exact = len(exact)
    pool = np.flatnonzero(mask)
    need = l_max - len(exact)
    ranked = exact[:l_max]
    if need > 0 and len(pool):
        nearest, _ = view.nearest_names(c.search, pool, need + len(exact))
        taken = set(exact)
        ranked += [int(i) for i in nearest if int(i) not in taken][:need]
    c.ranked = np.array(ranked, dtype=np.int64)
    c.allowed = None
    return c


def symbol_candidates(view: KBView, sym: Symbol, l_max: int, use_type: bool) -> Candidates:
    """Step 4 for one symbol."""
    c = filter_symbol(view, sym, use_type)
    return rank_constant(view, sym, c, l_max) if c.constant else c


def ground_once(
    view: KBView,
    triplets,
    sets: dict[str, np.ndarray | None],
    informed: set[str],
    target: str,
    directed: bool,
    cap: int,
    max_iter: int = 50,
) -> tuple[dict[str, np.ndarray | None], set[str], int]:
    """Alg. 2: propagate along every triplet until no set shrinks (or the target empties).
    Only an informed set propagates (a constant's candidates, a filtered variable, or a set already
    narrowed by one): "every Movie" narrows nothing, and must not pass for an answer set."""
    sets = dict(sets)
    informed = set(informed)
    n = view.n
    for it in range(1, max_iter + 1):
        changed = False
        for t in triplets:
            src, dst = view.edges(t.rel, directed)
            for frm, to, a, b in ((t.head, t.tail, src, dst), (t.tail, t.head, dst, src)):
                have = sets.get(frm)
                if frm not in informed or have is None or int(have.sum()) >= cap:
                    continue
                reach = np.zeros(n, dtype=bool)
                reach[b[have[a]]] = True
                old = sets.get(to)
                new = reach if old is None else old & reach
                if to not in informed or old is None or int(new.sum()) != int(old.sum()):
                    sets[to] = new
                    informed.add(to)
                    changed = True
        tgt = sets.get(target)
        if not changed or (tgt is not None and not tgt.any()):
            return sets, informed, it
    return sets, informed, max_iter


@dataclass
class Grounding:
    answers: list[int]  # rows, in the round they first appeared
    round_of: list[int]
    rounds: list[dict[str, Any]]


def ground(
    view: KBView,
    parsed: ParsedQuery,
    cands: dict[str, Candidates],
    k: int,
    l_max: int,
    schedule: str = "paper",
    directed: bool = True,
    cap: int = 10_000,
) -> Grounding:
    """Step 5: ground with the first l candidates per constant, l growing by `schedule`, until
    >= k answers or l reaches l_max. Answers of a round are appended after earlier rounds'."""
    target = parsed.target
    out = Grounding([], [], [])
    if target is None or target not in cands and not any(target in (t.head, t.tail) for t in parsed.triplets):
        return out
    seen: set[int] = set()
    has_constants = any(c.constant for c in cands.values())
    for r, width in enumerate(grow_schedule(l_max, schedule)):
        sets = {v: c.mask(width, view.n) for v, c in cands.items()}
        informed = {v for v, c in cands.items() if c.constant or c.filters_applied}
        grounded, informed, iters = ground_once(view, parsed.triplets, sets, informed, target, directed, cap)
        tgt = grounded.get(target) if target in informed else None
        rows = np.flatnonzero(tgt) if tgt is not None else np.zeros(0, np.int64)
        new = [int(i) for i in rows if int(i) not in seen]
        seen.update(new)
        out.answers += new
        out.round_of += [r] * len(new)
        out.rounds.append({"l": width, "iterations": iters, "target": len(rows), "new": len(new)})
        if len(out.answers) >= k or not has_constants:
            break
    return out
