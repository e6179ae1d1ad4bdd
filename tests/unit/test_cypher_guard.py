"""The guard on model-written Cypher: a bypass corpus, generated adversarial queries, and the real
engine watched for network connections."""

from __future__ import annotations

import re
import socket
import threading
from pathlib import Path
from typing import Any

import pytest
from hypothesis import strategies as st

from sagegraph.errors import ReadOnlyViolation
from sagegraph.store.base import GraphStore
from sagegraph.store.readonly import ALLOWED_PROCEDURES

CORPUS = Path(__file__).parents[1] / "data" / "cypher_bypass.txt"


def bypass_corpus(port: int = 9) -> list[str]:
    text = "\n".join(line for line in CORPUS.read_text(encoding="utf-8").splitlines() if not line.startswith("#"))
    return [q.strip().replace("PORT", str(port)) for q in text.split("\n---\n") if q.strip()]


# An independent reading of the text the engine receives. It is only right for that canonical form
# (no comments, strings single-quoted with backslash escapes, backticked names without backticks
# inside), which is why the guard writes the query back in it.
_CANON_STRING = re.compile(r"'(?:\\.|[^'\\])*'|`[^`]*`")
_LIVE = re.compile(
    r"(?<![.\w])(CREATE|MERGE|SET|DELETE|DETACH|REMOVE|DROP|FOREACH|LOAD|CSV|GRANT|REVOKE|DENY|ALTER|RENAME|USE|SHOW|PROFILE|"
    r"apoc|dbms|gds|TRANSACTIONS|PERIODIC)(?![\w])|;.*\S|/\*|//|[^\x00-\x7f]",
    re.I | re.S,
)
_CALLS = re.compile(r"\bCALL\s*([\w.`]+)", re.I)


def reaches_engine_harmless(text: str) -> bool:
    bare = _CANON_STRING.sub(" S ", text)
    if "'" in bare or '"' in bare or "`" in bare:
        return False  # a quote left over: the canonical form was not kept
    if _LIVE.search(bare):
        return False
    return all(m.group(1).lower() in ALLOWED_PROCEDURES for m in _CALLS.finditer(bare))


class RecordingStore(GraphStore):
    """Every text that would reach the engine, and nothing run."""

    backend = "recording"

    def __init__(self):
        self.sent: list[str] = []

    def write(self, query, params=None):
        raise AssertionError("the read path wrote")

    def _read(self, query: str, params: dict[str, Any], timeout_ms: int, max_rows: int):
        self.sent.append(query)
        return [], False

    def explain(self, query, params):
        self.sent.append(query)

    def ensure_indexes(self, dim, wait=True): ...
    def await_indexes(self, timeout_s=600.0): ...
    def drop_vector_index(self): ...
    def vector_search(self, vector, k):
        return []

    def close(self): ...


@pytest.mark.parametrize("query", bypass_corpus())
def test_every_bypass_in_the_corpus_is_refused_before_the_engine(query):
    store = RecordingStore()
    with pytest.raises(ReadOnlyViolation):
        store.read_untrusted(query)
    assert store.sent == []


@pytest.mark.parametrize(
    "query,sent",
    [
        ("MATCH (n) /* it's */ RETURN n.id AS id // done", "MATCH (n)   RETURN n.id AS id LIMIT 11"),
        (
            "MATCH (n) WHERE n.text CONTAINS 'CREATE a SET; LOAD CSV' RETURN n",
            "MATCH (n) WHERE n.text CONTAINS 'CREATE a SET; LOAD CSV' RETURN n LIMIT 11",
        ),
        (
            'MATCH (n {name: "O\'Hara"}) RETURN n.id AS id LIMIT 500',
            "MATCH (n {name: 'O\\'Hara'}) RETURN n.id AS id LIMIT 11",
        ),
        ("MATCH (n) RETURN n.id AS id LIMIT 3;", "MATCH (n) RETURN n.id AS id LIMIT 3;"),
        (
            "MATCH (a) RETURN a.id AS id UNION MATCH (b) RETURN b.id AS id",
            "MATCH (a) RETURN a.id AS id LIMIT 11 UNION MATCH (b) RETURN b.id AS id LIMIT 11",
        ),
        (
            "MATCH (n) WHERE EXISTS { MATCH (n)-->(m) RETURN m } RETURN n.set AS s, n.load AS l",
            "MATCH (n) WHERE EXISTS { MATCH (n)-->(m) RETURN m } RETURN n.set AS s, n.load AS l LIMIT 11",
        ),
        (
            "CALL db.idx.fulltext.queryNodes('Entity', 'x') YIELD node RETURN node.id AS id",
            "CALL db.idx.fulltext.queryNodes('Entity', 'x') YIELD node RETURN node.id AS id LIMIT 11",
        ),
        (
            "MATCH (m:`Movie`) RETURN date.truncate('day', m.released) AS d",
            "MATCH (m:`Movie`) RETURN date.truncate('day', m.released) AS d LIMIT 11",
        ),
    ],
)
def test_what_runs_is_the_guards_rewrite_with_the_row_cap_in_the_query(query, sent):
    store = RecordingStore()
    store.read_untrusted(query, max_rows=10)
    assert store.sent == [sent, sent]  # explained, then run: the same text


# ---- generated adversarial queries ----
PAYLOADS = [
    "LOAD CSV FROM 'https://127.0.0.1:9/x' AS row",
    "LOAD CSV WITH HEADERS FROM 'file:///etc/passwd' AS row",
    "CREATE (x:Pwn)",
    "SET n.pwned = true",
    "DETACH DELETE n",
    "MERGE (x:Pwn {id: 1})",
    "REMOVE n.name",
    "FOREACH (i IN [1] | CREATE (:Pwn))",
    "CALL dbms.procedures() YIELD name",
    "CALL `dbms.procedures`() YIELD name",
    "CALL db.idx.fulltext.drop('Entity')",
    "WITH apoc.load.json('https://127.0.0.1:9/x') AS j",
    "CALL { MATCH (z) DETACH DELETE z }",
]
LOOKALIKES = {"O": "\u041e", "A": "\u0410", "C": "\u0421", "E": "\u0415", "L": "\uff2c", " ": "\u00a0"}
PREFIXES = ["MATCH (n:Node) WITH n LIMIT 2", "MATCH (n) WHERE n.id = 'a'", "MATCH (n)-[r]->(m) WITH n, m"]
SUFFIX = "RETURN n.id AS id"


@st.composite
def obfuscated(draw, text: str) -> str:
    """The same words, in any case, with any whitespace or empty comment between them, names
    maybe backticked, maybe a look-alike letter or a Unicode space."""
    words = text.split(" ")
    out = []
    for w in words:
        w = "".join(c.upper() if draw(st.booleans()) else c.lower() for c in w) if w.isalpha() else w
        if draw(st.integers(0, 9)) == 0:
            w = "".join(LOOKALIKES.get(c.upper(), c) if draw(st.integers(0, 3)) == 0 else c for c in w)
        out.append(w)
    seps = st.sampled_from(
        [" ", "  ", "\t", "\n", " /**/ ", "/* x */", " // c\n", "\r\n", "\u00a0", " /* ' */ ", ' /* " */ ']
    )
    return "".join(w + (draw(seps) if i < len(out) - 1 else "") for i, w in enumerate(out))


@st.composite
def adversarial(draw) -> tuple[str, bool]:
    """(query, live): `live` when the payload is code the engine would run as written; otherwise
    it is hidden in a string or a comment, where it may pass but must not run."""
    payload = draw(obfuscated(draw(st.sampled_from(PAYLOADS))))
    prefix, how = (
        draw(st.sampled_from(PREFIXES)),
        draw(st.sampled_from(["live", "string", "comment", "line", "quote-in-comment", "after-string"])),
    )
    sep = draw(st.sampled_from([" ", "\n", " /* ' */ ", " // '\n", "/**/"]))
    if how == "live":
        return f"{prefix}{sep}{payload}{sep}{SUFFIX}", True
    if how == "quote-in-comment":  # the original bypass: a quote in a comment hid what followed
        return f"{prefix} /* ' */ {payload} // '\n{SUFFIX}", True
    if how == "after-string":
        lit = draw(st.sampled_from(["'a\\'b'", '"a\\"b"', "'a\\\\'", "'/*'", "'//'", '"\'"', "'`'"]))
        return f"{prefix} WHERE n.name = {lit} {payload} {SUFFIX}", True
    if how == "string":
        quoted = payload.replace("\\", "\\\\").replace("'", "\\'")
        return f"{prefix} WHERE n.text CONTAINS '{quoted}' {SUFFIX}", False
    if how == "comment":
        return f"{prefix} /* {payload.replace('*/', '')} */ {SUFFIX}", False
    return f"{prefix} // {payload.replace(chr(10), ' ').replace(chr(13), ' ')}\n{SUFFIX}", False


# ---- the real engine ----
class Listener:
    """A TCP port on loopback that counts connection attempts (TLS or not, the TCP accept is enough)."""

    def __init__(self):
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(16)
        self.sock.settimeout(0.2)
        self.port = self.sock.getsockname()[1]
        self.accepted = 0
        self._stop = False
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self):
        while not self._stop:
            try:
                conn, _ = self.sock.accept()
            except (TimeoutError, OSError):
                continue
            self.accepted += 1
            conn.close()

    def close(self):
        self._stop = True
        self.thread.join(2)
        self.sock.close()


@pytest.fixture
def falkor(tmp_path):
    from sagegraph.store import open_store

    store = open_store("falkordb", tmp_path / "store", graph="guard")
    store.write("UNWIND range(1, 3) AS i CREATE (:Node:Movie {id: 'm' + toString(i), name: 'film ' + toString(i)})")
    yield store
    store.close()
