"""The retrievers sagegraph knows, by name: the one place a retriever is added.

A retriever module registers its class with `@register("name")`; `MODULES` lists the modules
that hold sagegraph's own, imported by name when a retriever is first looked up (so this module
imports none of them, and none of them imports it back in a cycle). A retriever outside this
package is found through the `sagegraph.retrievers` entry-point group (`name = "pkg.module"` in
its distribution's metadata) or, unpackaged, through the modules named in SAGEGRAPH_RETRIEVERS
(an environment variable, so Dask workers see it too); it needs no change here, in the
evaluation layer or in the CLI.
"""

from __future__ import annotations

import importlib
import os
from importlib.metadata import entry_points
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ValidationError

from sagegraph.errors import ConfigError, SageGraphError
from sagegraph.retrieve.base import Resources, Retriever, param_fields

if TYPE_CHECKING:
    from sagegraph.retrieve.graph_index import GraphIndex

MODULES = (
    "sagegraph.retrieve.flat",
    "sagegraph.retrieve.sage",
    "sagegraph.retrieve.spark.retriever",
    "sagegraph.retrieve.af.retriever",
    "sagegraph.retrieve.dgr.retriever",
    "sagegraph.retrieve.graphraft.retriever",
    "sagegraph.retrieve.vote",
)
ENTRY_POINTS = "sagegraph.retrievers"
# A method's own CLI commands (`sagegraph dgr ...`): modules with `add_commands(subparsers)`, light
# to import (their handlers import the method when run); other packages add theirs through the
# `sagegraph.commands` entry-point group.
COMMAND_MODULES = (
    "sagegraph.retrieve.dgr.commands",
    "sagegraph.retrieve.graphraft.commands",
)
COMMAND_ENTRY_POINTS = "sagegraph.commands"
ENV = "SAGEGRAPH_RETRIEVERS"  # comma-separated modules to import: a retriever tried without packaging it

REGISTRY: dict[str, type[Retriever]] = {}


def register(name: str):
    def deco(cls):
        cls.name = name
        REGISTRY[name] = cls
        return cls

    return deco


_loaded = False


def retriever_names() -> list[str]:
    global _loaded
    if not _loaded:
        for module in MODULES:
            importlib.import_module(module)
        for ep in entry_points(group=ENTRY_POINTS):
            importlib.import_module(ep.value.split(":")[0])
        for module in filter(None, (m.strip() for m in os.environ.get(ENV, "").split(","))):
            try:
                importlib.import_module(module)
            except ImportError as exc:
                raise ConfigError(f"{ENV}: cannot import {module!r} ({exc}); is its folder on PYTHONPATH?") from None
        _loaded = True
    return sorted(REGISTRY)


def retriever_class(name: str) -> type[Retriever]:
    names = retriever_names()
    if name not in REGISTRY:
        raise SageGraphError(f"unknown retriever {name!r}; registered: {', '.join(names)}")
    return REGISTRY[name]


def command_modules() -> list[str]:
    return [*COMMAND_MODULES, *(ep.value.split(":")[0] for ep in entry_points(group=COMMAND_ENTRY_POINTS))]


def default_baseline() -> str:
    """The registered retriever marked as the comparison's baseline (`baseline = True`)."""
    marked = [n for n in retriever_names() if REGISTRY[n].baseline]
    if len(marked) != 1:
        raise ConfigError(
            f"one retriever must be marked as the default baseline, found {marked or 'none'}; name one with --baseline"
        )
    return marked[0]


def uses_edges(name: str) -> bool:
    retriever_names()
    return bool(getattr(REGISTRY.get(name), "uses_edges", False))


def validate_params(name: str, params: dict[str, Any]) -> BaseModel:
    """The retriever's params model, or a ConfigError naming each bad or unknown key."""
    cls = retriever_class(name)
    try:
        return cls.Params.model_validate(params)
    except ValidationError as exc:
        known = ", ".join(param_fields(cls.Params)) or "none"
        problems = "; ".join(f"{'.'.join(map(str, e['loc'])) or '(params)'}: {e['msg']}" for e in exc.errors())
        raise ConfigError(f"retriever {name!r}: {problems} (its parameters: {known})") from None


def get_retriever(name: str, res: Resources | GraphIndex, **params) -> Retriever:
    if not isinstance(res, Resources):
        res = Resources(res)
    return retriever_class(name)(res, validate_params(name, params))
