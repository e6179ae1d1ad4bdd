"""A store graph written as the difference from an earlier generation equals a full load of the new
graph: every node (labels, properties, vector) and every edge (type, weight, metadata)."""

import os

import numpy as np
import pytest

from sagegraph.model import DOC_CHUNK, ENTITY, Edge, Node, edges_to_table, nodes_to_table
from sagegraph.store.diff import graph_diff, unique_edges

BACKENDS = ["falkordb", "falkordb-server"] + (["neo4j"] if os.environ.get("NEO4J_URI") else [])


def _node(i: str, text: str, kind: str = DOC_CHUNK, ntype: str = "Passage", fields: dict | None = None) -> Node:
    meta = {"topic": f"topic {i}"} | ({"fields": fields} if fields else {})
    return Node(i, kind, ntype, text, f"src-{i}", f"title {i}", 0, meta)


def _old():
    nodes = [
        _node("a", "alpha"),
        _node("b", "beta"),
        _node("c", "gamma"),
        _node("d", "delta"),
        _node("k", "kb", ENTITY, "Paper", {"year": 2001, "venue": "X"}),
    ]
    vecs = np.arange(len(nodes) * 4, dtype=np.float32).reshape(len(nodes), 4) / 10
    edges = [
        Edge("a", "b", "NEXT_CHUNK", 1.0, {}),
        Edge("b", "c", "SIMILAR", 0.5, {"s": 1}),
        Edge("c", "d", "SIMILAR", 0.7, {}),
        Edge("k", "a", "CITES", 1.0, {}),
        Edge("d", "a", "SIMILAR", 0.2, {}),
    ]
    return nodes, vecs, edges


def _new():
    """From _old: d removed, e added, c's text changed (same id: re-created), k's fields changed
    and its type (label) with them, b-c's weight changed, a-b kept, c-d gone with d, e-a added."""
    nodes = [
        _node("a", "alpha"),
        _node("b", "beta"),
        _node("c", "gamma, edited"),
        _node("e", "epsilon"),
        _node("k", "kb", ENTITY, "Article", {"year": 2002}),
    ]
    vecs = np.arange(len(nodes) * 4, dtype=np.float32).reshape(len(nodes), 4) / 10
    vecs[3] += 7  # e's own vector
    edges = [
        Edge("a", "b", "NEXT_CHUNK", 1.0, {}),
        Edge("b", "c", "SIMILAR", 0.6, {"s": 1}),
        Edge("k", "a", "CITES", 1.0, {}),
        Edge("e", "a", "SIMILAR", 0.9, {}),
        Edge("c", "a", "SIMILAR", 0.3, {}),
    ]
    return nodes, vecs, edges


def _diff(old, new):
    (on, ov, oe), (nn, nv, ne) = old, new
    return graph_diff(nodes_to_table(on), ov, edges_to_table(oe), nodes_to_table(nn), nv, edges_to_table(ne))


def test_diff_counts_what_changed():
    d = _diff(_old(), _new())
    assert d.counts == {
        "nodes_added": 1,
        "nodes_removed": 1,
        "nodes_changed": 2,
        "edges_added": 2,
        "edges_changed": 1,
        "edges_removed": 2,
    }
    assert sorted(d.delete_nodes) == ["d", "k"]  # gone, or re-created because their labels changed
    assert d.write_nodes == [3, 4]  # e, k in the new graph's order
    assert d.update_nodes == [2]  # c: its text changed, its labels did not; its edges stay
    # added (e-a, c-a), changed (b-c) and unchanged but touching a re-created node (k-a); a-b stays as it is
    written = sorted(zip(d.write_edges.column("src").to_pylist(), d.write_edges.column("dst").to_pylist()))
    assert written == [("b", "c"), ("c", "a"), ("e", "a"), ("k", "a")]
    # every old edge of a node deleted or re-created goes by its key, a bounded batch at a time,
    # before the node (k-a: a re-created end; c-d, d-a: gone); a-b and b-c (its weight written in place) stay
    deleted = sorted(zip(d.delete_edges.column("src").to_pylist(), d.delete_edges.column("dst").to_pylist()))
    assert deleted == [("c", "d"), ("d", "a"), ("k", "a")]
    assert d.writes == 2 + 2 + 1 + 3 + 4


def test_diff_of_a_graph_with_itself_is_empty():
    old = _old()
    assert _diff(old, old).empty


def test_repeated_edge_key_is_detected():
    _, _, edges = _old()
    assert unique_edges(edges_to_table(edges)) and not unique_edges(edges_to_table(edges + edges[:1]))
    nodes, vecs, _ = _old()
    twice = edges_to_table(edges + edges[:1])
    assert graph_diff(nodes_to_table(nodes), vecs, edges_to_table(edges), nodes_to_table(nodes), vecs, twice) is None
    assert graph_diff(nodes_to_table(nodes), vecs, twice, nodes_to_table(nodes), vecs, edges_to_table(edges)) is None


def test_diff_from_an_empty_graph_writes_everything():
    nodes, vecs, edges = _new()
    empty = _diff(([], np.zeros((0, 4), np.float32), []), (nodes, vecs, edges))
    assert empty.write_nodes == list(range(len(nodes))) and len(empty.write_edges) == len(edges)
    assert empty.counts["edges_added"] == len(edges) and not empty.delete_nodes


def _dump(store) -> tuple[list, list]:
    nodes = store.read("MATCH (n) RETURN n.id AS id, labels(n) AS labels, n AS n ORDER BY id")
    edges = store.read(
        "MATCH (a)-[r]->(b) RETURN a.id AS a, type(r) AS t, b.id AS b, r.weight AS w, r.metadata AS m ORDER BY a, t, b"
    )
    return [
        (r["id"], sorted(r["labels"]), sorted((k, str(v)) for k, v in r["n"].items() if k != "_labels")) for r in nodes
    ], edges


def _embeddings(store) -> dict[str, list[float]]:
    rows = store.read("MATCH (n) RETURN n.id AS id, n.embedding AS e")
    return {r["id"]: [round(float(x), 5) for x in r["e"]] for r in rows}


@pytest.fixture(params=BACKENDS)
def backend(request):
    url = request.getfixturevalue("falkordb_server") if request.param == "falkordb-server" else None
    return request.param, url


def _load(store, graph):
    nodes, vecs, edges = graph
    store.ensure_indexes(None)
    store.load_nodes(nodes, vecs, batch_size=2)
    store.load_edge_table(edges_to_table(edges), batch_size=2)
