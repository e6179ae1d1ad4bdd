"""The retriever interface and its one registry.

Contract: a retriever is built from `Resources` (what it may use) and its validated `Params`, and
`search(query, k)` returns a `Retrieval`: graph rows best first, their scores, how each was found,
the LLM usage the query cost and a trace of what the method did (the plan, the Cypher that ran,
row counts, fallbacks). A retriever never sees gold labels. It may raise an InfraError (endpoint or
store down), which stops an evaluation; anything the model got wrong is handled by the method's
own fallback inside `search`, and recorded in the trace.

Each retriever declares its parameters as a pydantic model (`Params`): unknown keys and bad values
are refused with their names when a sweep file loads, before any work.
"""

from __future__ import annotations

import itertools
import threading
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, Protocol, runtime_checkable

import numpy as np
from pydantic import BaseModel, ConfigDict, model_validator
from pydantic.fields import FieldInfo

from sagegraph.errors import ConfigError, SageGraphError, StoreUnavailable

if TYPE_CHECKING:
    from sagegraph.llm import LLMClient
    from sagegraph.retrieve.graph_index import GraphIndex
    from sagegraph.store.base import GraphStore


@dataclass
class Retrieval:
    """Ranked results: `idx` are node row indices into the graph, best first."""

    idx: np.ndarray
    scores: np.ndarray
    found_by: list[str] = field(default_factory=list)  # per result: "seed", "neighbour", "bm25", "cypher", ...
    trace: dict[str, Any] = field(default_factory=dict)
    usage: dict[str, Any] = field(default_factory=dict)  # this query's LLM calls, tokens, cost, seconds

    def __len__(self) -> int:
        return len(self.idx)


class Resources:
    """What retrievers may use, built once per process and shared by every retriever in it: the
    graph index (BM25, dense, adjacency, encoder), an LLM client, and a graph-store handle that is
    opened on first use (so retrievers that never run Cypher never start a database server)."""

    def __init__(
        self, graph: GraphIndex, llm: LLMClient | None = None, store_factory: Callable[[], GraphStore] | None = None
    ):
        self.graph = graph
        self._llm = llm
        self._store_factory = store_factory
        self._store: GraphStore | None = None
        self._lock = threading.Lock()

    @property
    def llm(self) -> LLMClient:
        if self._llm is None:
            raise ConfigError(
                "this retriever calls an LLM: give LLM settings (--llm conf/llm_local.yaml, a sweep's `llm:` "
                "block, or OPENAI_API_KEY / OPENAI_BASE_URL)"
            )
        return self._llm

    @property
    def has_llm(self) -> bool:
        return self._llm is not None

    @property
    def store(self) -> GraphStore:
        with self._lock:
            if self._store is None:
                if self._store_factory is None:
                    raise StoreUnavailable(
                        "this retriever runs Cypher, but the graph was built without a graph store "
                        "(store.backend: none)"
                    )
                self._store = self._store_factory()
            return self._store

    def close(self) -> None:
        with self._lock:
            if self._store is not None:
                self._store.close()
                self._store = None


class NoParams(BaseModel):
    model_config = ConfigDict(extra="forbid")


class ParamGroup(BaseModel):
    """The parameters of one concern of a method (its tools, its agent loop, its fallback), passed
    whole to the code that concern lives in."""

    model_config = ConfigDict(extra="forbid", frozen=True)


class GroupedParams(BaseModel):
    """A method's parameters in groups (each field a `ParamGroup`), named by users by their own
    names: parameter names are unique across a model's groups, so a sweep's `t_max: [10]` and a
    nested `agent: {t_max: 10}` are the same setting, and the run key reads the flat form."""

    model_config = ConfigDict(extra="forbid")

    @classmethod
    def groups(cls) -> dict[str, type[ParamGroup]]:
        return {
            name: info.annotation
            for name, info in cls.model_fields.items()
            if isinstance(info.annotation, type) and issubclass(info.annotation, ParamGroup)
        }

    @model_validator(mode="before")
    @classmethod
    def _sort_into_groups(cls, data: Any) -> Any:
        if not isinstance(data, dict):
            return data
        groups = cls.groups()
        owner = {name: group for group, model in groups.items() for name in model.model_fields}
        sorted_data: dict[str, Any] = {}
        for key, value in data.items():
            if key in groups and isinstance(value, dict):
                sorted_data.setdefault(key, {}).update(value)
            elif key in owner:
                sorted_data.setdefault(owner[key], {})[key] = value
            else:
                sorted_data[key] = value  # a group given whole, or an unknown key the model refuses by name
        return sorted_data


def param_fields(model: type[BaseModel]) -> dict[str, FieldInfo]:
    """A params model's parameters by the names users write: a grouped model's groups' fields."""
    if issubclass(model, GroupedParams):
        return {name: info for group in model.groups().values() for name, info in group.model_fields.items()}
    return dict(model.model_fields)


def param_values(params: BaseModel, **dump: Any) -> dict[str, Any]:
    """`params.model_dump(**dump)` by the names users write (a grouped model's groups flattened)."""
    values = params.model_dump(**dump)
    if isinstance(params, GroupedParams):
        return {name: value for group in params.groups() for name, value in values.get(group, {}).items()}
    return values


class Retriever[ParamsT: BaseModel](ABC):
    """What the evaluation layer needs to know about a configuration (its label, result size, LLM
    use, prompt version, sweep-grid sugar) is asked of the class with the configuration's
    parameters, so evaluation, sweeps and the CLI never test a retriever's name."""

    name: ClassVar[str] = "abstract"
    uses_edges: ClassVar[bool] = False  # results depend on the graph's edges: sweeps run it on every edge variant
    uses_llm: ClassVar[bool] = False
    prompt_version: ClassVar[str] = ""  # part of the run key: a changed prompt reruns instead of resuming
    Params: ClassVar[type[BaseModel]] = NoParams
    # Sweep-block keys beside `params` (alpha, k_prime, ...) mapped onto same-named params; None: all
    # it has. A retriever whose param means something else under a shared name opts out (AF's alpha
    # is a share of k, not a fusion weight).
    shared_axes: ClassVar[tuple[str, ...] | None] = None
    # Sweep-block keys the class reads itself in `grid` rather than as params (SAGE's total_k).
    grid_keys: ClassVar[tuple[str, ...]] = ()
    # The comparison's default baseline: the one registered retriever every other is compared to.
    baseline: ClassVar[bool] = False

    @classmethod
    def result_size(cls, k: int, params: ParamsT) -> int:
        """How many results `search(q, k)` returns at most: the recall cut-off a run reports."""
        return k

    @classmethod
    def label(cls, k: int, given: dict[str, Any], params: ParamsT) -> str:
        """A configuration's name in tables and MLflow: the parameters the user gave."""
        return f"{cls.name}[k={k}{given_suffix(given)}]"

    @classmethod
    def needs_llm(cls, params: ParamsT) -> bool:
        return cls.uses_llm

    @classmethod
    def prompt_for(cls, params: ParamsT) -> str:
        """The prompt version behind a configuration's replies (part of its run key)."""
        return cls.prompt_version

    @classmethod
    def graph_inputs(cls, graph: GraphIndex, params: ParamsT) -> str:
        """What a configuration reads from beside the graph that its build does not fingerprint (an
        encoder `sagegraph adapt` trained on it): part of each run's inputs, so a run made before
        it changed is set aside and run again. Nothing by default."""
        return ""

    @classmethod
    def prepare(cls, graph: GraphIndex, params: ParamsT) -> list[str]:
        """Build what a configuration reads from disk beside the graph and would otherwise build
        inside its first question (in one worker, on that question's clock, once per worker that
        gets there first), before a sweep fans out; the names of what it built or found. Nothing
        by default."""
        return []

    @classmethod
    def oracle_reply(cls, messages: list[dict[str, Any]], gold: dict[str, Any]) -> str | None:
        """For the oracle endpoint only (tests and ceilings, never retrieval): the reply a perfect
        model would give to this method's prompt, from the question's gold annotations
        (`gold_cypher`, `target_type`); None when the prompt is not this method's."""
        return None

    @classmethod
    def format_trace(cls, row: dict[str, Any], lines: int = 8) -> str:
        """One traced question of a run as text (`sagegraph trace`): its timed events by default."""
        from sagegraph.retrieve.timeline import format_events

        return format_events(row, lines)

    @classmethod
    def miss_kind(cls, trace: dict[str, Any], gold_type: str | None, relations: int | None) -> str:
        """Why a question's first answer missed, read from its trace (`sagegraph diagnose
        failures`); the gold answer's type and the gold path's length are given only to classify.
        A method without a reading of its own says `missed`."""
        return "missed"

    @classmethod
    def run_report(cls, run_dir: Path, metrics: dict[str, Any]) -> dict[str, Any]:
        """A method's own columns for a finished run in `sagegraph diagnose report`."""
        return {}

    @classmethod
    def axes(cls) -> tuple[str, ...]:
        """The sweep-block keys beside `params` this class takes as parameters."""
        own = tuple(param_fields(cls.Params))
        return own if cls.shared_axes is None else tuple(a for a in cls.shared_axes if a in own)

    @classmethod
    def grid(cls, ks: list[int], axes: dict[str, list[Any]]) -> list[tuple[int, dict[str, Any]]]:
        """A sweep block's (k, params) pairs for this class from its k values and the block's other
        keys (each a list of values); keys the class does not take are ignored here (the sweep
        refuses a key no retriever of its block takes). `total_k` is the result size, which for a
        retriever without sugar of its own is k."""
        mine = {a: v for a, v in axes.items() if a in cls.axes()}
        ks = list(dict.fromkeys(ks + list(axes.get("total_k", []))))
        return [(k, dict(zip(mine, combo))) for k in ks for combo in itertools.product(*mine.values())]

    def __init__(self, res: Resources, params: ParamsT):
        self.res = res
        self.graph = res.graph
        self.params: ParamsT = params

    def search(self, query: str, k: int) -> Retrieval:
        if not query or not query.strip():
            raise SageGraphError("empty question")
        if k < 1:
            raise SageGraphError(f"k must be >= 1, got {k}")
        return self._search(query, k)

    @abstractmethod
    def _search(self, query: str, k: int) -> Retrieval: ...

    def stage_ids(self, rows: Iterable[int], cap: int | None = None) -> list[str]:
        """Source ids (what gold is written in) of a step's rows, once each and in order, for the
        evaluator's per-step diagnostics (`trace["stage_sets"]`); the retriever never scores them."""
        ids = list(dict.fromkeys(str(self.graph.source_ids[r]) for r in rows))
        return ids if cap is None else ids[:cap]


def given_suffix(given: dict[str, Any], shown: tuple[str, ...] = ()) -> str:
    """`,key=value` for each parameter a user gave, sorted, but those a label already shows."""
    return "".join(f",{key}={v}" for key, v in sorted(given.items()) if key not in shown)


@runtime_checkable
class ExpandsSeeds(Protocol):
    """A capability: a retriever whose results start from another retriever's (its seeds). The
    evaluation computes the seeds once per question for every configuration whose `seed_config` is
    equal (SAGE's k' sweep), and its Fig. 4 report compares such a configuration with its seed
    retriever at the same result size."""

    def seed_search(self, query: str, k: int) -> Retrieval: ...

    def expand(self, query: str, seeds: Retrieval) -> Retrieval: ...

    @classmethod
    def seed_config(cls, k: int, params: BaseModel) -> tuple[str, int, dict[str, Any]]:
        """(retriever, k, parameters) of the configuration whose results are the seeds."""
        ...
