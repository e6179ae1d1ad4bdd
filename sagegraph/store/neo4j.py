"""Neo4j through the official driver: the production backend (NEO4J_URI, NEO4J_USER, NEO4J_PASSWORD).

The server version is checked on connect (vector indexes need 5.11+), with a clear message.
"""

from __future__ import annotations

import os
from typing import Any

import numpy as np

from sagegraph.errors import CypherInvalid, ReadOnlyViolation, StoreError, StoreUnavailable
from sagegraph.store.base import GraphStore
from sagegraph.store.mapping import NODE_LABEL

MIN_VERSION = (5, 11)
VECTOR_INDEX = "sagegraph_embedding"


def _value(v: Any) -> Any:
    if hasattr(v, "labels") and hasattr(v, "items"):
        out = {k: val for k, val in v.items() if k != "embedding"}
        out["_labels"] = sorted(v.labels)
        return out
    if hasattr(v, "type") and hasattr(v, "items") and hasattr(v, "start_node"):
        out = dict(v.items())
        out["_type"] = v.type
        return out
    if isinstance(v, list):
        return [_value(x) for x in v]
    return v


class Neo4jStore(GraphStore):
    backend = "neo4j"
    vector_literal = "row.embedding"

    def __init__(self, uri: str, user: str, password: str, database: str | None = None):
        import neo4j

        self._neo4j = neo4j
        try:
            self.driver = neo4j.GraphDatabase.driver(uri, auth=(user, password))
            self.driver.verify_connectivity()
            info = self.driver.get_server_info()
        except Exception as exc:
            raise StoreUnavailable(f"cannot connect to Neo4j at {uri}: {exc}") from exc
        self.database = database
        version = tuple(int(x) for x in info.agent.split("/")[-1].split(".")[:2] if x.isdigit())
        if version and version < MIN_VERSION:
            raise StoreError(
                f"Neo4j {info.agent} is too old: sagegraph needs {'.'.join(map(str, MIN_VERSION))}+ for vector indexes"
            )

    @classmethod
    def from_env(cls, database: str | None = None) -> Neo4jStore:
        uri = os.environ.get("NEO4J_URI")
        if not uri:
            raise StoreError("NEO4J_URI is not set (and NEO4J_USER / NEO4J_PASSWORD)")
        return cls(uri, os.environ.get("NEO4J_USER", "neo4j"), os.environ.get("NEO4J_PASSWORD", ""), database)

    def write(self, query: str, params: dict[str, Any] | None = None) -> list[dict[str, Any]]:
        records, _, _ = self.driver.execute_query(query, params or {}, database_=self.database)
        return [{k: _value(v) for k, v in r.items()} for r in records]

    def run_atomically(self, writes) -> int:
        """All writes in one transaction: a diff applied to the database's one graph (Community
        holds one) is seen by readers whole or not at all, and a failure rolls it all back."""
        writes = list(writes)  # the driver retries `work` on a transient error: it must start over

        def work(tx) -> None:
            for w in writes:
                tx.run(w.query, {"rows": w.rows}).consume()

        with self.driver.session(database=self.database) as session:
            session.execute_write(work)
        return sum(w.count for w in writes)

    def _read(
        self, query: str, params: dict[str, Any], timeout_ms: int, max_rows: int
    ) -> tuple[list[dict[str, Any]], bool]:
        neo4j = self._neo4j
        rows: list[dict[str, Any]] = []
        truncated = False
        try:
            # The transaction timeout is the server's; fetch_size keeps the driver from pulling
            # more than the cap before this loop stops reading.
            with self.driver.session(
                database=self.database, default_access_mode=neo4j.READ_ACCESS, fetch_size=max_rows + 1
            ) as session:
                result = session.run(neo4j.Query(query, timeout=timeout_ms / 1000), params)
                for record in result:
                    if len(rows) >= max_rows:
                        truncated = True
                        break
                    rows.append({k: _value(v) for k, v in record.items()})
                result.consume()
        except Exception as exc:
            raise StoreError(f"read query failed: {exc}") from exc
        return rows, truncated

    def ensure_indexes(self, dim: int | None, wait: bool = True) -> None:
        self.write(f"CREATE INDEX sagegraph_node_id IF NOT EXISTS FOR (n:{NODE_LABEL}) ON (n.id)")
        if dim:
            self.write(
                f"CREATE VECTOR INDEX {VECTOR_INDEX} IF NOT EXISTS FOR (n:{NODE_LABEL}) ON (n.embedding) "
                f"OPTIONS {{indexConfig: {{`vector.dimensions`: {int(dim)}, `vector.similarity_function`: 'cosine'}}}}"
            )
            if wait:
                self.await_indexes()
            self._indexes_ready = wait  # a new index may be filling: the next vector query checks again

    def drop_vector_index(self) -> None:
        self.write(f"DROP INDEX {VECTOR_INDEX} IF EXISTS")
        self._indexes_ready = False

    def await_indexes(self, timeout_s: float = 600.0) -> None:
        self.write(f"CALL db.awaitIndexes({int(timeout_s)})")

    def vector_search(self, vector: np.ndarray, k: int) -> list[tuple[str, float]]:
        self.await_indexes_once()
        q = f"CALL db.index.vector.queryNodes('{VECTOR_INDEX}', $k, $v) YIELD node, score RETURN node.id AS id, score"
        rows = self.read(q, {"k": int(k), "v": [float(x) for x in vector]})
        return [(r["id"], float(r["score"])) for r in rows]

    def explain(self, query: str, params: dict[str, Any]) -> None:
        """EXPLAIN plans without running; a query type other than read is refused (a write hidden
        from the text guard, e.g. in a procedure)."""
        neo4j = self._neo4j
        try:
            with self.driver.session(database=self.database, default_access_mode=neo4j.READ_ACCESS) as session:
                summary = session.run("EXPLAIN " + query, params).consume()
        except neo4j.exceptions.ServiceUnavailable as exc:
            raise StoreUnavailable(f"Neo4j cannot be reached: {exc}") from exc
        except neo4j.exceptions.Neo4jError as exc:
            raise CypherInvalid(getattr(exc, "message", None) or str(exc)) from exc
        if summary.query_type not in ("r", None):
            raise ReadOnlyViolation(f"the engine plans this as a {summary.query_type!r} query, not a read")

    def ensure_fulltext(self) -> None:
        self.write("CREATE FULLTEXT INDEX entity_names IF NOT EXISTS FOR (n:Entity) ON EACH [n.name, n.title]")

    def clear(self) -> None:
        self.write("MATCH (n) CALL (n) { DETACH DELETE n } IN TRANSACTIONS OF 10000 ROWS")

    def close(self) -> None:
        self.driver.close()
