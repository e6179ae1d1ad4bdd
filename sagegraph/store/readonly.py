"""The read-only guard for Cypher that came from outside (LLM plans, users).

Backends also execute such queries through their own read-only path (GRAPH.RO_QUERY, READ access
mode); this check gives a clear error before anything reaches the database.
"""

from __future__ import annotations

import re

from sagegraph.errors import ReadOnlyViolation

_STRINGS = re.compile(r"'(?:\\.|[^'\\])*'|\"(?:\\.|[^\"\\])*\"|`[^`]*`")
_COMMENTS = re.compile(r"//[^\n]*|/\*.*?\*/", re.S)
_WRITE = re.compile(r"\b(CREATE|MERGE|SET|DELETE|DETACH|REMOVE|DROP|FOREACH|LOAD\s+CSV|GRANT|REVOKE|DENY|ALTER|RENAME|START|STOP|TERMINATE)\b", re.I)
_CALL = re.compile(r"\bCALL\s+([A-Za-z_][\w.]*)", re.I)
ALLOWED_PROCEDURES = {
    "db.labels",
    "db.relationshiptypes",
    "db.propertykeys",
    "db.idx.vector.querynodes",
    "db.index.vector.querynodes",
    "db.idx.fulltext.querynodes",
    "db.index.fulltext.querynodes",
}


def assert_read_only(query: str) -> str:
    """Return the query unchanged, or raise ReadOnlyViolation naming the offending clause."""
    if not query or not query.strip():
        raise ReadOnlyViolation("empty query")
    bare = _COMMENTS.sub(" ", _STRINGS.sub("''", query))
    m = _WRITE.search(bare)
    if m:
        raise ReadOnlyViolation(f"write clause {m.group(1).upper()!r} is not allowed in a read-only query")
    if ";" in bare.strip().rstrip(";"):
        raise ReadOnlyViolation("multiple statements are not allowed")
    for call in _CALL.finditer(bare):
        name = call.group(1).lower()
        if name not in ALLOWED_PROCEDURES:
            raise ReadOnlyViolation(f"procedure {call.group(1)!r} is not on the read-only allow-list")
    if "{" in bare and re.search(r"\bCALL\s*\{", bare, re.I):
        raise ReadOnlyViolation("CALL subqueries are not allowed")
    return query
