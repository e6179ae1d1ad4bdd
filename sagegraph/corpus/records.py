"""Typed source records: what every loader produces and every build stage consumes."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa

from sagegraph.corpus.kb_edges import empty_relations


@dataclass(slots=True)
class Document:
    id: str
    title: str
    text: str
    links: list[str] = field(default_factory=list)


@dataclass(slots=True)
class Table:
    id: str
    title: str
    header: list[str]
    rows: list[list[str]]
    section_title: str = ""
    section_text: str = ""
    intro: str = ""
    # cell_links[r][c] are the hyperlinks of a cell; kept for edge metadata and ablations only.
    cell_links: list[list[list[str]]] = field(default_factory=list)


@dataclass(slots=True)
class KBObject:
    """One semi-structured knowledge-base node (STaRK SKB style): a type and named, typed fields."""

    id: str
    type: str
    fields: dict[str, Any]

    @property
    def name(self) -> str:
        for key in ("name", "title", "label"):
            if self.fields.get(key):
                return str(self.fields[key])
        return self.id


@dataclass(slots=True)
class KBRelation:
    src: str
    dst: str
    type: str


@dataclass(slots=True)
class Question:
    """A question and its gold sources (OTT-QA: table and passage ids; a KB: object ids).
    `meta` keeps whatever else the questions file said (template, hops, target type, ...): for
    per-family reports and the oracle endpoint, never for retrieval."""

    id: str
    text: str
    gold_sources: list[str]
    answer: str = ""
    meta: dict[str, Any] = field(default_factory=dict)


@dataclass(slots=True)
class Corpus:
    documents: list[Document] = field(default_factory=list)
    tables: list[Table] = field(default_factory=list)
    kb_nodes: list[KBObject] = field(default_factory=list)
    kb_edges: pa.Table = field(default_factory=empty_relations)  # columns src, type, dst
    skipped: dict[str, int] = field(default_factory=dict)

    def __len__(self) -> int:
        return len(self.documents) + len(self.tables) + len(self.kb_nodes)
