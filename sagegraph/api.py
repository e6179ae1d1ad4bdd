"""sagegraph from Python: open a built graph, ask any registered retriever, get typed hits.

    import sagegraph

    with sagegraph.open("work/kb-pathquestion") as graph:
        for hit in graph.retrieve("who is the father of Bill Clinton?", retriever="hybrid", k=5):
            print(f"{hit.score:.3f} {hit.source_id} {hit.title}")

    report = sagegraph.sweep("conf/sweep_ottqa.yaml")  # a sweep file, run here; its summary and MLflow runs

No Prefect server or Dask cluster is involved: the graph's indexes load in this process, once, and
the graph store (for the Cypher-writing retrievers) starts on first use. One `Graph` serves
concurrent `retrieve` calls from threads, each retriever made once per name and parameters. An LLM retriever
needs `llm=` (an `LLMConfig`, or a profile file such as
conf/llm_local.yaml), and its replies are cached beside the graph like a sweep's.
"""

from __future__ import annotations

import json
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, Self

from sagegraph.config import BuildConfig, LLMConfig, load_llm_config
from sagegraph.corpus.questions import checked_question_text
from sagegraph.errors import SageGraphError
from sagegraph.retrieve.base import Resources, Retriever
from sagegraph.retrieve.graph_index import GraphIndex
from sagegraph.retrieve.registry import get_retriever, retriever_names
from sagegraph.retrieve.resources import open_resources


@dataclass(frozen=True)
class Hit:
    """One retrieved node, best first: what an application shows or passes to a reader model."""

    node_id: str
    score: float
    text: str
    title: str
    source_id: str  # the corpus object it came from: a document, a table, a KB object's id
    type: str  # a KB node's type, else the chunk kind
    found_by: str  # how the retriever reached it: its seed retriever's name, "neighbour", "cypher", "fallback", ...
    trace: dict[str, Any] = field(default_factory=dict, compare=False, repr=False)  # the query's trace (first hit only)


def graph_dir(path: str | Path) -> Path:
    """The built graph under `path`: a build's out folder (its published generation), the
    `graph` link itself, or a generation folder."""
    path = Path(path).expanduser()
    for candidate in (path / "graph", path):
        if (candidate / "nodes.parquet").exists():
            return candidate
    raise SageGraphError(
        f"{path}: no built graph here (no nodes.parquet in it or in its graph/); run `sagegraph build` first"
    )


class Graph:
    """A built graph opened for retrieval (`sagegraph.open`). Holds a reader's lease on the
    generation it opened: a rebuild publishes beside it and never deletes it until `close`."""

    def __init__(self, path: str | Path, llm: LLMConfig | str | Path | None = None):
        self.index = GraphIndex(graph_dir(path))
        config = load_llm_config(Path(llm)) if isinstance(llm, (str, Path)) else llm
        self._resources: Resources = open_resources(self.index, config)
        self._lock = threading.Lock()
        self._retrievers: dict[tuple[str, str], Retriever] = {}

    @staticmethod
    def retrievers() -> list[str]:
        """The registered retrievers' names (`sagegraph retrievers NAME` lists one's parameters)."""
        return retriever_names()

    def retrieve(self, question: str, retriever: str = "sage", k: int = 20, **params: Any) -> list[Hit]:
        """The nodes `retriever` ranks best for `question`, with its `params` (validated: an
        unknown name or value raises SageGraphError naming it). `k` as the retriever reads it:
        most return k hits; SAGE returns its k seeds and then up to `k_prime` neighbours."""
        checked_question_text(question)
        if k < 1:
            raise SageGraphError(f"k must be at least 1, got {k}")
        found = self._retriever(retriever, params).search(question, k)
        g = self.index
        return [
            Hit(
                node_id=str(g.ids[i]),
                score=float(score),
                text=g.text(int(i)),
                title=g.title(int(i)) or "",
                source_id=str(g.source_ids[i]),
                type=str(g.types[i]),
                found_by=how,
                trace=found.trace if rank == 0 else {},
            )
            for rank, (i, score, how) in enumerate(zip(found.idx, found.scores, found.found_by, strict=True))
        ]

    def _retriever(self, name: str, params: dict[str, Any]) -> Retriever:
        """One retriever per name and parameters, made on first use (an LLM retriever reads the
        store's schema then) and shared by later calls: retrievers answer questions from several
        threads at once, as an evaluation's `concurrency` does."""
        key = (name, json.dumps(params, sort_keys=True, default=str))
        with self._lock:
            if key not in self._retrievers:
                self._retrievers[key] = get_retriever(name, self._resources, **params)
            return self._retrievers[key]

    def close(self) -> None:
        """The store's server (when this graph started it) stops and the generation is released."""
        with self._lock:
            self._resources.close()
            self.index.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def build(config: str | Path, out: str | Path | None = None, max_sources: int | None = None) -> dict[str, Any]:
    """Builds the graph a build config describes in this process (no Prefect, no Dask; a large
    corpus is faster through `sagegraph build`, which fans batches out over workers), resuming
    what is built and publishing the result. Returns the build's report; `open(report["graph"])`
    reads it."""
    from sagegraph.config import load_config

    return _build_here(load_config(config, out=Path(out) if out is not None else None, max_sources=max_sources))


def _build_here(cfg: BuildConfig) -> dict[str, Any]:
    from sagegraph.construct.inprocess import build_in_process
    from sagegraph.retrieve.kb.adaptation import with_adaptation
    from sagegraph.runlock import hold

    with hold(cfg.out, "build"):  # the adaptation (`adapt.enabled`) under the build's lock, as the flow's
        return with_adaptation(cfg, build_in_process(cfg))


def sweep(
    path: str | Path, llm: str | Path | None = None, cache_mode: Literal["live", "replay"] | None = None
) -> dict[str, Any]:
    """Runs a sweep file in this process (no Prefect, no Dask; `sagegraph sweep` fans a large one
    out over workers), building its graph first where its `build:` config asks, and resuming the
    configurations that finished: the same run directories, MLflow runs and report as the CLI's.
    `llm`: an LLM profile file that overrides the sweep's; `cache_mode`: `replay` makes a request
    with no recorded reply an error. Returns the report (`summary`, `table`, `figure4`, `mlflow`)."""
    from sagegraph.eval.sweep import graph_to_build, llm_settings, load_sweep
    from sagegraph.sweeps import finished_sweep, sweep_in_process

    cfg = load_sweep(Path(path))
    cfg.llm = llm_settings(cfg, Path(llm) if llm is not None else None)
    if cfg.llm is not None and cache_mode is not None:
        cfg.llm.cache_mode = cache_mode
    if (build_cfg := graph_to_build(cfg)) is not None:
        _build_here(build_cfg)
    return finished_sweep(cfg) or sweep_in_process(cfg)


def open(path: str | Path, llm: LLMConfig | str | Path | None = None) -> Graph:
    """A built graph for retrieval: a build's out folder, its `graph` link or a generation."""
    return Graph(path, llm)
