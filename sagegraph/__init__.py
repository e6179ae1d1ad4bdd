"""sagegraph: structure-aware graph retrieval over text, tables and knowledge graphs.

The library is orchestration-free: every algorithm is a plain function; `tasks/` and `flows/`
wrap them for Prefect. From Python: `sagegraph.open(path).retrieve(question, retriever=..., k=...)`
(`sagegraph.api`), loaded on first use so that importing a submodule stays light.
"""

from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"
__all__ = ["Graph", "Hit", "build", "open", "sweep"]

if TYPE_CHECKING:
    from sagegraph.api import Graph, Hit, build, open, sweep


def __getattr__(name: str) -> Any:
    if name in __all__:
        from sagegraph import api

        return getattr(api, name)
    raise AttributeError(f"module 'sagegraph' has no attribute {name!r}")
