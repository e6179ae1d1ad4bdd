"""FalkorDB embedded through falkordblite: a redis-server child process with the FalkorDB module.

Opened with append-only persistence (fsync on every write) so a killed process loses nothing that
was acknowledged; a stale settings file left by a killed run is detected and the server restarted
from its AOF.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import shutil
import time
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import Future
from pathlib import Path
from typing import Any

import numpy as np
import psutil
import pyarrow as pa
import pyarrow.compute as pc

from sagegraph.errors import CypherInvalid, GraphMissing, QueryStopped, StoreError, StoreUnavailable
from sagegraph.processes import running
from sagegraph.store import watchdog
from sagegraph.store.base import GraphStore
from sagegraph.store.mapping import NODE_LABEL
from sagegraph.store.writes import Write

log = logging.getLogger("sagegraph.store")
DB_FILE = "graph.db"
# The append-only file is the persistence: every write fsynced, and what the server restarts from.
# RDB snapshots (redislite's default save points) would only duplicate it.
SERVER_CONFIG = {"appendonly": "yes", "appendfsync": "always", "save": '""'}
# redis-py (8.x) gives up on any reply after 5 s by default and then retries the command: a server
# busy loading a 100 MB store (15-20 s here) failed to open, and a GRAPH.COPY or a write batch slower
# than 5 s was sent twice (a copy then failed with "destination key already exists"; a CREATE
# batch would be doubled). Reads carry their own engine-side timeout, so the socket waits: forever
# on the embedded server's local socket (its death closes the socket), an hour on a network one.
SERVER_SOCKET_TIMEOUT_S = 3600.0
# The embedded server's first answer: it loads the store before it answers (15-20 s for 100 MB here).
# One that has not answered by then hung while loading (seen once in `make test`: FalkorDB 4.22
# stopped after reading its AOF's base file and never answered, so a ping with no socket timeout
# waited forever): it is stopped and started once more, and a second hang is a StoreUnavailable.
START_ANSWER_TIMEOUT_S = 300.0
# Closing first asks the server how many clients it has: one that has not answered within this is
# hung (see `_make_and_drop_a_graph`) and is stopped rather than waited on.
CLOSE_ANSWER_TIMEOUT_S = START_ANSWER_TIMEOUT_S
# The memory one query may take in the embedded engine (FalkorDB's QUERY_MEM_CAPACITY). A bulk
# write batch of 1,000 nodes with 4 KB of text and 384-d vectors each stays well within it. A
# shared server's own setting is left to its operator.
QUERY_MEMORY_BYTES = 64 * 2**20


def _value(v: Any) -> Any:
    """Falkor returns Node/Edge objects; callers get plain dicts (the embedding left out)."""
    props = getattr(v, "properties", None)
    if props is not None:
        out = {k: val for k, val in props.items() if k != "embedding"}
        labels = getattr(v, "labels", None)
        if labels is not None:
            out["_labels"] = list(labels)
        relation = getattr(v, "relation", None)
        if relation is not None:
            out["_type"] = relation
        return out
    if isinstance(v, list):
        return [_value(x) for x in v]
    return v


def _quote(v: str) -> str:
    return '"' + v.replace("\\", "\\\\").replace('"', '\\"') + '"'


class CypherText(str):
    """A parameter value already spelled as a Cypher literal; `param_literal` sends it as it is."""


def vector_literals(vectors: np.ndarray) -> list[CypherText]:
    """'[x,y,...]' per row, every float32 in its shortest spelling that reads back exactly.

    Arrow formats the whole matrix in C++: 1.3 s for OTT-QA's 12M floats, against 4.3 s for
    Python's repr per element (which also needed rounding to keep the text short, and so was not
    exact). Embeddings are stored as float32 (`vecf32`), so nothing is lost on the way in.
    """
    vectors = np.ascontiguousarray(vectors, dtype=np.float32)
    if vectors.ndim != 2:
        raise StoreError(f"embeddings must be a 2-d matrix, got shape {vectors.shape}")
    bad = np.flatnonzero(~np.isfinite(vectors).all(axis=1))
    if len(bad):
        raise StoreError(f"embedding rows {bad[:5].tolist()} hold NaN or infinite values; FalkorDB cannot store them")
    if vectors.shape[1] == 0:
        return [CypherText("[]")] * len(vectors)
    text = pa.array(vectors.ravel()).cast(pa.string())
    offsets = pa.array(np.arange(0, vectors.size + 1, vectors.shape[1], dtype=np.int64))
    rows = pc.binary_join(pa.LargeListArray.from_arrays(offsets, text), ",").to_pylist()
    return [CypherText(f"[{r}]") for r in rows]


def _quoted(column: pa.ChunkedArray) -> pa.ChunkedArray:
    """Arrow's version of `_quote` for a whole column."""
    return pc.replace_substring(pc.replace_substring(column, "\\", "\\\\"), '"', '\\"')


def _check_edges(table: pa.Table) -> None:
    for name in ("src", "dst"):
        if table.column(name).null_count:
            raise StoreError(f"edges.parquet: {table.column(name).null_count} edges have no {name}")
    weight = table.column("weight").cast(pa.float64())
    if pc.all(pc.is_finite(weight)).as_py() is False:  # null for no edges at all
        raise StoreError("edges.parquet: edge weights must be finite numbers")


def edge_literals(table: pa.Table) -> pa.Array:
    """`{src:"..",dst:"..",props:{weight:..,metadata:".."}}` per edges.parquet row, made by Arrow in
    C++: the text `param_literal` writes for the row as a dict, without a Python call per value."""
    _check_edges(table)
    w = table.column("weight").cast(pa.float64()).cast(pa.string())
    w = pc.if_else(
        pc.match_substring_regex(w, "[.eE]"), w, pc.binary_join_element_wise(w, ".0", "")
    )  # 1 -> 1.0: a float
    meta = pc.fill_null(table.column("metadata"), "{}")
    rows = pc.binary_join_element_wise(
        '{src:"',
        _quoted(table.column("src")),
        '",dst:"',
        _quoted(table.column("dst")),
        '",props:{weight:',
        w,
        ',metadata:"',
        _quoted(meta),
        '"}}',
        "",
    )
    return rows.combine_chunks() if isinstance(rows, pa.ChunkedArray) else rows


# Edges whose literals are made at a time: the literals of a STaRK-PRIME-sized graph's 6.5M
# edges at once took ~650 MB, and a type's filtered copy as much again.
EDGE_SPAN = 100_000


def edge_literal_batches(table: pa.Table, batch_size: int) -> Iterator[tuple[str, CypherText, int]]:
    """(type, `$rows` literal, count) per batch, grouped by type in first-seen order, the literals
    made a span of rows at a time. Joining a batch is left to the moment it is sent, so it
    overlaps the server's work on the batch before; formatting OTT-QA's 523k edges in Python up
    front kept the server waiting for 2-3 s. The whole table is checked before the first batch."""
    _check_edges(table)
    span = max(1, EDGE_SPAN // batch_size) * batch_size  # whole batches: the same batches as one span
    types = table.column("type").combine_chunks()
    for rtype in pc.unique(types).to_pylist():
        rows_of_type = pc.indices_nonzero(pc.equal(types, rtype))
        for span_start in range(0, len(rows_of_type), span):
            literals = edge_literals(table.take(rows_of_type.slice(span_start, span)))
            for start in range(0, len(literals), batch_size):
                part = literals.slice(start, batch_size)
                yield rtype, CypherText("[" + ",".join(part.to_pylist()) + "]"), len(part)


def param_literal(value: Any) -> str:
    """A parameter as the CYPHER header spells it, as falkordb's client does, with a fast path.

    The client formats every float through a Python call. A list of plain floats is formatted in
    one C-level pass instead; the text is the same, since str(float) is what the client writes per
    element. Embeddings of a bulk load come preformatted (`vector_literals`).
    """
    if type(value) is CypherText:
        return value
    if isinstance(value, str):
        return _quote(value) if value else '""'
    if value is None:
        return "null"
    if isinstance(value, (list, tuple)):
        if value and set(map(type, value)) == {float}:
            return "[" + ",".join(map(repr, value)) + "]"
        return "[" + ",".join(map(param_literal, value)) + "]"
    if isinstance(value, dict):
        parts = []
        for k, v in value.items():
            key = str(k)
            if not key or "`" in key:
                raise StoreError(f"parameter map key {key!r} cannot be sent to FalkorDB (empty or with a backtick)")
            parts.append(f"`{key}`:{param_literal(v)}")
        return "{" + ",".join(parts) + "}"
    return str(value)


def params_header(params: dict[str, Any]) -> str:
    return "CYPHER " + "".join(f"`{k}`={param_literal(v)} " for k, v in params.items())


def _registered_pid(path: Path) -> int:
    """The pid of the server the store's settings registry names (0: none, or unreadable)."""
    settings = path / f"{DB_FILE}.settings"
    try:
        pidfile = json.loads(settings.read_text()).get("pidfile", "")
        return int(Path(pidfile).read_text().strip()) if pidfile and Path(pidfile).exists() else 0
    except (ValueError, OSError, json.JSONDecodeError):
        return 0


def _clear_stale_registry(path: Path) -> None:
    settings = path / f"{DB_FILE}.settings"
    if not settings.exists():
        return
    if not running(_registered_pid(path)):
        log.warning(
            "removing stale FalkorDB settings %s (server from a killed run); data reloads from the AOF", settings
        )
        settings.unlink(missing_ok=True)


def _stop_hung_server(path: Path) -> None:
    """Ends the registered server that never answered (SIGKILL after SIGTERM: a server hung while
    loading does not shut down) and drops its registry, so the next start begins a fresh one.
    Nothing is lost: writes are on disk in the AOF before they are acknowledged."""
    pid = _registered_pid(path)
    if pid > 0:
        with contextlib.suppress(psutil.Error):
            proc = psutil.Process(pid)
            proc.terminate()
            try:
                proc.wait(10)
            except psutil.TimeoutExpired:
                proc.kill()
                proc.wait(10)
    (path / f"{DB_FILE}.settings").unlink(missing_ok=True)


def import_client() -> None:
    """Imports redislite's FalkorDB client in the calling thread. Its first import takes
    site-packages off `sys.path` while it loads the Python driver: a store opened in a background
    thread made an import running beside it in the main thread fail ("No module named
    'huggingface_hub'", seen on a rebuild). Call this before starting such a thread."""
    import redislite.falkordb_client  # noqa: F401


@contextlib.contextmanager
def _starting(path: Path) -> Iterator[None]:
    """One process at a time starts or joins the store's server: redislite starts a server when it
    finds none registered, so two opening at once could each start one on the same files. The
    first holds this lock until its server answers (loaded); the others then join it."""
    import fcntl

    fd = os.open(path / f"{DB_FILE}.start.lock", os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def _rewriting(client: Any) -> bool:
    info = client.info("persistence")
    return bool(info.get("aof_rewrite_in_progress") or info.get("aof_rewrite_scheduled"))


# Where the server keeps its append-only file's parts (Redis 7's `appenddirname`, left at its default).
LOG_DIR = "appendonlydir"


def _log_sizes(path: Path) -> tuple[int, int]:
    """Bytes of the append-only file's base part(s) and of its incremental parts."""
    parts = [f for f in (path / LOG_DIR).iterdir() if f.is_file()] if (path / LOG_DIR).is_dir() else []
    base = sum(f.stat().st_size for f in parts if ".base." in f.name)
    return base, sum(f.stat().st_size for f in parts if f.name.endswith(".incr.aof"))


def _await_rewrite(client: Any, path: Path, timeout_s: float = 3600.0) -> None:
    """Until no AOF rewrite runs or waits to run; a rewrite that failed is a StoreError."""
    deadline = time.monotonic() + timeout_s
    while _rewriting(client):
        if time.monotonic() > deadline:
            raise StoreError(f"embedded FalkorDB in {path}: its log rewrite ran past {timeout_s:.0f} s")
        time.sleep(0.2)
    if client.info("persistence").get("aof_last_bgrewrite_status") not in (None, "ok"):
        raise StoreError(f"embedded FalkorDB in {path}: its log rewrite failed (see the server's log)")


def _bound_answers(client: Any, timeout_s: float | None) -> None:
    """Every connection of the client, open or made from now on, waits `timeout_s` for an answer."""
    pool = client.connection_pool
    pool.connection_kwargs["socket_timeout"] = timeout_s
    for conn in pool._available_connections:
        conn.socket_timeout = timeout_s
        if conn._sock is not None:
            conn._sock.settimeout(timeout_s)


def _make_and_drop_a_graph(client: Any) -> None:
    """Makes and deletes a graph of its own, under the first ping's socket timeout: FalkorDB 4.22
    was seen (once, in `make test`) to deadlock on the first graph a fresh server makes, its main
    thread waiting for the engine's lock on the list of graphs, so a server that answered its
    ping then hung the store's first write, and every command after it, for good. Caught here, it
    is stopped and started again like a server that never answered."""
    probe = f"sagegraph-liveness-{os.getpid()}"
    client.execute_command("GRAPH.QUERY", probe, "RETURN 1")
    client.execute_command("GRAPH.DELETE", probe)


def start_embedded(path: Path, answer_timeout_s: float = START_ANSWER_TIMEOUT_S) -> Any:
    """The embedded FalkorDB client for the store in `path`, its server started (or joined) and
    answering. The first ping waits `answer_timeout_s`, not retried (redis-py would retry a
    timeout ten times); a server that has not answered by then is stopped and started once more.
    Afterwards the socket waits without a limit, as SERVER_SOCKET_TIMEOUT_S explains (the
    server's death closes it), under redis-py's own retries."""
    import redis
    from redis.backoff import NoBackoff
    from redis.retry import Retry
    from redislite.falkordb_client import FalkorDB

    attempts = 2
    for attempt in range(1, attempts + 1):
        try:
            db = FalkorDB(
                str(path / DB_FILE),
                serverconfig=SERVER_CONFIG,
                socket_timeout=answer_timeout_s,
                retry=Retry(NoBackoff(), 0),
            )
            _make_and_drop_a_graph(db.client)
            break
        except redis.TimeoutError as exc:
            _stop_hung_server(path)
            if attempt == attempts:
                raise StoreUnavailable(
                    f"embedded FalkorDB in {path} did not answer within {answer_timeout_s:.0f} s, {attempts} times "
                    "(hung while loading the store or making its first graph; its servers were stopped)"
                ) from exc
            log.warning(
                "embedded FalkorDB in %s did not answer within %.0f s: stopped, starting it again",
                path,
                answer_timeout_s,
            )
        except Exception as exc:
            raise StoreUnavailable(f"could not start embedded FalkorDB in {path}: {exc}") from exc
    client = db.client
    if getattr(client, "running", False):  # redislite started this server (rather than joining one): watch it
        watchdog.start(os.getpid(), client.pid, client.socket_file or "")
    # Engine-enforced, before any result leaves it: `RETURN range(1, 10000000)` took 12 s and
    # 1.4 GB of client memory on a 1 s limit, and is refused in 0.2 s under this bound.
    try:
        client.execute_command("GRAPH.CONFIG", "SET", "QUERY_MEM_CAPACITY", QUERY_MEMORY_BYTES)
    except redis.RedisError as exc:
        raise StoreUnavailable(f"embedded FalkorDB in {path} refused its query memory bound: {exc}") from exc
    _bound_answers(db.client, None)  # the pinged connection stays open: the server counts it as this client
    db.client.set_retry(redis.Redis().get_retry())  # redis-py's default (no connection is made)
    return db


class FalkorStore(GraphStore):
    backend = "falkordb"
    vector_literal = "vecf32(row.embedding)"
    # HNSW settings of the vector index, against FalkorDB's defaults (efConstruction 200, efRuntime
    # 10). OTT-QA, 30,956 x 384, recall@10 against exact search over 200 queries: defaults 0.966
    # and 10.5 s to build; these 0.996 and 5.7 s, 1.1 ms per query. Random 128-d vectors (a harder
    # case): defaults 0.985, these 0.957, efConstruction 100 alone 0.885.
    hnsw_options = "M:16, efConstruction:100, efRuntime:128"

    def __init__(self, path: Path, graph: str = "sagegraph"):
        self.path = Path(path)
        self.path.mkdir(parents=True, exist_ok=True)
        with _starting(self.path):
            _clear_stale_registry(self.path)
            self.db = start_embedded(self.path)
        self.graph_name = graph
        self.g = self.db.select_graph(graph)

    def run_writes(self, writes: Iterable[Write]) -> int:
        """Format batch i+1 while the server runs batch i: the two take similar time on a bulk load.

        One sender thread keeps the batches in order; the socket wait releases the GIL.
        """
        from concurrent.futures import ThreadPoolExecutor

        count = 0
        with ThreadPoolExecutor(1, thread_name_prefix="falkor-load") as sender:
            pending = None
            for w in writes:
                text = params_header({"rows": w.rows}) + w.query
                if pending is not None:
                    self._written(pending)
                pending = sender.submit(self.g.query, text)
                count += w.count
            if pending is not None:
                self._written(pending)
        return count

    def _raise_if_unreachable(self, exc: Exception) -> None:
        """A failure that means the server is gone, as StoreUnavailable: the run stops with one line."""
        if _unreachable(exc):
            raise StoreUnavailable(f"FalkorDB at {self.path} cannot be reached: {exc}") from exc

    def _written(self, pending: Future) -> None:
        """A write batch's outcome: the engine's refusal (a bound, a constraint) as a StoreError
        naming the graph, an unreachable server as StoreUnavailable, for one line at the CLI."""
        try:
            pending.result()
        except Exception as exc:
            self._raise_if_unreachable(exc)
            raise StoreError(f"FalkorDB at {self.path} refused a write to {self.graph_name!r}: {exc}") from exc

    def edge_batches(self, table: pa.Table, batch_size: int) -> Iterator[tuple[str, CypherText, int]]:
        return edge_literal_batches(table, batch_size)

    def vector_params(self, vectors: np.ndarray) -> list[Any]:
        return vector_literals(vectors)

    def write(self, query: str, params: dict[str, Any] | None = None) -> list[dict[str, Any]]:
        res = self.g.query(params_header(params) + query if params else query)
        return self._rows(res)

    @staticmethod
    def _rows(res) -> list[dict[str, Any]]:
        header = [h[1] if isinstance(h, (list, tuple)) else h for h in (res.header or [])]
        return [dict(zip(header, (_value(v) for v in row))) for row in res.result_set]

    def _read(
        self, query: str, params: dict[str, Any], timeout_ms: int, max_rows: int
    ) -> tuple[list[dict[str, Any]], bool]:
        try:
            res = self.g.ro_query(query, params, timeout=timeout_ms)
        except Exception as exc:
            if "empty key" in str(exc):  # no such graph: never loaded, or deleted under this reader
                raise GraphMissing(
                    f"FalkorDB at {self.path} holds no graph {self.graph_name!r} (never loaded, or deleted "
                    "under this reader); "
                    "rerun to read the graph published now"
                ) from exc
            self._raise_if_unreachable(exc)
            if any(bound in str(exc) for bound in ("timed out", "mem consumption")):
                raise QueryStopped(f"read query failed: {exc}") from exc
            raise StoreError(f"read query failed: {exc}") from exc
        rows = self._rows(res)
        return rows[:max_rows], len(rows) > max_rows

    def explain(self, query: str, params: dict[str, Any]) -> None:
        try:
            self.g.explain(query, params or None)
        except Exception as exc:
            if "empty key" in str(exc):
                return
            self._raise_if_unreachable(exc)
            if "mem consumption" in str(exc):  # a constant folded while planning (`range(1, 10000000)`)
                raise QueryStopped(f"read query failed: {exc}") from exc
            raise CypherInvalid(str(exc).strip()) from exc

    def ensure_fulltext(self) -> None:
        """FalkorDB's full-text index is per label: one over name and title of KB entities."""
        rows = self.g.query("CALL db.indexes()").result_set
        if any(r and r[0] == "Entity" and "name" in (r[1] or []) and "FULLTEXT" in str(r) for r in rows):
            return
        with contextlib.suppress(Exception):  # an older server without full-text indexes: lookups scan
            self.g.query("CALL db.idx.fulltext.createNodeIndex('Entity', 'name', 'title')")

    def ensure_indexes(self, dim: int | None, wait: bool = True) -> None:
        existing = self._index_fields()
        if "id" not in existing:
            self.g.query(f"CREATE INDEX FOR (n:{NODE_LABEL}) ON (n.id)")
        if dim and "embedding" not in existing:
            self.g.query(
                f"CREATE VECTOR INDEX FOR (n:{NODE_LABEL}) ON (n.embedding) OPTIONS "
                f"{{dimension:{int(dim)}, similarityFunction:'cosine', {self.hnsw_options}}}"
            )
        if wait:
            self.await_indexes()
        self._indexes_ready = wait  # a new index may be filling: the next vector query checks again

    def drop_vector_index(self) -> None:
        if "embedding" in self._index_fields():
            self.g.query(f"DROP VECTOR INDEX FOR (n:{NODE_LABEL}) ON (n.embedding)")
        self._indexes_ready = False

    def await_indexes(self, timeout_s: float = 600.0) -> None:
        """Falkor answers vector queries with 'Invalid arguments' while the index is UNDER CONSTRUCTION."""
        deadline = time.monotonic() + timeout_s
        while True:
            rows = self._rows(self.g.query("CALL db.indexes()"))
            building = [str(r.get("status")) for r in rows if "UNDER CONSTRUCTION" in str(r.get("status", ""))]
            if not building:
                return
            if time.monotonic() > deadline:
                raise StoreError(f"FalkorDB indexes still building after {timeout_s:.0f}s: {building}")
            time.sleep(0.2)

    def _index_fields(self) -> set[str]:
        try:
            rows = self.g.query("CALL db.indexes()").result_set
        except Exception:
            return set()
        return {f for row in rows if row and row[0] == NODE_LABEL for f in row[1]}

    def vector_search(self, vector: np.ndarray, k: int) -> list[tuple[str, float]]:
        self.await_indexes_once()
        q = (
            f"CALL db.idx.vector.queryNodes('{NODE_LABEL}', 'embedding', $k, vecf32($v)) YIELD node, score "
            "RETURN node.id AS id, score"
        )
        try:
            rows = self.g.ro_query(q, {"k": int(k), "v": [float(x) for x in vector]}).result_set
        except Exception as exc:
            if "embedding" not in self._index_fields():
                raise StoreError(
                    f"FalkorDB graph {self.graph_name!r} has no vector index: build with `store.vector_index: true`"
                ) from exc
            raise
        # Falkor reports cosine distance; callers get similarity, higher is better, as from Neo4j.
        return [(r[0], 1.0 - float(r[1])) for r in rows]

    def graphs(self) -> list[str]:
        return list(self.db.list_graphs())

    def compact(self, log_share: float = 0.0) -> float | None:
        """BGREWRITEAOF, awaited, once the append-only file's incremental part (the queries
        written since the last rewrite) has grown past `log_share` of its base: the base becomes
        an RDB image of every graph (`aof-use-rdb-preamble`, Redis's default) and the increment is
        dropped. A server start replays the increment query by query, so a log left to grow makes
        every later open slower; a rewrite writes the whole store again, so folding a small
        increment makes every small rebuild pay for the store's size. Redis rewrites on its own
        only past 100% and counts the increments replayed at a start as base, so the sizes are
        read from the files. A rewrite must finish before SHUTDOWN, which would kill it. None
        where nothing was folded."""
        started = time.perf_counter()
        client = self.db.client
        if log_share > 0 and not _rewriting(client):
            base, increment = _log_sizes(self.path)
            if increment <= log_share * base:
                return None
        try:
            client.execute_command("BGREWRITEAOF")
        except Exception as exc:  # one already running (an automatic rewrite) is awaited below
            if "already in progress" not in str(exc):
                self._raise_if_unreachable(exc)
                raise StoreError(f"embedded FalkorDB in {self.path} refused to compact its log: {exc}") from exc
        _await_rewrite(client, self.path)
        return time.perf_counter() - started

    def copy_graph(self, source: str) -> None:
        """GRAPH.COPY, indexes included: the base a diff is applied to. The copy rebuilds an HNSW
        vector index (8-10 s for the 20k-node synthetic KB here, 2 s for the same graph without one)."""
        self._replace_with(source, "copy", lambda: self.db.select_graph(source).copy(self.graph_name))

    def take_graph(self, source: str) -> None:
        """RENAME: the graph moves under this name with its indexes, the vector index included, so
        nothing is copied or rebuilt (a GRAPH.COPY rebuilds the HNSW index)."""
        self._replace_with(
            source, "move", lambda: self.db.connection.execute_command("RENAME", source, self.graph_name)
        )

    def _replace_with(self, source: str, verb: str, command: Callable[[], Any]) -> None:
        """What this store graph held dropped, then `command` makes graph `source` this one."""
        if source == self.graph_name:
            raise StoreError(f"cannot {verb} {source!r} onto itself")
        with contextlib.suppress(Exception):  # nothing there yet
            self.g.delete()
        try:
            command()
        except Exception as exc:
            self._raise_if_unreachable(exc)
            raise StoreError(f"could not {verb} store graph {source!r} to {self.graph_name!r}: {exc}") from exc
        self.g = self.db.select_graph(self.graph_name)

    def drop_graph(self, name: str) -> None:
        if name == self.graph_name:
            raise StoreError(f"refusing to drop {name!r}, the graph this store object serves")
        with contextlib.suppress(Exception):  # gone already
            self.db.select_graph(name).delete()

    def clear(self) -> None:
        try:
            self.g.delete()
        except Exception:
            pass
        self.g = self.db.select_graph(self.graph_name)

    def close(self) -> None:
        """Stop the server with SHUTDOWN NOSAVE, then let redislite tidy up.

        redislite's own close sends SHUTDOWN SAVE: a full RDB snapshot on every close (0.7 s for
        OTT-QA's graph, growing with it) that the server never reads, since it restarts from the
        AOF, which SHUTDOWN flushes anyway. It then polls every 0.2 s until the daemonized server
        has been reaped, which where init is slow to reap (this container) took 1.2-2.5 s after
        the server had already exited.
        """
        db, self.db = getattr(self, "db", None), None
        if db is None:
            return
        from redis.backoff import NoBackoff
        from redis.exceptions import RedisError
        from redis.exceptions import TimeoutError as RedisTimeoutError
        from redis.retry import Retry

        client = db.client
        # SHUTDOWN drops the connection by design; redis-py would retry it with backoff for ~4 s.
        client.set_retry(Retry(NoBackoff(), 0))
        _bound_answers(client, CLOSE_ANSWER_TIMEOUT_S)
        pid = client.pid
        try:
            last_client = client._connection_count() <= 1  # another store object may share this server
        except RedisTimeoutError:
            # A hung server, which redislite's own close would wait on for good: stopped as one that
            # never answered its first ping is. Acknowledged writes are in the AOF.
            log.warning(
                "embedded FalkorDB in %s (pid %s) did not answer within %.0f s: stopped",
                self.path,
                pid,
                CLOSE_ANSWER_TIMEOUT_S,
            )
            _stop_hung_server(self.path)
            with contextlib.suppress(RedisError, OSError):
                db.close()
            return
        except RedisError:
            last_client = False
        if pid and last_client:
            with contextlib.suppress(RedisError, StoreError):  # a rewrite Redis started on its own ends first
                _await_rewrite(client, self.path, timeout_s=600.0)
            with contextlib.suppress(RedisError):
                client.execute_command("SHUTDOWN", "NOSAVE", "NOW", "FORCE")
            if _exited(pid, timeout_s=30.0):
                # The server removed its pidfile, so redislite will find nothing to stop: its
                # settings file (stale now, whichever store object started the server) and socket
                # directory are ours to remove.
                settings, socket_dir = client.settingregistryfile, client.redis_dir
                db.close()
                if settings:
                    Path(settings).unlink(missing_ok=True)
                if socket_dir:
                    shutil.rmtree(socket_dir, ignore_errors=True)
                return
        db.close()


class FalkorServerStore(FalkorStore):
    """A FalkorDB server that several machines share (`store.backend: falkordb-server`,
    `store.url` or $FALKORDB_URL): the same engine and Cypher as the embedded one, reached over
    the network; closing disconnects and leaves the server running."""

    def __init__(self, url: str, graph: str = "sagegraph"):
        from falkordb import FalkorDB

        if not url:
            raise StoreUnavailable("falkordb-server needs store.url or FALKORDB_URL (redis://host:port)")
        self.path = Path(url.split("@")[-1])  # what messages name: never the password
        try:
            self.db = FalkorDB.from_url(url, socket_timeout=SERVER_SOCKET_TIMEOUT_S)
            self.db.connection.ping()
        except Exception as exc:
            raise StoreUnavailable(f"FalkorDB server at {self.path} cannot be reached: {exc}") from exc
        self.graph_name = graph
        self.g = self.db.select_graph(graph)

    def compact(self, log_share: float = 0.0) -> float | None:
        return None  # a shared server's persistence is its operator's

    def close(self) -> None:
        db, self.db = getattr(self, "db", None), None
        if db is not None:
            with contextlib.suppress(Exception):
                db.connection.close()


def _unreachable(exc: Exception) -> bool:
    from redis.exceptions import ConnectionError as RedisConnectionError

    return isinstance(exc, (RedisConnectionError, ConnectionError, OSError))


def _exited(pid: int, timeout_s: float) -> bool:
    """Gone, or a zombie waiting for init to reap it: either way it holds no data and no socket."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            if psutil.Process(pid).status() == psutil.STATUS_ZOMBIE:
                return True
        except psutil.NoSuchProcess:
            return True
        time.sleep(0.01)
    return False
