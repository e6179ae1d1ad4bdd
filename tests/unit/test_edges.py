import numpy as np
import pytest

from sagegraph.config import EdgeConfig
from sagegraph.construct import edges as edge_construction
from sagegraph.construct.edge_records import MAX_SHARED, extra_for, pair_edge_table
from sagegraph.construct.entities import normalise
from sagegraph.model import DOC_CHUNK, NEXT_CHUNK, SAME_SOURCE, TABLE_CHUNK, Node, table_to_edges


def test_percentile_pruning_keeps_the_top_share_per_signal():
    rng = np.random.default_rng(1)
    values = np.stack([rng.permutation(1000), rng.permutation(1000), rng.permutation(1000)], axis=1).astype(np.float32)
    thr = edge_construction.thresholds_for(values, 95)
    assert np.allclose(thr, np.percentile(np.arange(1000), 95))
    above = values > thr
    assert above.sum(axis=0).tolist() == [50, 50, 50]
    keep_or = edge_construction.select(values, thr, "or")
    keep_and = edge_construction.select(values, thr, "and")
    assert keep_or.sum() == above.any(axis=1).sum() and 50 <= keep_or.sum() <= 150
    assert keep_and.sum() == above.all(axis=1).sum() and keep_and.sum() <= keep_or.sum()
    # a stricter percentile keeps fewer edges, as in SAGE Table 5
    assert edge_construction.select(values, edge_construction.thresholds_for(values, 99), "or").sum() < keep_or.sum()


def test_or_versus_and_on_crafted_signals():
    values = np.array([[0.9, 0.1], [0.1, 0.9], [0.9, 0.9], [0.1, 0.1]], dtype=np.float32)
    thr = np.array([0.5, 0.5], dtype=np.float32)
    assert edge_construction.select(values, thr, "or").tolist() == [True, True, True, False]
    assert edge_construction.select(values, thr, "and").tolist() == [False, False, True, False]


def _synthetic(n, d=32, seed=0, n_entities=None):
    rng = np.random.default_rng(seed)
    centers = rng.normal(size=(max(4, n // 20), d))
    lab = rng.integers(0, len(centers), n)

    def field():
        v = centers[lab] + 0.5 * rng.normal(size=(n, d))
        return (v / np.linalg.norm(v, axis=1, keepdims=True)).astype(np.float32)

    vectors = {f: field() for f in ("content", "topic", "title", "columns")}
    modality = np.where(rng.random(n) < 0.8, DOC_CHUNK, TABLE_CHUNK)
    source = np.array([f"s{i}" for i in range(n)])
    ents = [{f"e{lab[i]}_{rng.integers(0, 5)}", f"g{rng.integers(0, n_entities or n)}"} for i in range(n)]
    Emat, names = edge_construction.entity_matrix(ents)
    return modality, source, vectors, Emat, names


def test_entity_pairs_skip_generic_entities():
    ents = [{"common", f"u{i // 2}"} for i in range(10)]  # 'common' is on every node
    Emat, _ = edge_construction.entity_matrix(ents)
    ids = np.arange(10)
    a, b = edge_construction.entity_pairs(Emat, ids, ids, max_df=5)
    pairs = {tuple(sorted(p)) for p in zip(a.tolist(), b.tolist())}
    assert pairs == {(0, 1), (2, 3), (4, 5), (6, 7), (8, 9)}


def test_entity_pairs_are_every_shared_rare_entity_across_the_two_sides():
    rng = np.random.default_rng(11)
    ents = [{f"e{x}" for x in rng.integers(0, 60, rng.integers(0, 5))} for _ in range(200)]
    Emat, names = edge_construction.entity_matrix(ents)
    A, B = np.arange(0, 150), np.arange(120, 200)  # overlapping sides, as within one modality
    df = {e: sum(e in s for s in ents) for e in names}
    want = sorted(
        (i, j) for e in names if 2 <= df[e] <= 6 for i in A for j in B if i != j and e in ents[i] and e in ents[j]
    )
    a, b = edge_construction.entity_pairs(Emat, A, B, max_df=6)
    assert sorted(zip(a.tolist(), b.tolist())) == want and len(want) > 50  # one pair per shared entity


@pytest.mark.parametrize("n", [300, 70_000])  # 32-bit keys below 65,536 nodes, 64-bit above
def test_canonical_pairs_dedup_and_sort(n):
    rng = np.random.default_rng(n)
    a, b = rng.integers(0, n, 5000), rng.integers(0, n, 5000)
    a, b = np.concatenate([a, b, a]), np.concatenate([b, a, b])
    ca, cb = edge_construction.canonical_pairs(a, b, True, n)
    assert list(zip(ca.tolist(), cb.tolist())) == sorted(
        {(min(x, y), max(x, y)) for x, y in zip(a.tolist(), b.tolist())}
    )
    da, db = edge_construction.canonical_pairs(a, b, False, n)
    assert list(zip(da.tolist(), db.tolist())) == sorted(set(zip(a.tolist(), b.tolist()))) and da.dtype == np.int64


def test_similarity_pair_excludes_same_source_and_orients_cross_modal():
    modality, source, vectors, Emat, names = _synthetic(300, seed=3)
    source[:] = "one"  # everything from one source: only structural edges may link them
    res = edge_construction.similarity_pair(
        (DOC_CHUNK, TABLE_CHUNK), modality, source, vectors, Emat, EdgeConfig(top_m=5)
    )
    assert res.n_candidates == 0
    modality, source, vectors, Emat, names = _synthetic(300, seed=3)
    res = edge_construction.similarity_pair(
        (DOC_CHUNK, TABLE_CHUNK), modality, source, vectors, Emat, EdgeConfig(top_m=5)
    )
    assert (modality[res.a] == DOC_CHUNK).all() and (modality[res.b] == TABLE_CHUNK).all()
    ids = [f"n{i}" for i in range(300)]
    edges = table_to_edges(pair_edge_table(res, ids, Emat, names))
    assert len(edges) == int(res.keep.sum()) > 0
    for e in edges[:20]:
        sig = e.type.removeprefix("SIMILAR_").lower()
        assert sig in e.metadata["passed"] and e.weight == pytest.approx(e.metadata["signals"][sig], abs=1e-3)


def test_a_pair_within_one_modality_keeps_its_direction_when_node_rows_move():
    """Node rows follow the batch names, which change with their members: a rebuild that moved
    the rows must write every unchanged pair as a build before did, or its store difference
    rewrites them all."""
    modality, source, vectors, Emat, names = _synthetic(400, seed=5, n_entities=40)
    ids = [f"n{i}" for i in range(400)]

    def edges(order):
        moved = {field: vecs[order] for field, vecs in vectors.items()}
        res = edge_construction.similarity_pair(
            (DOC_CHUNK, DOC_CHUNK), modality[order], source[order], moved, Emat[order], EdgeConfig(top_m=8)
        )
        table = pair_edge_table(res, [ids[k] for k in order], Emat[order], names)
        return set(zip(table.column("src").to_pylist(), table.column("dst").to_pylist()))

    before, after = edges(np.arange(400)), edges(np.random.default_rng(0).permutation(400))
    assert len(before) > 50 and after == before
    assert any(int(src[1:]) > int(dst[1:]) for src, dst in before)  # some pairs run against row order


def test_edge_table_matches_a_per_edge_reference():
    """The column-wise records agree with the rule written out edge by edge."""
    modality, source, vectors, Emat, names = _synthetic(400, seed=5, n_entities=40)
    res = edge_construction.similarity_pair(
        (DOC_CHUNK, DOC_CHUNK), modality, source, vectors, Emat, EdgeConfig(top_m=8)
    )
    ids = [f"n{i}" for i in range(400)]
    edges = table_to_edges(pair_edge_table(res, ids, Emat, names))
    std = res.values.astype(np.float64).std(axis=0) + 1e-6
    a, b, vals = res.a[res.keep], res.b[res.keep], res.values[res.keep]
    assert len(edges) == len(a) > 50
    for e, i, j, v in zip(edges, a, b, vals):
        passed = [s for k, s in enumerate(res.signals) if v[k] > res.thresholds[k]]
        margins = [(v[k] - res.thresholds[k]) / std[k] if s in passed else -np.inf for k, s in enumerate(res.signals)]
        best = int(np.argmax(margins))
        shared = [names[c] for c in np.intersect1d(Emat[i].indices, Emat[j].indices)][:MAX_SHARED]
        assert (e.src, e.dst) == tuple(sorted((ids[i], ids[j])))  # by node id, not by row
        assert e.type == "SIMILAR_" + res.signals[best].upper() and e.weight == pytest.approx(v[best])
        assert e.metadata["passed"] == passed and e.metadata["shared_entities"] == shared
        assert e.metadata["signals"] == {s: pytest.approx(float(v[k]), abs=1e-4) for k, s in enumerate(res.signals)}
        assert "confidence" not in e.metadata  # corpus-wide: it would change on every edge with any change
    assert any(e.metadata["shared_entities"] for e in edges)


def test_edge_extras_name_join_columns_and_matching_rows():
    def table(i, header, rows, start=0):
        return Node(
            f"t{i}",
            TABLE_CHUNK,
            "table",
            "",
            f"T{i}",
            f"Table {i}",
            0,
            {"header": header, "rows": rows, "row_start": start},
        )

    nodes = [
        Node("d0", DOC_CHUNK, "passage", "Ada Lovelace wrote notes.", "D0", "Ada Lovelace", 0, {}),
        table(
            1,
            ["Name", "Year"],
            [["Ada Lovelace", "1843"], ["Charles Babbage", "1837"], ["Ada Lovelace", "1842"]],
            start=5,
        ),
        table(2, ["name", "Country "], [["x", "y"]]),
    ]
    Emat, names = edge_construction.entity_matrix([{"ada lovelace"}, {"ada lovelace", "charles babbage"}, set()])
    keep = np.array([True])
    res = edge_construction.PairResult(
        (DOC_CHUNK, TABLE_CHUNK),
        ["content"],
        np.array([0]),
        np.array([1]),
        np.array([[0.9]], np.float32),
        np.array([0.5], np.float32),
        keep,
    )
    doc_table = table_to_edges(
        pair_edge_table(res, [n.id for n in nodes], Emat, names, extra_for((DOC_CHUNK, TABLE_CHUNK), nodes))
    )
    assert doc_table[0].metadata["rows"] == [5, 7] and doc_table[0].metadata["shared_entities"] == ["ada lovelace"]
    res = edge_construction.PairResult(
        (TABLE_CHUNK, TABLE_CHUNK),
        ["column"],
        np.array([1]),
        np.array([2]),
        np.array([[0.9]], np.float32),
        np.array([0.5], np.float32),
        keep,
    )
    joins = table_to_edges(
        pair_edge_table(res, [n.id for n in nodes], Emat, names, extra_for((TABLE_CHUNK, TABLE_CHUNK), nodes))
    )
    assert joins[0].metadata["joinable_columns"] == ["Name"] and joins[0].metadata["shared_entities"] == []


def test_row_references_match_the_rule_pair_by_pair():
    """Rows of the table chunk whose normalised cell equals the passage title or a shared entity,
    ascending, at most 10, in absolute row numbers."""
    rng = np.random.default_rng(4)
    words = ["Ada Lovelace", "ada  lovelace!", "Paris", "1843", "Oslo", "x", ""]
    docs = [Node(f"d{i}", DOC_CHUNK, "p", "text", f"D{i}", str(rng.choice(words[:5])), 0, {}) for i in range(30)]
    tables = [
        Node(
            f"t{j}",
            TABLE_CHUNK,
            "t",
            "",
            f"T{j}",
            "",
            0,
            {
                "header": ["a", "b"],
                "row_start": int(rng.integers(0, 9)),
                "rows": [[str(rng.choice(words)), str(rng.choice(words))] for _ in range(int(rng.integers(0, 14)))],
            },
        )
        for j in range(12)
    ]
    nodes = docs + tables
    ents = [{normalise(str(w)) for w in rng.choice(words[:5], 2)} - {""} for _ in nodes]
    Emat, names = edge_construction.entity_matrix(ents)
    a = np.repeat(np.arange(30), 12)
    b = np.tile(np.arange(30, 42), 30)
    res = edge_construction.PairResult(
        (DOC_CHUNK, TABLE_CHUNK),
        ["content"],
        a,
        b,
        np.ones((len(a), 1), np.float32),
        np.zeros(1, np.float32),
        np.ones(len(a), bool),
    )
    edges = table_to_edges(
        pair_edge_table(res, [n.id for n in nodes], Emat, names, extra_for((DOC_CHUNK, TABLE_CHUNK), nodes))
    )
    hits = 0
    for e, i, j in zip(edges, a.tolist(), b.tolist()):
        keys = {normalise(nodes[i].title)} | (ents[i] & ents[j])
        meta = nodes[j].metadata
        want = sorted(
            {
                meta["row_start"] + r
                for r, row in enumerate(meta["rows"])
                for c in row
                if normalise(c) and normalise(c) in keys
            }
        )
        assert e.metadata["rows"] == want[:10]
        hits += bool(want)
    assert 30 < hits < len(edges)


def test_structural_edges():
    edges = edge_construction.structural_edges(["a", "b", "c", "x"], ["s1", "s1", "s1", "s2"], [0, 1, 2, 0])
    nxt = {(e.src, e.dst) for e in edges if e.type == NEXT_CHUNK}
    same = {(e.src, e.dst) for e in edges if e.type == SAME_SOURCE}
    assert nxt == {("a", "b"), ("b", "c")} and same == {("a", "b"), ("a", "c"), ("b", "c")}
    many = edge_construction.structural_edges(
        [f"c{i}" for i in range(30)], ["s"] * 30, list(range(30)), max_same_source=20
    )
    assert sum(e.type == SAME_SOURCE for e in many) == 29


def test_the_gpu_search_is_exact_and_auto_takes_it_when_torch_sees_a_gpu(monkeypatch):
    import faiss

    rng = np.random.default_rng(0)
    base = rng.standard_normal((700, 16)).astype(np.float32)
    query = base[:90] + 0.01 * rng.standard_normal((90, 16)).astype(np.float32)
    flat = faiss.IndexFlatIP(16)
    flat.add(base)
    want = flat.search(query, 7)[1]
    got = edge_construction.exact_search(query, base, 7, device="cpu", block=32)[1]  # blocks of queries, as on a GPU
    assert (np.sort(got, axis=1) == np.sort(want, axis=1)).all()
    params = EdgeConfig()
    monkeypatch.setattr(edge_construction, "gpu_available", lambda: True)
    assert edge_construction.ann_method(50_000, 50_000, params) == "exact-gpu"
    assert edge_construction.ann_method(50_000, 50_000, EdgeConfig(ann="cluster")) == "cluster"  # asked for: kept
    monkeypatch.setattr(edge_construction, "gpu_available", lambda: False)
    assert edge_construction.ann_method(50_000, 50_000, params) == "cluster"


def _with_twins(n: int, d: int = 48, seed: int = 0) -> np.ndarray:
    """Unit vectors in groups, half of each group exact copies: ties at any rank, as tables' column
    lists have."""
    rng = np.random.default_rng(seed)
    groups = rng.standard_normal((n // 12, d)).astype(np.float32)
    x = groups[rng.integers(0, len(groups), n)]
    x += 0.2 * rng.standard_normal((n, d)).astype(np.float32) * (rng.random((n, 1)) < 0.5)
    return x / np.linalg.norm(x, axis=1, keepdims=True)


def _reference_top(query: np.ndarray, base: np.ndarray, m: int) -> list[set[int]]:
    """The m best rows by pair_cosine's scores, ties to the lower row."""
    out = []
    for q in query:
        scores = edge_construction.pair_cosine(q[None, :], base, np.zeros(len(base), np.int64), np.arange(len(base)))
        out.append(set(np.lexsort((np.arange(len(base)), -scores))[:m].tolist()))
    return out


def test_the_top_m_is_the_same_whatever_last_bits_the_search_scores_carry():
    """Two searches that score alike up to rounding, and order ties each its own way, propose the
    same neighbours: those a pair-by-pair score ranks first, ties to the lower row."""
    x = _with_twins(600)
    exact = x @ x.T

    def noisy(seed: int) -> edge_construction.Search:
        jitter = np.random.default_rng(seed).uniform(-3e-7, 3e-7, exact.shape).astype(np.float32)

        def search(query: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
            rows = [int(np.flatnonzero((x == q).all(axis=1))[0]) for q in query]
            scores = exact[rows] + jitter[rows]
            top = np.argsort(-scores, axis=1, kind="stable")[:, :k]
            return np.take_along_axis(scores, top, 1), top

        return search

    first = edge_construction.top_neighbours(x, x, 21, noisy(1))
    second = edge_construction.top_neighbours(x, x, 21, noisy(2))
    assert [set(r) for r in first.tolist()] == [set(r) for r in second.tolist()] == _reference_top(x, x, 21)


@pytest.mark.parametrize("method", ["flat", "cluster", "hnsw"])
def test_candidate_pairs_do_not_depend_on_the_thread_count(method):
    """The flat search's matrix product orders tied twins by its thread count (734 of 150,000 pairs
    apart on a 2-core EPYC before ties were re-scored)."""
    import faiss
    import torch
    from threadpoolctl import threadpool_limits

    x = _with_twins(3000, d=384)
    ids = np.arange(len(x))
    params = EdgeConfig(top_m=50, ann=method, cluster_size=128)
    runs = []
    before = torch.get_num_threads(), faiss.omp_get_max_threads()
    try:
        for threads in (1, 2):
            torch.set_num_threads(threads)
            faiss.omp_set_num_threads(threads)
            with threadpool_limits(threads):
                a, b = edge_construction.ann_pairs(x, ids, x, ids, params)
            runs.append(set(zip(a.tolist(), b.tolist())))
    finally:
        torch.set_num_threads(before[0])
        faiss.omp_set_num_threads(before[1])
    assert len(runs[0]) >= 3000 * 49 and runs[0] == runs[1]


def test_the_gpu_search_proposes_what_the_flat_search_proposes():
    x = _with_twins(900)
    flat = edge_construction.top_neighbours(x, x, 31, edge_construction.searcher(x, "flat", EdgeConfig()))
    on_device = edge_construction.top_neighbours(
        x, x, 31, lambda query, m: edge_construction.exact_search(query, x, m, device="cpu", block=128)
    )
    assert np.array_equal(np.sort(flat, axis=1), np.sort(on_device, axis=1))
    assert [set(r) for r in flat.tolist()] == _reference_top(x, x, 31)


def test_nodes_that_read_alike_are_searched_once_and_taken_in_row_order():
    """Thousands of nodes with one text (one vector) are one distinct vector to the search, not a
    run of ties as long as the KB: each node gets M neighbours, its look-alikes the first rows."""
    rng = np.random.default_rng(3)
    x = rng.standard_normal((5000, 32)).astype(np.float32)
    x[1000:4000] = x[999]  # 3,001 nodes read alike
    x /= np.linalg.norm(x, axis=1, keepdims=True)
    ids = np.arange(len(x))
    a, b = edge_construction.ann_pairs(x, ids, x, ids, EdgeConfig(top_m=20, ann="cluster", cluster_size=64))
    neighbours = {q: set(b[a == q].tolist()) for q in (999, 2500, 3999)}
    lowest = set(range(999, 1020))
    assert all(n == lowest - {q} for q, n in neighbours.items()), neighbours
    assert np.bincount(a, minlength=len(x)).min() >= 20
    twins = _with_twins(900)
    got = edge_construction.ann_pairs(twins, np.arange(900), twins, np.arange(900), EdgeConfig(top_m=30, ann="flat"))
    reference = _reference_top(twins, twins, 31)
    assert all(set(got[1][got[0] == q].tolist()) == reference[q] - {q} for q in range(900))


def test_the_device_check_finds_the_exact_search_proposing_what_flat_proposes():
    from benchmarks.edge_search_devices import compare_vectors

    x = _with_twins(800, d=384)
    modality = np.array([DOC_CHUNK] * 500 + [TABLE_CHUNK] * 300)
    vectors = {field: x for field in ("topic", "content", "columns", "title")}
    rows = compare_vectors(modality, vectors, EdgeConfig(top_m=20, cluster_size=64), "cpu")
    assert len(rows) == 6  # doc-doc, table-table, doc-table: two vector signals each
    assert all(
        row["same_as_flat"]["exact"] == 1.0 and set(row["seconds"]) == {"flat", "cluster", "exact"} for row in rows
    )


def test_the_clustered_search_probing_every_cell_finds_the_exact_neighbours():
    """Probing every cell, the cell-by-cell products and running top m are an exact search: the
    same neighbours and scores as the flat one, and -1 padding where the base holds fewer than m."""
    rng = np.random.default_rng(3)
    base = rng.standard_normal((1200, 32)).astype(np.float32)
    base /= np.linalg.norm(base, axis=1, keepdims=True)
    query = base[:200]
    index = edge_construction.ClusterIndex(base, size=100, probes=12)
    assert index.probes == index.n_cells == 12
    scores, rows = index.search(query, 25)
    exact = query @ base.T
    expected = np.argsort(-exact, axis=1)[:, :25]
    assert all(set(a) == set(b) for a, b in zip(rows.tolist(), expected.tolist()))
    assert np.allclose(np.sort(scores, 1), np.sort(np.take_along_axis(exact, expected, 1), 1), atol=1e-5)
    few = edge_construction.ClusterIndex(base[:10], size=100, probes=4)
    _, padded = few.search(query[:3], 15)
    assert (padded[:, 10:] == -1).all() and all(set(r[:10]) == set(range(10)) for r in padded.tolist())
