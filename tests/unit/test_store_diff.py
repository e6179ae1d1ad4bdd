"""A store graph written as the difference from an earlier generation equals a full load of the new
graph: every node (labels, properties, vector) and every edge (type, weight, metadata)."""

import os

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pytest

from sagegraph.model import DOC_CHUNK, ENTITY, Edge, Node, edges_to_table, nodes_to_table
from sagegraph.store.diff import DICTIONARY_COLUMNS, graph_diff, unique_edges, vector_digests

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


def _diff(old, new, as_read: bool = False):
    (on, ov, oe), (nn, nv, ne) = old, new
    edges = _as_read if as_read else edges_to_table
    return graph_diff(nodes_to_table(on), ov, edges(oe), nodes_to_table(nn), nv, edges(ne))


def _as_read(edges: list[Edge]) -> pa.Table:
    """edges.parquet as `read_generation` reads it: string columns dictionary-encoded, in row
    groups that each have a dictionary of their own."""
    table = edges_to_table(edges)
    half = len(table) // 2
    parts = [table.slice(0, half), table.slice(half)]
    encoded = []
    for part in parts:
        for name in DICTIONARY_COLUMNS:
            at = part.schema.get_field_index(name)
            part = part.set_column(at, name, pc.dictionary_encode(part.column(name)))
        encoded.append(part)
    return pa.concat_tables(encoded)


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


def test_vector_digest_changes_with_any_one_bit():
    vectors = np.random.default_rng(0).standard_normal((50, 384)).astype(np.float32)
    digests = vector_digests(vectors)
    assert len(set(digests.tolist())) == 50 and (vector_digests(vectors.copy()) == digests).all()
    for row, column in [(0, 0), (7, 383), (49, 191)]:
        edited = vectors.copy()
        edited.view(np.uint32)[row, column] ^= 1  # the lowest bit of one float
        changed = vector_digests(edited) != digests
        assert changed[row] and changed.sum() == 1
    assert len(vector_digests(np.zeros((0, 4), np.float32))) == 0


def _reference_diff(old, new) -> dict:
    """What graph_diff must find, by Python sets and dicts over the same graphs."""
    (old_nodes, old_vectors, old_edges), (new_nodes, new_vectors, new_edges) = old, new
    before = {n.id: (n, old_vectors[k].tobytes()) for k, n in enumerate(old_nodes)}
    after = {n.id: (n, new_vectors[k].tobytes()) for k, n in enumerate(new_nodes)}
    changed = {i for i in after.keys() & before.keys() if after[i] != before[i]}
    labels = lambda node: (node.modality, node.type)  # noqa: E731
    relabelled = {i for i in changed if labels(after[i][0]) != labels(before[i][0])}
    gone = (before.keys() - after.keys()) | relabelled
    old_keyed = {(e.src, e.dst, e.type): e for e in old_edges}
    new_keyed = {(e.src, e.dst, e.type): e for e in new_edges}
    position = {n.id: k for k, n in enumerate(new_nodes)}
    return {
        "delete_nodes": gone,
        "write_nodes": sorted(position[i] for i in (after.keys() - before.keys()) | relabelled),
        "update_nodes": sorted(position[i] for i in changed - relabelled),
        "delete_edges": {k for k in old_keyed if k not in new_keyed or k[0] in gone or k[1] in gone},
        "write_edges": {
            k
            for k, e in new_keyed.items()
            if k not in old_keyed
            or (e.weight, e.metadata) != (old_keyed[k].weight, old_keyed[k].metadata)
            or k[0] in relabelled
            or k[1] in relabelled
        },
    }


@pytest.mark.parametrize("as_read", [False, True])
@pytest.mark.parametrize("seed", range(5))
def test_diff_equals_a_reference_on_random_graphs(seed, as_read):
    rng = np.random.default_rng(seed)
    ids = [f"n{k}" for k in range(60)]

    def graph(kept: list[str], renamed: set[str], retyped: set[str], weights: dict, noted: frozenset = frozenset()):
        nodes = [
            _node(i, f"text {i}" + (" renamed" if i in renamed else ""), ENTITY, "B" if i in retyped else "A")
            for i in kept
        ]
        vectors = np.stack([np.full(4, int(i[1:]), np.float32) + (0.5 if i in renamed else 0) for i in kept])
        edges = [
            Edge(s, d, t, w, {"note": 1} if (s, d, t) in noted else {})
            for (s, d, t), w in weights.items()
            if s in kept and d in kept
        ]
        return nodes, vectors, edges

    pairs = {(str(rng.choice(ids)), str(rng.choice(ids)), str(rng.choice(["R", "S"]))) for _ in range(300)}
    weights = {key: float(rng.integers(1, 4)) for key in pairs}
    noted = frozenset(key for key in pairs if rng.random() < 0.1)
    old = graph(ids[:50], set(), set(), weights, noted)
    new_weights = {key: (w + 1 if rng.random() < 0.1 else w) for key, w in weights.items() if rng.random() < 0.9}
    renamed = {i for i in ids if rng.random() < 0.1}
    retyped = {i for i in ids if rng.random() < 0.05}
    kept = [i for i in ids if rng.random() < 0.9]
    new = graph(kept, renamed, retyped, new_weights, frozenset(key for key in pairs if rng.random() < 0.1))
    expected, found = _reference_diff(old, new), _diff(old, new, as_read)
    assert found.counts["edges_changed"] and found.counts["nodes_changed"] and found.counts["nodes_removed"]
    key_set = lambda table: set(zip(*(table.column(c).to_pylist() for c in ("src", "dst", "type"))))  # noqa: E731
    assert set(found.delete_nodes) == expected["delete_nodes"]
    assert found.write_nodes == expected["write_nodes"] and found.update_nodes == expected["update_nodes"]
    assert key_set(found.delete_edges) == expected["delete_edges"]
    assert key_set(found.write_edges) == expected["write_edges"]


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


@pytest.mark.parametrize("as_read", [False, True])
def test_an_edge_without_metadata_equals_one_with_empty_metadata(as_read):
    nodes, vecs, edges = _old()
    plain = (_as_read if as_read else edges_to_table)(edges)
    at = plain.schema.get_field_index("metadata")
    unset = pa.array([None if row == "{}" else row for row in plain.column("metadata").to_pylist()], pa.string())
    without = plain.set_column(at, "metadata", pc.dictionary_encode(unset) if as_read else unset)
    table = nodes_to_table(nodes)
    assert graph_diff(table, vecs, plain, table, vecs, without).empty
    assert graph_diff(table, vecs, without, table, vecs, plain).empty


def test_a_kept_difference_reads_back_whole_and_only_for_its_base(tmp_path):
    """A generation keeps its difference from the one before with just the node rows it writes;
    one from another base, or one that does not read back, is not used."""
    from sagegraph.construct import differences

    new_nodes, new_vectors, _ = _new()
    diff = _diff(_old(), _new())
    kept = differences.Difference("gen-old", diff, nodes_to_table(new_nodes), new_vectors)
    assert differences.keep(tmp_path, kept, graph_rows=100)
    back = differences.load(tmp_path, "gen-old")
    assert back is not None and differences.load(tmp_path, "gen-other") is None
    written = sorted({*diff.write_nodes, *diff.update_nodes})  # e, k and c of the new graph
    assert back.nodes.column("id").to_pylist() == [new_nodes[row].id for row in written]
    assert np.array_equal(back.vectors, new_vectors[written])
    assert [back.nodes.column("id")[row].as_py() for row in back.diff.write_nodes] == ["e", "k"]
    assert [back.nodes.column("id")[row].as_py() for row in back.diff.update_nodes] == ["c"]
    assert back.diff.counts == diff.counts and back.diff.delete_nodes == diff.delete_nodes
    assert back.diff.write_edges.equals(diff.write_edges) and back.diff.delete_edges.equals(diff.delete_edges)
    assert not any(path.name.startswith(".") for path in tmp_path.iterdir())  # no temporary left

    assert differences.keep(tmp_path, kept, graph_rows=100)  # kept already: left as it is
    other = differences.Difference("gen-other", diff, nodes_to_table(new_nodes), new_vectors)
    assert differences.keep(tmp_path, other, graph_rows=100)  # from another base: replaced
    assert differences.load(tmp_path, "gen-other") is not None and differences.load(tmp_path, "gen-old") is None
    assert not any(path.name.startswith(".") for path in tmp_path.iterdir())

    (tmp_path / differences.FOLDER / "vectors.npy").write_bytes(b"not an array")
    assert differences.load(tmp_path, "gen-other") is None
    # too large a share of its graph to be worth keeping: none kept (the old one is replaced only by a whole one)
    assert not differences.keep(tmp_path / "other", kept, graph_rows=10)
    assert not (tmp_path / "other" / differences.FOLDER).exists()
