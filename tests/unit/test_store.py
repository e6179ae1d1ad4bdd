"""Store contract: the same tests run on embedded FalkorDB and a FalkorDB server always, and on Neo4j
when NEO4J_URI is set."""

import os

import numpy as np
import pytest

from sagegraph.errors import ReadOnlyViolation
from sagegraph.model import DOC_CHUNK, ENTITY, TABLE_CHUNK, Edge, Node
from sagegraph.store import assert_read_only, open_store

BACKENDS = ["falkordb", "falkordb-server"] + (["neo4j"] if os.environ.get("NEO4J_URI") else [])


def _graph():
    nodes = [
        Node(
            "d1",
            DOC_CHUNK,
            "Passage",
            "The Amarin River flows south.",
            "/wiki/Amarin",
            "Amarin River",
            0,
            {"topic": "a river", "entities": {"Amarin River": {}}},
        ),
        Node(
            "d2", DOC_CHUNK, "Passage", "Its delta is wide.", "/wiki/Amarin", "Amarin River", 1, {"topic": "the delta"}
        ),
        Node(
            "t1",
            TABLE_CHUNK,
            "Table",
            "Rivers | Length",
            "rivers_0",
            "List of rivers",
            0,
            {"table_description": "rivers"},
        ),
        Node("k1", ENTITY, "Paper", "title: Graph retrieval", "p1", "Graph retrieval", 0, {}),
    ]
    vecs = np.eye(4, 8, dtype=np.float32)
    edges = [
        Edge("d1", "d2", "NEXT_CHUNK", 1.0, {"source_id": "/wiki/Amarin"}),
        Edge("d1", "t1", "SIMILAR_TOPIC_TITLE", 0.8, {"shared_entities": ["amarin river"]}),
        Edge("k1", "d1", "CITES", 1.0, {}),
    ]
    return nodes, vecs, edges


@pytest.fixture(params=BACKENDS)
def store(request, tmp_path):
    url = request.getfixturevalue("falkordb_server") if request.param == "falkordb-server" else None
    s = open_store(request.param, tmp_path / "store", graph="contract", url=url)
    s.clear()
    yield s
    s.clear()
    s.close()


def _load(store):
    nodes, vecs, edges = _graph()
    store.ensure_indexes(vecs.shape[1])
    store.load_nodes(nodes, vecs, batch_size=2)
    store.load_edges(edges, batch_size=2)
    return nodes, vecs, edges


def test_guard_ignores_keywords_inside_strings():
    assert_read_only("MATCH (n) WHERE n.text CONTAINS 'CREATE a SET' RETURN n // delete later")
    with pytest.raises(ReadOnlyViolation):
        assert_read_only("   ")


def test_falkor_parameter_header_matches_the_client():
    from falkordb.graph import Graph

    from sagegraph.store.falkor import params_header

    params = {
        "rows": [
            {
                "id": 'a"b\\c',
                "props": {"weight": 0.25, "n": 3, "ok": True, "none": None, "tags": ["x", 'y"'], "empty": ""},
            },
            {
                "id": "v",
                "props": {
                    "embedding": np.random.default_rng(0).normal(size=16).astype(np.float32).tolist(),
                    "mixed": [1, 2.5],
                },
            },
        ],
        "k": 5,
    }
    assert params_header(params) == Graph._build_params_header(None, params)


def test_falkor_bulk_edges_refuse_missing_ends_and_bad_weights():
    import pyarrow as pa

    from sagegraph.errors import StoreError
    from sagegraph.store.falkor import edge_literals

    good = {
        "src": ["a", "b"],
        "dst": ["b", "a"],
        "type": ["T", "T"],
        "weight": pa.array([1.0, 0.5], pa.float32()),
        "metadata": ["{}", None],
    }
    assert edge_literals(pa.table(good)).to_pylist()[0] == '{src:"a",dst:"b",props:{weight:1.0,metadata:"{}"}}'
    with pytest.raises(StoreError, match="1 edges have no src"):
        edge_literals(pa.table({**good, "src": ["a", None]}))
    with pytest.raises(StoreError, match="finite"):
        edge_literals(pa.table({**good, "weight": pa.array([1.0, float("nan")], pa.float32())}))


def test_falkor_edge_batches_made_a_span_at_a_time_equal_those_made_at_once(monkeypatch):
    """The literals of a large graph's edges are made a bounded span of rows at a time: the batches
    sent, their types, order and text, are those of one span over the whole table."""
    import pyarrow as pa

    from sagegraph.store import falkor

    rows = 23
    table = pa.table(
        {
            "src": [f"s{k}" for k in range(rows)],
            "dst": [f"d{k % 5}" for k in range(rows)],
            "type": [("A", "B", "C")[k % 3] for k in range(rows)],
            "weight": pa.array([k / 7 for k in range(rows)], pa.float32()),
            "metadata": [None if k % 4 else '{"k": 1}' for k in range(rows)],
        }
    )
    whole = list(falkor.edge_literal_batches(table, batch_size=2))
    monkeypatch.setattr(falkor, "EDGE_SPAN", 3)
    spanned = list(falkor.edge_literal_batches(table, batch_size=2))
    assert [(t, str(text), n) for t, text, n in spanned] == [(t, str(text), n) for t, text, n in whole]
    assert sum(n for _, _, n in spanned) == rows and [t for t, _, _ in spanned][:1] == ["A"]
