"""The build stages end to end on a generated corpus: outputs, idempotence, resume after a failure."""

import json

import numpy as np
import pyarrow.parquet as pq
import pytest

from sagegraph.config import load_config
from sagegraph.construct import stages as build_stages
from sagegraph.errors import StoreError
from sagegraph.model import read_edges, read_nodes
from tests.fake_openai import FakeOpenAI, completion
from tests.fixtures import run_all, write_config


@pytest.fixture(scope="module")
def built(ottqa_dir, tmp_path_factory):
    tmp = tmp_path_factory.mktemp("build")
    cfg = load_config(write_config(tmp / "c.yaml", {"kind": "ottqa", "path": str(ottqa_dir)}, tmp / "out"))
    return cfg, run_all(cfg)


def test_build_writes_nodes_edges_vectors_store_and_stats(built):
    cfg, res = built
    g = cfg.out / "graph"
    nodes = read_nodes(g / "nodes.parquet")
    mods = {n.modality for n in nodes}
    assert mods == {"doc_chunk", "table_chunk"}
    assert len({n.id for n in nodes}) == len(nodes)
    for f in ("content", "topic", "title", "columns"):
        v = np.load(g / "vectors" / f"{f}.npy")
        assert v.shape == (len(nodes), 384) and np.allclose(np.linalg.norm(v, axis=1), 1, atol=1e-3)
    edges = read_edges(g / "edges.parquet")
    types = {e.type for e in edges}
    assert {"SAME_SOURCE", "NEXT_CHUNK"} & types and any(t.startswith("SIMILAR_") for t in types)
    table_doc = [e for e in edges if e.type.startswith("SIMILAR_") and e.src.startswith("d") and e.dst.startswith("t")]
    assert table_doc and all("rows" in e.metadata and "shared_entities" in e.metadata for e in table_doc)
    assert res["store"]["nodes"] == len(nodes) and res["store"]["edges"] == len(edges)
    stats = json.loads((cfg.out / "stats" / "graph_stats.json").read_text())
    assert stats["nodes"] == len(nodes) and stats["edges"] == len(edges)
    assert set(stats["pairs"]) == {"doc_chunk-doc_chunk", "doc_chunk-table_chunk", "table_chunk-table_chunk"}
    sig = stats["pairs"]["doc_chunk-doc_chunk"]
    assert set(sig["signals"]) == {"topic", "content", "entity"} and "correlation" in sig
    assert all((cfg.out / "stats" / p.split("/")[-1]).exists() for p in stats["plots"])


def test_rebuild_is_idempotent_and_reuses_everything(built):
    cfg, first = built
    before = pq.read_table(cfg.out / "graph" / "edges.parquet")
    again = run_all(cfg)
    assert all(c["resumed"] for c in again["chunks"] + again["metas"] + again["vecs"] + again["pairs"])
    assert again["store"]["resumed"] and again["store"]["nodes"] == first["store"]["nodes"]
    assert pq.read_table(cfg.out / "graph" / "edges.parquet").equals(before)


def test_resume_after_injected_failure_never_repeats_llm_calls(ottqa_dir, tmp_path, monkeypatch):
    def reply(body):
        user = body["messages"][-1]["content"]
        if "Rows (JSON)" in user:
            return 200, completion(json.dumps({"table_title": "t", "col_desc": {}, "entities": {}}))
        return 200, completion(json.dumps({"entities": {"X": {"details": []}}, "topic": "a topic"}))

    with FakeOpenAI(reply) as server:
        cfg = load_config(
            write_config(
                tmp_path / "c.yaml",
                {"kind": "ottqa", "path": str(ottqa_dir)},
                tmp_path / "out",
                metadata={"mode": "llm"},
                llm={"base_url": server.base_url, "model": "m"},
            )
        )
        real = build_stages.embed_batch
        calls = {"n": 0}

        def failing(cfg_, path):
            calls["n"] += 1
            if calls["n"] == 2:
                raise RuntimeError("injected crash in the second embed batch")
            return real(cfg_, path)

        monkeypatch.setattr(build_stages, "embed_batch", failing)
        with pytest.raises(RuntimeError, match="injected"):
            run_all(cfg)
        paid = len(server.requests)
        assert paid > 0
        monkeypatch.setattr(build_stages, "embed_batch", real)
        res = run_all(cfg)
    assert len(server.requests) == paid  # nothing asked twice
    assert all(c["resumed"] for c in res["chunks"] + res["metas"])
    assert [v["resumed"] for v in res["vecs"]][:2] == [True, False]
    assert res["store"]["nodes"] > 0


def test_changed_config_builds_alongside_without_losing_the_old(built):
    cfg, _ = built
    old = sorted(p.name for p in (cfg.out / "stages").iterdir())
    cfg2 = cfg.model_copy(deep=True)
    cfg2.edges.percentile = 80
    res = run_all(cfg2)
    new = sorted(p.name for p in (cfg.out / "stages").iterdir())
    assert set(old) < set(new)  # a new edges-<fp> dir; the old one is kept
    assert all(c["resumed"] for c in res["chunks"] + res["metas"] + res["vecs"])
    assert not res["pairs"][0]["resumed"]
    assert res["store"]["resumed"] is False  # a different graph replaces the loaded one


def test_a_new_edge_code_version_redoes_edges_and_store_only(built, monkeypatch):
    """An upgrade whose edge code writes different edges must not resume the old ones."""
    from sagegraph.construct import artifacts

    cfg, _ = built
    before = artifacts.Layout.of(cfg).cfg_fp
    monkeypatch.setitem(artifacts.CODE_VERSIONS, "edges", artifacts.CODE_VERSIONS["edges"] + 1)
    after = artifacts.Layout.of(cfg).cfg_fp
    assert after["edges"] != before["edges"] and all(
        after[s] == before[s] for s in ("sources", "chunks", "metadata", "vectors")
    )
    res = run_all(cfg)
    assert all(c["resumed"] for c in res["chunks"] + res["metas"] + res["vecs"])
    assert not any(p["resumed"] for p in res["pairs"]) and res["store"]["resumed"] is False


def test_kb_build_keeps_native_edges(kb_dir, tmp_path):
    cfg = load_config(
        write_config(
            tmp_path / "c.yaml", {"kind": "kb", "path": str(kb_dir)}, tmp_path / "out", store={"backend": "none"}
        )
    )
    res = run_all(cfg)
    edges = read_edges(cfg.out / "graph" / "edges.parquet")
    native = [e for e in edges if e.type in {"AUTHORED", "CITES", "HAS_FIELD"}]
    assert len(native) == 6
    nodes = read_nodes(cfg.out / "graph" / "nodes.parquet")
    assert {n.type for n in nodes} == {"Paper", "Author", "FieldOfStudy"} and res["stats"]["summary"][
        "nodes_by_modality"
    ] == {"entity": 6}


def test_store_load_completes_a_load_cut_short(built, tmp_path):
    """A fresh store gets CREATE; one a crashed run left half-loaded (no marker) is completed by
    MERGE, so nothing is doubled."""
    from sagegraph.store import open_store
    from sagegraph.store.loaded import store_key

    cfg, first = built
    cfg2 = cfg.model_copy(deep=True)
    cfg2.store.path = tmp_path / "store"
    g = build_stages.Layout.of(cfg2).graph
    if not (g / "edges.parquet").exists():  # tests above published others since, and the oldest is dropped
        run_all(cfg)
    key = store_key(
        "falkordb", cfg2.store.graph, build_stages.Layout.of(cfg2).cfg_fp["edges"]
    )  # this generation's store graph
    nodes = read_nodes(g / "nodes.parquet")
    vectors = np.load(g / "vectors" / "content.npy")
    edges = pq.read_table(g / "edges.parquet")
    with open_store("falkordb", cfg2.store.path, key) as s:  # the crashed run got this far
        s.load_nodes(nodes[: len(nodes) // 2], vectors[: len(nodes) // 2], create=True)
    res = build_stages.load_store(cfg2)
    assert not res["resumed"] and (res["nodes"], res["edges"]) == (len(nodes), edges.num_rows) and res["graph"] == key
    with open_store("falkordb", cfg2.store.path, key) as s:
        assert (
            s.read("MATCH (n:Node) WITH n.id AS id, count(*) AS c WHERE c > 1 RETURN count(id) AS dup")[0]["dup"] == 0
        )
        assert s._index_fields() == {"id"}  # no vector index unless `store.vector_index` asks for one
        with pytest.raises(StoreError, match="store.vector_index"):
            s.vector_search(vectors[3], 1)
