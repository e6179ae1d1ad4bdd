"""A built knowledge-base graph seen as typed records and directed typed relations, in memory.

AF-Retriever grounds symbols by set intersection over neighbours per relation type and direction,
filters candidates on typed attributes (year > 1990, release_date < '1976-11-14'), looks names and
aliases up exactly, and shows a reranker each candidate with its relations. None of that needs a
database round trip: the node fields are in nodes.parquet's metadata and the relations in
edges.parquet, so one load per process (shared by every question, like the other indexes) serves
them all. Similarity edges are the build's, not the KB's: they are kept out of "any relation".
"""

from __future__ import annotations

import json
import re
import threading
import weakref
from collections import Counter
from functools import cached_property
from typing import Any

import numpy as np
import pyarrow.parquet as pq
from anyascii import anyascii

from sagegraph.model import SIMILAR_PREFIX
from sagegraph.retrieve.graph_index import GraphIndex

NAME_FIELDS = ("name", "title")
# How many rows past `k` the stored name vectors hand to the fp32 reading: bf16 moves a cosine by
# ~1e-3, far less than the spread of 32 names.
NAME_SHORTLIST = 32
_NORM = re.compile(r"[^\w]+")
_ARTICLE = re.compile(r"^the\s+(?=\S)")


def normalise(name: str) -> str:
    """Case, accents, punctuation, spacing and a leading "the" do not distinguish names: 'Dr. No' ==
    'dr no', 'The Übermensch' == 'ubermensch'. Users and models write names the way they say
    them, KBs the way their source spelled them; a real KB's questions drop accents and articles.
    anyascii transliterates what Unicode decomposition leaves alone (ø, æ, ß, ł)."""
    text = anyascii(str(name)).lower()
    return _ARTICLE.sub("", " ".join(_NORM.sub(" ", text).split()))


def node_name(fields: dict[str, Any], fallback: str = "") -> str:
    for key in NAME_FIELDS:
        if fields.get(key):
            return str(fields[key])
    return fallback


def cut_text(text: str, chars: int) -> str:
    """`text` cut at `chars`, marked `...` where it was."""
    return text if len(text) <= chars else text[:chars] + "..."


class KBView:
    def __init__(self, graph: GraphIndex):
        self.graph = graph
        self.n = len(graph)
        self._columns: dict[str, Column] = {}

    @cached_property
    def _metadata(self) -> list[dict[str, Any]]:
        meta = pq.read_table(self.graph.dir / "nodes.parquet", columns=["metadata"]).column("metadata").to_pylist()
        out = []
        for m in meta:
            try:
                d = json.loads(m) if m else {}
            except json.JSONDecodeError:
                d = {}
            out.append(d if isinstance(d, dict) else {})
        return out

    @cached_property
    def fields(self) -> list[dict[str, Any]]:
        return [m.get("fields") or {} for m in self._metadata]

    @cached_property
    def topics(self) -> list[str]:
        """The build's one-line summary per node: LLM-written under LLM metadata, else the heuristic
        (the text's opening, which for a KB record is mostly its fields)."""
        return [" ".join(str(m.get("topic") or m.get("table_summary") or "").split()) for m in self._metadata]

    @property
    def llm_metadata(self) -> bool:
        return ((self.graph.manifest.get("config") or {}).get("metadata") or {}).get("mode") == "llm"

    @cached_property
    def names(self) -> list[str]:
        return [node_name(f, self.graph.title(i)) for i, f in enumerate(self.fields)]

    @cached_property
    def norm_names(self) -> list[str]:
        return [normalise(x) for x in self.names]

    @cached_property
    def name_index(self) -> dict[str, np.ndarray]:
        """Normalised name or alias -> rows carrying it."""
        idx: dict[str, list[int]] = {}
        for i, f in enumerate(self.fields):
            keys = {normalise(self.names[i])}
            aliases = f.get("aliases") or []
            keys |= {normalise(a) for a in (aliases if isinstance(aliases, list) else [aliases])}
            for key in keys - {""}:
                idx.setdefault(key, []).append(i)
        return {k: np.array(v, dtype=np.int64) for k, v in idx.items()}

    @cached_property
    def longest_name_words(self) -> int:
        """The most words a name or alias has: how long a span of a question can name a node."""
        return max((len(key.split()) for key in self.name_index), default=1)

    def column(self, prop: str) -> Column:
        """One attribute over all rows, in the forms filters compare, built once per attribute."""
        with _LOCK:
            if prop not in self._columns:
                self._columns[prop] = Column.of([f.get(prop) for f in self.fields])
            return self._columns[prop]

    @cached_property
    def _edges(self) -> tuple[np.ndarray, np.ndarray, np.ndarray, list[str]]:
        t = pq.read_table(self.graph.dir / "edges.parquet", columns=["src", "dst", "type"])
        types = t.column("type").to_pylist()
        keep = [i for i, ty in enumerate(types) if not ty.startswith(SIMILAR_PREFIX)]
        src_ids, dst_ids = t.column("src").to_pylist(), t.column("dst").to_pylist()
        src = np.array([self.graph.row[src_ids[i]] for i in keep], dtype=np.int64)
        dst = np.array([self.graph.row[dst_ids[i]] for i in keep], dtype=np.int64)
        names = sorted({types[i] for i in keep})
        code = {r: c for c, r in enumerate(names)}
        rel = np.array([code[types[i]] for i in keep], dtype=np.int16)
        return src, dst, rel, names

    @property
    def relation_types(self) -> list[str]:
        return self._edges[3]

    @cached_property
    def _by_relation(self) -> dict[str | None, tuple[np.ndarray, np.ndarray]]:
        src, dst, rel, names = self._edges
        out: dict[str | None, tuple[np.ndarray, np.ndarray]] = {None: (src, dst)}
        for c, r in enumerate(names):
            sel = rel == c
            out[r] = (src[sel], dst[sel])
        return out

    def edges(self, relation: str | None, directed: bool = True) -> tuple[np.ndarray, np.ndarray]:
        """(src, dst) rows of one relation type (None: every KB relation); undirected lists each
        edge both ways."""
        src, dst = self._by_relation.get(relation, (np.zeros(0, np.int64), np.zeros(0, np.int64)))
        if directed:
            return src, dst
        return np.concatenate([src, dst]), np.concatenate([dst, src])

    @cached_property
    def patterns(self) -> list[tuple[str, str, str, int]]:
        """(head type, relation, tail type, count), most frequent first."""
        src, dst, rel, names = self._edges
        c = Counter(zip(self.graph.types[src].tolist(), rel.tolist(), self.graph.types[dst].tolist()))
        return sorted(((h, names[r], t, n) for (h, r, t), n in c.items()), key=lambda x: (-x[3], x[0], x[1], x[2]))

    def instance(self, head: str, relation: str, tail: str) -> tuple[int, int] | None:
        """One stored (head row, tail row) of a pattern, the best-connected head first: what a
        prompt shows as a worked example, read from the KB being queried rather than written
        for one."""
        src, dst = self.edges(relation)
        sel = (self.graph.types[src] == head) & (self.graph.types[dst] == tail)
        if not sel.any():
            return None
        s, d = src[sel], dst[sel]
        best = int(np.lexsort((s, -self.degree[s]))[0])
        return int(s[best]), int(d[best])

    @cached_property
    def type_codes(self) -> tuple[np.ndarray, np.ndarray]:
        """Per row, its type as a code into the sorted distinct type names (the second array):
        walks group a hub's neighbours by type, which on the names themselves sorts Python strings."""
        names, codes = np.unique(self.graph.types.astype(str), return_inverse=True)
        return codes.astype(np.int64), names

    @cached_property
    def degree(self) -> np.ndarray:
        src, dst, _, _ = self._edges
        return np.bincount(np.concatenate([src, dst]), minlength=self.n)

    def nearest_names(self, text: str, pool: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        """The `k` rows of `pool` whose names read closest to `text`, closest first, with cosines.

        The stored name vectors only shortlist: they carry the build's numerics (bf16 where the CPU
        has it, up to ~1e-3 from fp32), so two names that close would rank the way the building
        machine rounded, and whatever is built on the winner (a prompt listing it, a query starting
        from it) would differ on another CPU, where a replay then finds no recorded reply. The
        shortlist is read again in fp32 (`exact_vectors`: the text and each name), which CPUs agree
        on to ~1e-7, and that reading ranks; equal cosines go to the lower row."""
        pool = np.asarray(pool, dtype=np.int64)
        if not len(pool) or k <= 0:
            return np.zeros(0, np.int64), np.zeros(0, np.float32)
        stored = self.graph.name_vectors[pool] @ self.graph.query_vector(text)
        keep = min(len(pool), k + NAME_SHORTLIST)
        rows = pool[np.argpartition(-stored, keep - 1)[:keep]] if len(pool) > keep else pool
        vectors = self.graph.exact_vectors([text, *(self.names[r] for r in rows)])
        cosines = vectors[1:] @ vectors[0]
        order = np.lexsort((rows, -cosines))[:k]
        return rows[order], cosines[order]

    def example_names(self, node_type: str, n: int = 5) -> list[str]:
        """The type's best-connected nodes: the names a reader would recognise."""
        rows = self.graph.rows_of_type(node_type)
        top = rows[np.lexsort((rows, -self.degree[rows]))[:n]]
        return [self.names[i] for i in top]

    def properties(self, node_type: str, sample: int = 200) -> dict[str, str]:
        """Attribute -> value kind (int, float, date, text, list) over a sample of the type."""
        kinds: dict[str, str] = {}
        for i in self.graph.rows_of_type(node_type)[:sample]:
            for key, v in self.fields[i].items():
                if key in kinds:
                    continue
                if isinstance(v, bool) or v is None:
                    kinds[key] = "text"
                elif isinstance(v, int):
                    kinds[key] = "int"
                elif isinstance(v, float):
                    kinds[key] = "float"
                elif isinstance(v, list):
                    kinds[key] = "list"
                elif re.fullmatch(r"\d{4}-\d{2}-\d{2}", str(v)):
                    kinds[key] = "date"
                else:
                    kinds[key] = "text"
        return kinds

    @cached_property
    def _incident(self) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """Per row, its KB edges (both directions), CSR: indptr, other end, relation code, outgoing?"""
        src, dst, rel, _ = self._edges
        rows = np.concatenate([src, dst])
        other = np.concatenate([dst, src])
        codes = np.concatenate([rel, rel])
        out = np.concatenate([np.ones(len(src), bool), np.zeros(len(dst), bool)])
        order = np.argsort(rows, kind="stable")
        indptr = np.zeros(self.n + 1, dtype=np.int64)
        np.add.at(indptr, rows + 1, 1)
        return np.cumsum(indptr), other[order], codes[order], out[order]

    def incident(self, row: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The row's KB edges: other end, relation code (into `relation_types`), outgoing?"""
        indptr, other, codes, out = self._incident
        a, b = indptr[row], indptr[row + 1]
        return other[a:b], codes[a:b], out[a:b]

    def shown_name(self, row: int, chars: int = 240) -> str:
        """The row's name as a prompt shows it: cut at `chars`, so no one node's name (100,000
        characters in a probe) can fill every prompt that shows it."""
        return cut_text(self.names[row], chars)

    def relations_of(self, row: int, limit: int = 8, among: set[int] | None = None, name_chars: int = 240) -> list[str]:
        """'DIRECTED -> Title' / 'ACTED_IN <- Name' lines; `among` keeps only edges to those rows.
        Names as `shown_name` cuts them."""
        indptr, other, codes, out = self._incident
        names = self.relation_types
        lines = []
        for j in range(indptr[row], indptr[row + 1]):
            o = int(other[j])
            if among is not None and o not in among:
                continue
            arrow = "->" if out[j] else "<-"
            lines.append(f"{names[codes[j]]} {arrow} {self.shown_name(o, name_chars)} ({self.graph.types[o]})")
            if len(lines) >= limit:
                break
        return lines

    def describe(self, row: int, relations: int = 8, among: set[int] | None = None, text_chars: int = 240) -> str:
        """A candidate as a reranker reads it: type, attributes (long text cut), relations."""
        parts = [f"type: {self.graph.types[row]}"]
        for key, v in self.fields[row].items():
            if isinstance(v, list):
                v = ", ".join(map(str, v[:5]))
            s = str(v)
            parts.append(f"{key}: {cut_text(s, text_chars)}")
        if relations > 0:
            rels = self.relations_of(row, relations, among, name_chars=text_chars)
            if rels:
                parts.append("relations: " + "; ".join(rels))
        return "\n".join(parts)


class Column:
    """present: has the attribute; number: float value (nan: none); text: lowercased (lists joined
    with ', '); norm: normalised text, for equality."""

    def __init__(
        self, present: np.ndarray, number: np.ndarray, text: np.ndarray, norm: np.ndarray, members: np.ndarray
    ):
        self.present, self.number, self.text, self.norm, self.members = present, number, text, norm, members
        self.numeric = not np.isnan(number).all()
        # Leading year of ISO dates: 'release_date > 1997' compares years, not '1997-11-01' > '1997'.
        self.year = np.array(
            [float(t[:4]) if len(t) >= 4 and t[:4].isdigit() and (len(t) == 4 or t[4] == "-") else np.nan for t in text]
        )

    @classmethod
    def of(cls, values: list[Any]) -> Column:
        present = np.array([v is not None for v in values], dtype=bool)
        number = np.full(len(values), np.nan)
        text = []
        for i, v in enumerate(values):
            if isinstance(v, (int, float)) and not isinstance(v, bool):
                number[i] = float(v)
            s = ", ".join(map(str, v)) if isinstance(v, list) else ("" if v is None else str(v))
            text.append(s.lower())
        norm = [
            " | ".join(normalise(x) for x in v) if isinstance(v, list) else normalise(t) for v, t in zip(values, text)
        ]
        members = [f" | {n} | " if isinstance(v, list) else "" for v, n in zip(values, norm)]  # list items, delimited
        # Object arrays, not fixed-width: one 2,000-character plot would make every row that wide.
        return cls(
            present, number, np.array(text, dtype=object), np.array(norm, dtype=object), np.array(members, dtype=object)
        )


_LOCK = threading.Lock()
_VIEWS: weakref.WeakKeyDictionary[GraphIndex, KBView] = weakref.WeakKeyDictionary()


def kb_view(g: GraphIndex) -> KBView:
    """One view per open graph: every retriever and question on it shares the loaded tables, and
    the view goes when the graph does."""
    with _LOCK:
        if g not in _VIEWS:
            _VIEWS[g] = KBView(g)
        return _VIEWS[g]
