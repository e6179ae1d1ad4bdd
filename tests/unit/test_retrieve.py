import numpy as np
import pytest

from sagegraph.errors import SageGraphError
from sagegraph.graph import Adjacency
from sagegraph.retrieve import get_retriever, retriever_names
from sagegraph.retrieve.base import Resources, Retrieval
from sagegraph.retrieve.fusion import fuse, minmax, rank
from sagegraph.retrieve.graph_index import GraphIndex
from sagegraph.retrieve.sage import SageParams, SageRetriever


@pytest.fixture(scope="module")
def g(graph_dir, encoder):
    return GraphIndex(graph_dir, encoder=encoder)


def test_adjacency_one_hop_excludes_seeds_and_filters_types():
    adj = Adjacency.from_edges(5, np.array([0, 0, 1, 3]), np.array([1, 2, 3, 4]), ["A", "B", "A", "B"])
    assert adj.degree(0) == 2 and adj.degree(1) == 2
    assert adj.one_hop(np.array([0, 1])).tolist() == [2, 3]
    assert adj.one_hop(np.array([0]), {"A"}).tolist() == [1]
    assert adj.one_hop(np.array([], dtype=np.int64)).tolist() == []


def test_fusion_and_deterministic_ties():
    assert minmax(np.array([2.0, 4.0, 3.0])).tolist() == [0.0, 1.0, 0.5]
    assert minmax(np.array([1.0, 1.0])).tolist() == [0.0, 0.0]
    f = fuse(np.array([0.0, 10.0]), np.array([1.0, 0.0]), alpha=0.6)
    assert f.tolist() == pytest.approx([0.4, 0.6])
    # equal scores: the smaller id wins
    assert rank(np.array([0.5, 0.9, 0.5]), np.array([7, 3, 2]), 3).tolist() == [1, 2, 0]


def test_registry_lists_and_rejects_names(g):
    assert {"bm25", "dense", "hybrid", "sage"} <= set(retriever_names())
    with pytest.raises(SageGraphError, match="unknown retriever 'nope'; registered: af, bm25, dense"):
        get_retriever("nope", g)
    with pytest.raises(SageGraphError, match="empty question"):
        get_retriever("bm25", g).search("   ", 5)


@pytest.mark.parametrize("name", ["bm25", "dense", "hybrid"])
def test_flat_retrievers_find_the_named_passage(g, name):
    r = get_retriever(name, g).search("the Amarin River flows through a wide valley", 5)
    assert len(r) == 5 and "/wiki/Amarin_River" in [g.source_ids[i] for i in r.idx[:3]]
    assert np.all(np.diff(r.scores) <= 1e-6) and r.found_by == [name] * 5


def test_hybrid_alpha_extremes_match_single_signals(g):
    q = "symphony premiered in 1911 conservatory harmony"
    lexical = get_retriever("hybrid", g, alpha=1.0).search(q, 3)
    bm25 = get_retriever("bm25", g).search(q, 3)
    assert lexical.idx.tolist() == bm25.idx.tolist()
    with pytest.raises(SageGraphError, match="alpha"):
        get_retriever("hybrid", g, alpha=1.5)


def test_sage_returns_seeds_then_reranked_neighbours(g):
    sage = get_retriever("sage", g, k_prime=4)
    seeds = sage.seed.search("Riverton Rovers football club national cup", 3)
    r = sage.search("Riverton Rovers football club national cup", 3)
    assert r.idx[:3].tolist() == seeds.idx.tolist() and r.found_by[:3] == ["hybrid"] * 3
    added = r.idx[3:]
    assert 0 < len(added) <= 4 and r.found_by[3:] == ["neighbour"] * len(added)
    hood = set(g.adjacency.one_hop(seeds.idx).tolist())
    assert set(added.tolist()) <= hood and not set(added.tolist()) & set(seeds.idx.tolist())
    assert r.trace["neighbourhood"] == len(hood) and np.all(np.diff(r.scores) <= 0)


def test_sage_short_neighbourhood_is_reported_not_an_error(g):
    r = get_retriever("sage", g, k_prime=10_000).search("Crimson Valley drama film", 2)
    assert r.trace["short_neighbourhood"] and len(r) == 2 + r.trace["neighbourhood"]


def test_minus_edge_policy_skips_expansion_for_edge_constrained_seeds(g):
    class Constrained:
        def search(self, query, k):
            return Retrieval(
                np.array([0, 1]), np.array([1.0, 0.5], np.float32), ["cypher"] * 2, {"edge_constrained": True}
            )

    minus = SageRetriever(Resources(g), SageParams(k_prime=5, policy="-edge"), seed=Constrained())
    plus = SageRetriever(Resources(g), SageParams(k_prime=5, policy="+edge"), seed=Constrained())
    assert len(minus.search("anything", 2)) == 2 and minus.search("anything", 2).trace["expanded"] is False
    assert len(plus.search("anything", 2)) > 2


def test_query_vector_dimension_mismatch_is_clear(graph_dir):
    class Tiny:
        name = "tiny"
        dim = 8

        def encode(self, texts):
            return np.ones((len(texts), 8), np.float32)

    with pytest.raises(SageGraphError, match="8-d vectors, the graph was built with 384-d"):
        get_retriever("dense", GraphIndex(graph_dir, encoder=Tiny())).search("x", 3)


def test_missing_graph_is_a_clear_error(tmp_path):
    with pytest.raises(SageGraphError, match="no built graph here"):
        GraphIndex(tmp_path)


def test_building_a_bm25_index_prints_no_debug_chatter():
    """A handler on the root logger (as `sagegraph` sets up) prints what reaches it at any level."""
    import logging

    from sagegraph.index.bm25 import BM25Index

    seen: list[logging.LogRecord] = []
    handler = logging.Handler()
    handler.emit = seen.append
    logging.getLogger().addHandler(handler)
    try:
        BM25Index.build(["a cat sat", "a dog ran", "the bird flew"])
    finally:
        logging.getLogger().removeHandler(handler)
    assert not [r for r in seen if r.name.startswith("bm25s") and r.levelno < logging.WARNING]


def test_a_retriever_in_another_package_registers_through_an_entry_point(tmp_path, monkeypatch):
    """A fifth retriever needs no edit of sagegraph: its distribution names its module in the
    `sagegraph.retrievers` entry-point group, and the registry imports it on first lookup."""
    import sys
    from importlib.metadata import EntryPoint

    from sagegraph.retrieve import registry

    (tmp_path / "sg_plugin_retriever.py").write_text(
        "from sagegraph.retrieve.flat import BM25Retriever\n"
        "from sagegraph.retrieve.registry import register\n\n\n"
        "@register('plugin-bm25')\n"
        "class PluginBM25(BM25Retriever):\n"
        "    pass\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setattr(
        registry,
        "entry_points",
        lambda group: (
            [EntryPoint("plugin-bm25", "sg_plugin_retriever", group)] if group == registry.ENTRY_POINTS else []
        ),
    )
    monkeypatch.setattr(registry, "_loaded", False)
    try:
        assert "plugin-bm25" in retriever_names() and {"bm25", "sage", "spark"} <= set(retriever_names())
        assert registry.retriever_class("plugin-bm25").name == "plugin-bm25"
    finally:
        registry.REGISTRY.pop("plugin-bm25", None)
        sys.modules.pop("sg_plugin_retriever", None)
