"""The retriever interface: `search(query, k)` returns ranked node ids with scores and a trace of
how each was found; concrete retrievers implement `_search`. One registry maps names to classes."""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np

from sagegraph.errors import SageGraphError


@dataclass
class Retrieval:
    """Ranked results: `idx` are node row indices into the graph, best first."""

    idx: np.ndarray
    scores: np.ndarray
    found_by: list[str] = field(default_factory=list)  # per result: "seed", "neighbour", "bm25", ...
    trace: dict[str, Any] = field(default_factory=dict)

    def __len__(self) -> int:
        return len(self.idx)


class Retriever(ABC):
    name: str = "abstract"
    uses_edges: bool = False  # results depend on the graph's edges: sweeps run it on every edge variant

    def search(self, query: str, k: int) -> Retrieval:
        if not query or not query.strip():
            raise SageGraphError("empty question")
        if k < 1:
            raise SageGraphError(f"k must be >= 1, got {k}")
        return self._search(query, k)

    @abstractmethod
    def _search(self, query: str, k: int) -> Retrieval: ...

    def params(self) -> dict[str, Any]:
        return {}


REGISTRY: dict[str, Callable[..., Retriever]] = {}


def register(name: str):
    def deco(cls):
        cls.name = name
        REGISTRY[name] = cls
        return cls

    return deco


def retriever_names() -> list[str]:
    import sagegraph.retrieve.flat  # noqa: F401  (registers bm25, dense, hybrid)
    import sagegraph.retrieve.sage  # noqa: F401

    return sorted(REGISTRY)


def uses_edges(name: str) -> bool:
    retriever_names()
    return bool(getattr(REGISTRY.get(name), "uses_edges", False))


def get_retriever(name: str, graph, **params) -> Retriever:
    names = retriever_names()
    if name not in REGISTRY:
        raise SageGraphError(f"unknown retriever {name!r}; registered: {', '.join(names)}")
    return REGISTRY[name](graph, **params)
