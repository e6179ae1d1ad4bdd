"""GraphRAFT's grounded query templates (graphraft.txt §4.2, App. A): every valid 1-hop and 2-hop
query from each resolved entity and every connecting path through one node between two entities,
with how many distinct nodes each returns; optionally 3-hop chains from one entity (not the
paper's: its templates stop at two hops, so a three-hop question has no template that answers it).

The public code enumerates them with three undirected aggregate Cypher queries and splices names
into the query strings. Here each template is a typed metapath counted on the KB's in-memory
adjacency (backend-neutral, no hub blow-up in a database), its Cypher text takes the entities as
parameters (`$e0`, `$e1`: lists of node ids, never names), and relation direction is kept, since a template
that cannot say who directed whom is not one a person would write. `store_counts` runs the same
enumeration as aggregate read-only Cypher, so a test can show the two agree.

The template text is what a selector chooses among: the constrained decoder may only produce one
of these strings, and the same string is what runs against the store.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Literal

import numpy as np

from sagegraph.retrieve.kb.chains import chain_phrase, joint_phrase
from sagegraph.retrieve.kb.metapaths import WalkBudget, hop_groups
from sagegraph.retrieve.kb.view import KBView
from sagegraph.store.mapping import safe_label

if TYPE_CHECKING:
    from sagegraph.store.base import GraphStore

Kind = Literal["1hop", "2hop", "3hop", "path"]


@dataclass(frozen=True)
class Hop:
    """One edge of a metapath, read from the node before it: `out` is that node -[rel]-> next."""

    rel: str
    out: bool

    def cypher(self) -> str:
        return f"-[:{safe_label(self.rel)}]->" if self.out else f"<-[:{safe_label(self.rel)}]-"


@dataclass
class Template:
    """A grounded query: its entity slots (indices into the resolved entities), metapath (`mids`:
    the types of the nodes between entity and target of a chain) and the distinct nodes it returns
    (`rows`, graph row order), computed when it was enumerated."""

    kind: Kind
    slots: tuple[int, ...]
    slot_types: tuple[str, ...]
    hops: tuple[Hop, ...]
    mids: tuple[str, ...]
    target_type: str
    rows: np.ndarray = field(repr=False, default_factory=lambda: np.zeros(0, np.int64))

    @property
    def count(self) -> int:
        return len(self.rows)

    @property
    def key(self) -> tuple:
        return (self.kind, self.slots, tuple((h.rel, h.out) for h in self.hops), self.mids, self.target_type)

    def cypher(self) -> str:
        """Parameterised, read-only; returns the target nodes' ids. Also the selector's choice text.
        `$eN` is the list of node ids entity N stands for (every node of its name, as the public
        code matches by name)."""
        a = self.slots[0]
        head = f"(e{a}:{safe_label(self.slot_types[0])})"
        x = f"(x:{safe_label(self.target_type)})"
        if self.kind == "1hop":
            return f"MATCH {head}{self.hops[0].cypher()}{x} WHERE e{a}.id IN $e{a} RETURN DISTINCT x.id AS id"
        if self.kind in ("2hop", "3hop"):
            chain = "".join(f"{h.cypher()}(:{safe_label(t)})" for h, t in zip(self.hops, self.mids))
            return (
                f"MATCH {head}{chain}{self.hops[-1].cypher()}{x} "
                f"WHERE e{a}.id IN $e{a} AND NOT x.id IN $e{a} RETURN DISTINCT x.id AS id"
            )
        b = self.slots[1]
        tail = f"(e{b}:{safe_label(self.slot_types[1])})"
        return (
            f"MATCH {head}{self.hops[0].cypher()}{x}{self.hops[1].cypher()}{tail} "
            f"WHERE e{a}.id IN $e{a} AND e{b}.id IN $e{b} AND NOT x.id IN $e{a} AND NOT x.id IN $e{b} RETURN "
            "DISTINCT x.id AS id"
        )

    def phrase(self) -> str:
        """The relation chain in words, read back from the target as a question reads ('the mother
        of X's child': `parents (Person) of children (Person)`); the `similar` selector compares it
        with the question. Directions are left out: a KB that stores both directions of a relation
        pair names each its own way, and either reads the same in a question."""
        if self.kind == "path":  # the node both entities lead to: 'acted in (Movie) and acted in (Movie)'
            return joint_phrase([h.rel for h in self.hops], self.target_type)
        return chain_phrase([(h.rel, t) for h, t in zip(self.hops, (*self.mids, self.target_type))])

    def record(self) -> dict:
        return {"kind": self.kind, "cypher": self.cypher(), "count": self.count}


def entity_groups(entities: Sequence[int | Sequence[int]]) -> list[np.ndarray]:
    """Each resolved entity as the sorted rows it stands for; the same set twice is one entity."""
    groups = [np.unique(np.atleast_1d(np.asarray(e, dtype=np.int64))) for e in entities]
    return list({tuple(x.tolist()): x for x in groups if len(x)}.values())


def enumerate_templates(
    view: KBView,
    entities: Sequence[int | Sequence[int]],
    *,
    two_hop: bool = True,
    paths: bool = True,
    max_mid_degree: int | None = None,
    three_hop: bool = False,
    max_frontier: int = 2000,
    budget: WalkBudget | None = None,
) -> list[Template]:
    """Every non-empty template around the resolved entities, each a row or the rows of all nodes
    sharing its name. `max_mid_degree` skips middles with more KB edges than that (hubs), which a
    store would otherwise time out on; None keeps them all. `three_hop` extends each 2-hop chain by
    one more hop when it reaches at most `max_frontier` nodes (a wider one is a hub's fan-out,
    which no question walks on through). A 3-hop chain is a walk: it goes on through the start
    (X's parent's children hold X, so X's parent's child's gender holds X's; only a template's
    targets leave the start out) and its third hop may go back over the second's edge (X's
    parent's child's parent is the parent again), as FalkorDB matches the template's Cypher;
    Neo4j, which never repeats a relationship within a pattern, returns fewer rows for such a
    chain when it runs in the store (`execute: store`).

    `budget` bounds the walk as `metapaths.WalkBudget` bounds DGR's (a fresh one by default): the
    relations its 2- and 3-hop steps examine and the templates it makes; every 1-hop template and
    every path between two entities is made whatever it says, and `capped` says a longer one was
    left out (a hub: 2-hop middles of a few thousand relations each, tens of thousands of them)."""
    rel = view.relation_types
    types = view.graph.types
    ents = entity_groups(entities)
    budget = budget if budget is not None else WalkBudget()
    out: list[Template] = []
    first: dict[int, dict[tuple[int, bool, str], np.ndarray]] = {}
    for s, a in enumerate(ents):
        ta = str(types[a[0]])
        g1 = first[s] = hop_groups(view, a)
        for (c, d, t), rows in sorted(g1.items()):
            out.append(Template("1hop", (s,), (ta,), (Hop(rel[c], d),), (), t, rows))
        if not two_hop or budget.capped:
            continue
        for (c1, d1, tm), mids in sorted(g1.items()):
            if max_mid_degree is not None:
                mids = mids[view.degree[mids] <= max_mid_degree]
            if not len(mids):
                continue
            if not _within(budget, view, mids, len(out)):
                break
            for (c2, d2, t), reached in sorted(hop_groups(view, mids).items()):
                two = (Hop(rel[c1], d1), Hop(rel[c2], d2))
                rows = reached[~np.isin(reached, a)]
                if len(rows):
                    out.append(Template("2hop", (s,), (ta,), two, (tm,), t, rows))
                if not three_hop or len(reached) > max_frontier:
                    continue
                if max_mid_degree is not None:
                    reached = reached[view.degree[reached] <= max_mid_degree]
                if not _within(budget, view, reached, len(out)):
                    break
                for (c3, d3, t3), ends in sorted(hop_groups(view, reached, exclude=a).items()):
                    out.append(Template("3hop", (s,), (ta,), (*two, Hop(rel[c3], d3)), (tm, t), t3, ends))
            if budget.capped:
                break
    if paths:
        for i in range(len(ents)):
            for j in range(i + 1, len(ents)):
                for (c1, d1, t1), r1 in sorted(first[i].items()):
                    for (c2, d2, t2), r2 in sorted(first[j].items()):
                        if t1 != t2:
                            continue
                        both = np.intersect1d(r1, r2, assume_unique=True)
                        both = both[~np.isin(both, ents[i]) & ~np.isin(both, ents[j])]
                        if len(both):
                            out.append(
                                Template(
                                    "path",
                                    (i, j),
                                    (str(types[ents[i][0]]), str(types[ents[j][0]])),
                                    (Hop(rel[c1], d1), Hop(rel[c2], not d2)),
                                    (),
                                    t1,
                                    both,
                                )
                            )
    return out


def _within(budget: WalkBudget, view: KBView, rows: np.ndarray, made: int) -> bool:
    """Whether a step from `rows` fits the budget, counted in: the relations it examines
    (`WalkBudget.examine`), and the templates made so far. False marks the walk capped."""
    budget.chains = made
    if budget.chains >= budget.max_chains:
        budget.capped = True
    return budget.examine(view, rows)


def template_params(view: KBView, template: Template, entities: Sequence[int | Sequence[int]]) -> dict[str, list[str]]:
    ents = entity_groups(entities)
    return {f"e{s}": [str(view.graph.ids[r]) for r in ents[s].tolist()] for s in template.slots}


# -- the same enumeration in the store ---------------------------------------------------------


def _arrow(out: bool, var: str) -> str:
    return f"-[{var}]->" if out else f"<-[{var}]-"


def _kind(labels: list[str], node_types: set[str]) -> str:
    """The KB type among a node's store labels (the others say what kind of node it is)."""
    found = [x for x in labels if x in node_types]
    return found[0] if found else ""


def store_counts(
    store: GraphStore,
    view: KBView,
    entities: Sequence[int | Sequence[int]],
    timeout_ms: int = 10_000,
    max_rows: int = 10_000,
) -> dict[tuple, int]:
    """Template key -> distinct-target count, by aggregate Cypher (the public code's three queries,
    split by direction so direction is kept), with entity ids as parameters. Groups over relations
    that are not the KB's (the build's similarity edges) are dropped."""
    node_types = {safe_label(t) for t in view.graph.node_types()}
    type_of = {safe_label(t): t for t in view.graph.node_types()}
    rel_of = {safe_label(r): r for r in view.relation_types}
    ids = [[str(view.graph.ids[r]) for r in e.tolist()] for e in entity_groups(entities)]
    counts: dict[tuple, int] = {}

    def read(q: str, params: dict) -> list[dict]:
        return store.read(q, params, timeout_ms=timeout_ms, max_rows=max_rows)

    for s, node in enumerate(ids):
        for d1 in (True, False):
            q = (
                f"MATCH (s){_arrow(d1, 'r1')}(t) WHERE s.id IN $src "
                "RETURN type(r1) AS r1, labels(t) AS lt, count(DISTINCT t) AS n"
            )
            for row in read(q, {"src": node}):
                t = type_of.get(_kind(row["lt"], node_types))
                if t and row["r1"] in rel_of:
                    counts[("1hop", (s,), ((rel_of[row["r1"]], d1),), (), t)] = int(row["n"])
            for d2 in (True, False):
                q = (
                    f"MATCH (s){_arrow(d1, 'r1')}(m){_arrow(d2, 'r2')}(t) WHERE s.id IN $src AND NOT t.id IN $src "
                    "RETURN type(r1) AS r1, labels(m) AS lm, type(r2) AS r2, labels(t) AS lt, count(DISTINCT t) AS n"
                )
                for row in read(q, {"src": node}):
                    tm, t = type_of.get(_kind(row["lm"], node_types)), type_of.get(_kind(row["lt"], node_types))
                    if tm and t and row["r1"] in rel_of and row["r2"] in rel_of:
                        key = ("2hop", (s,), ((rel_of[row["r1"]], d1), (rel_of[row["r2"]], d2)), (tm,), t)
                        counts[key] = int(row["n"])
    for i in range(len(ids)):
        for j in range(i + 1, len(ids)):
            for d1 in (True, False):
                for d2 in (True, False):
                    q = (
                        f"MATCH (a){_arrow(d1, 'r1')}(t){_arrow(d2, 'r2')}(b) "
                        "WHERE a.id IN $a AND b.id IN $b AND NOT t.id IN $a AND NOT t.id IN $b "
                        "RETURN type(r1) AS r1, type(r2) AS r2, labels(t) AS lt, count(DISTINCT t) AS n"
                    )
                    for row in read(q, {"a": ids[i], "b": ids[j]}):
                        t = type_of.get(_kind(row["lt"], node_types))
                        if t and row["r1"] in rel_of and row["r2"] in rel_of:
                            counts[("path", (i, j), ((rel_of[row["r1"]], d1), (rel_of[row["r2"]], d2)), (), t)] = int(
                                row["n"]
                            )
    return counts


def run_in_store(
    store: GraphStore,
    view: KBView,
    template: Template,
    entities: Sequence[int | Sequence[int]],
    timeout_ms: int = 10_000,
    max_rows: int = 10_000,
) -> np.ndarray:
    """The template's Cypher in the store (read-only, timeout, row cap), as graph rows."""
    rows = store.read(
        template.cypher(), template_params(view, template, entities), timeout_ms=timeout_ms, max_rows=max_rows
    )
    return np.array(sorted(view.graph.row[r["id"]] for r in rows if r["id"] in view.graph.row), dtype=np.int64)
