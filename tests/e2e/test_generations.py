"""The end-to-end half of tests/unit/test_generations.py: servers, subprocesses or whole builds."""

from __future__ import annotations

import json
import os

import numpy as np
import pytest

from sagegraph.config import load_config
from sagegraph.construct import generations
from sagegraph.construct.artifacts import Layout
from sagegraph.construct.stages import rollback_graph, up_to_date
from tests.fixtures import run_all, write_config
from tests.unit.test_generations import _assert_store_holds, _docs, _write


@pytest.mark.parametrize("backend", ["falkordb", "falkordb-server"])
def test_a_rebuild_loads_beside_the_graph_in_use_and_rollback_brings_it_back(backend, tmp_path, request):
    """The store graph a reader opened keeps answering through a rebuild of a changed corpus; the
    new graph is published with its own store graph; `--rollback` returns readers to the old
    graph and its store load; a third build drops the oldest generation on disk and in the store."""
    from sagegraph.retrieve.graph_index import GraphIndex
    from sagegraph.retrieve.resources import open_resources
    from sagegraph.store import open_store

    docs = tmp_path / "docs.jsonl"
    _write(docs, _docs(12))
    url = request.getfixturevalue("falkordb_server") if backend == "falkordb-server" else None
    store = {
        "backend": backend,
        "update": "difference",
        "vector_index": True,
        **({"url": url, "graph": f"gen-{tmp_path.name}"} if url else {}),
    }
    cfg = load_config(
        write_config(tmp_path / "c.yaml", {"kind": "generic", "documents": str(docs)}, tmp_path / "out", store=store)
    )
    first = run_all(cfg)
    reader = open_resources(GraphIndex(cfg.out / "graph"))
    before = reader.store.count_nodes()
    old_gen = reader.graph.dir

    _write(docs, _docs(14))
    second = run_all(cfg)  # the reader's store graph is not touched while the new one loads
    assert reader.store.count_nodes() == before == len(reader.graph.ids)
    assert second["store"]["graph"] != first["store"]["graph"] and second["store"]["nodes"] > before
    now = open_resources(GraphIndex(cfg.out / "graph"))
    assert now.graph.dir != old_gen and now.store.count_nodes() == second["store"]["nodes"]
    assert up_to_date(second["cfg"]) is not None
    now.close()
    now.graph.close()  # done reading: its generation may be retired by a later publication
    reader.close()

    rec = rollback_graph(cfg)
    assert generations.published(cfg.out) == old_gen and rec["previous"] == Layout.of(second["cfg"]).graph.name
    back = open_resources(GraphIndex(cfg.out / "graph"))
    assert back.store.count_nodes() == before  # the old graph's own store load, checked whole
    assert json.loads((cfg.out / "stats" / "graph_stats.json").read_text())["nodes"] == before  # and its statistics
    back.close()
    assert up_to_date(second["cfg"]) is None  # not published: the next build publishes it again

    _write(docs, _docs(13))
    third = run_all(cfg)
    # the generation kept for a rollback (the second, rolled back from) gives its store graph over:
    # one document fewer than it held, written as the difference, and the store graph holds exactly
    # the new generation's nodes and edges
    assert third["store"]["mode"] == "difference" and third["store"]["base"] == Layout.of(second["cfg"]).graph.name
    assert third["store"]["base_published"] is False
    assert third["store"]["through"] == []  # the first generation keeps no difference from the second
    assert third["store"]["difference"]["nodes_removed"] > 0 and third["store"]["difference"]["nodes_added"] == 0
    _assert_store_holds(backend, cfg.out / "store", third["store"]["graph"], url, Layout.of(third["cfg"]).graph)
    with open_store(backend, cfg.out / "store", third["store"]["graph"], url=url) as s:
        # dropped before the difference was written (FalkorDB grows the index inside the write that
        # crosses its capacity, past the per-query memory bound), declared again after it
        assert "embedding" in s._index_fields()
        assert s.vector_search(np.load(Layout.of(third["cfg"]).graph / "vectors" / "content.npy")[0], 1)
    kept = {p.name for p in (cfg.out / "graphs").iterdir() if p.is_dir()}
    assert kept == {Layout.of(third["cfg"]).graph.name, old_gen.name}  # the rolled-back-from one is retired
    with open_store(backend, cfg.out / "store", third["store"]["graph"], url=url) as s:
        graphs = set(s.graphs())
    assert second["store"]["graph"] not in graphs and {first["store"]["graph"], third["store"]["graph"]} <= graphs


@pytest.mark.skipif(
    not os.environ.get("NEO4J_URI"), reason="needs a Neo4j server (NEO4J_URI, NEO4J_USER, NEO4J_PASSWORD)"
)
def test_neo4j_holds_one_graph_changed_by_difference_in_one_transaction(tmp_path):
    """Neo4j Community holds one graph per database: a rebuild writes the difference in place in
    one transaction, and a rollback writes it back; the store holds exactly the published
    generation after each."""
    docs = tmp_path / "docs.jsonl"
    _write(docs, _docs(12))
    cfg = load_config(
        write_config(
            tmp_path / "c.yaml",
            {"kind": "generic", "documents": str(docs)},
            tmp_path / "out",
            store={"backend": "neo4j"},
        )
    )
    first = run_all(cfg)
    old_gen = generations.published(cfg.out)
    _write(docs, _docs(13))
    second = run_all(cfg)
    assert second["store"]["mode"] == "difference" and second["store"]["base"] == old_gen.name
    _assert_store_holds("neo4j", cfg.out / "store", second["store"]["graph"], None, Layout.of(second["cfg"]).graph)
    rollback_graph(cfg)
    assert generations.published(cfg.out) == old_gen
    _assert_store_holds("neo4j", cfg.out / "store", first["store"]["graph"], None, old_gen)


def test_a_rebuild_takes_over_the_rollback_graph_unless_it_is_read_and_a_rollback_reloads_it(tmp_path, monkeypatch):
    """By default (`update: auto`) FalkorDB's third build writes its difference into the store graph
    of the generation kept for a rollback, taken over under its own name (no copy, no whole load),
    and the store then holds exactly the new graph. One a reader holds is left alone (the new graph
    loads whole). A build that stops after taking a graph over leaves that generation without one:
    rolling back to it loads it again, whole."""
    from sagegraph.construct import differences
    from sagegraph.retrieve.graph_index import GraphIndex
    from sagegraph.store.base import GraphStore

    monkeypatch.setattr(differences, "LARGEST_SHARE", 1.0)  # a document in twelve changes most of so small a graph
    docs = tmp_path / "docs.jsonl"
    cfg = load_config(write_config(tmp_path / "c.yaml", {"kind": "generic", "documents": str(docs)}, tmp_path / "out"))
    builds = []
    for n in (12, 14, 13):
        _write(docs, _docs(n))
        builds.append(run_all(cfg))
    first, second, third = builds
    assert second["store"]["mode"] == "full"  # no rollback generation yet: loaded whole beside the first
    assert third["store"]["mode"] == "difference" and third["store"]["base_published"] is False
    assert third["store"]["base"] == Layout.of(first["cfg"]).graph.name
    # brought forward by the second generation's kept difference from the first, then by its own
    assert third["store"]["through"] == [Layout.of(second["cfg"]).graph.name]
    _assert_store_holds("falkordb", cfg.out / "store", third["store"]["graph"], None, Layout.of(third["cfg"]).graph)

    reader = GraphIndex(cfg.out / "graphs" / Layout.of(second["cfg"]).graph.name)  # holds the rollback generation
    _write(docs, _docs(15))
    fourth = run_all(cfg)
    assert fourth["store"]["mode"] == "full"
    reader.close()

    def stop(*args, **kwargs):
        raise RuntimeError("stopped while writing the difference")

    monkeypatch.setattr(GraphStore, "apply_diff", stop)
    _write(docs, _docs(11))
    with pytest.raises(RuntimeError):
        run_all(cfg)  # took the rollback generation's (the third's) store graph, then stopped
    monkeypatch.undo()
    rollback_graph(cfg)
    back = Layout.of(third["cfg"]).graph
    assert generations.published(cfg.out) == back
    _assert_store_holds("falkordb", cfg.out / "store", third["store"]["graph"], None, back)


def test_a_difference_the_engine_refuses_loads_the_graph_whole(tmp_path, monkeypatch):
    """A write of the difference the store refuses (FalkorDB's per-query memory bound, at scale)
    does not stop the rebuild: the taken graph is cleared and the new one loaded whole."""
    from sagegraph.errors import StoreError
    from sagegraph.store.base import GraphStore

    docs = tmp_path / "docs.jsonl"
    cfg = load_config(write_config(tmp_path / "c.yaml", {"kind": "generic", "documents": str(docs)}, tmp_path / "out"))
    for n in (12, 14):
        _write(docs, _docs(n))
        run_all(cfg)

    def refuse(*args, **kwargs):
        raise StoreError("FalkorDB refused a write: Query's mem consumption exceeded capacity")

    monkeypatch.setattr(GraphStore, "apply_diff", refuse)
    _write(docs, _docs(13))
    third = run_all(cfg)
    assert third["store"]["mode"] == "full"
    _assert_store_holds("falkordb", cfg.out / "store", third["store"]["graph"], None, Layout.of(third["cfg"]).graph)
