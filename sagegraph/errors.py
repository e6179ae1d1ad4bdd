"""Errors that name what the user must fix: the file, the line, the field."""

from __future__ import annotations

from pathlib import Path


class SageGraphError(Exception):
    """Base class so callers (CLI, flows) can print a clean message instead of a traceback."""


class InputError(SageGraphError):
    """Bad input data; carries its location so the message points at the offending line."""

    def __init__(self, path: str | Path, line: int | None, field: str | None, message: str):
        self.path = str(path)
        self.line = line
        self.field = field
        self.reason = message
        where = self.path + (f":{line}" if line is not None else "")
        what = f" field '{field}':" if field else ""
        super().__init__(f"{where}:{what} {message}")


class ConfigError(SageGraphError):
    """A config file that does not validate; the message lists every bad field."""


class ReadOnlyViolation(SageGraphError):
    """A query sent through the read-only path contained a write clause."""


class StoreError(SageGraphError):
    """The graph store could not be reached or refused an operation."""


class LLMError(SageGraphError):
    """An LLM call failed after its retries, or returned something unusable."""


class ReplyRejected(LLMError):
    """The endpoint answered, but not with what was asked for (no JSON, wrong shape). Only this
    may fall back to the heuristic extractor: a missing key or an endpoint that is down is the
    user's to fix, and a graph built from fallbacks would be resumed as if the LLM had written it."""


class InfraError(SageGraphError):
    """The run cannot go on: no key, a refused key, an endpoint down after its retries, a store
    that cannot be reached, a reply missing in replay mode. An evaluation stops with one line,
    keeps the questions it finished and reruns this one on resume; never scored as an empty
    retrieval, which would turn an outage into a result."""


class LLMUnavailable(LLMError, InfraError):
    """No usable endpoint: missing or refused key, connection or server errors after the retries."""


class ReplayMiss(LLMUnavailable):
    """Replay mode and no recorded reply for this exact request."""


class StoreUnavailable(StoreError, InfraError):
    """The graph store cannot be reached (server gone, connection refused)."""


class GraphMissing(StoreUnavailable):
    """The store graph a reader was given does not exist (never loaded, or deleted under it): an
    outage of this run, never an empty result."""


class QueryStopped(StoreError):
    """The engine stopped a read at one of its bounds (time, memory): the query, not the store,
    is at fault, and the reply that wrote it is not to be served again as good."""


class CypherInvalid(StoreError):
    """The engine could not parse or plan a query (its message is kept for one repair attempt)."""
