"""A rebuild never shows readers a half-built graph: the new graph is written and loaded beside the
one in use, published in one step, the one before is kept for `--rollback`, and older ones go."""

import json
import os

import pytest

from sagegraph.config import load_config
from sagegraph.construct import generations
from sagegraph.construct.artifacts import Layout
from sagegraph.construct.stages import rollback_graph, up_to_date
from sagegraph.errors import ConfigError
from tests.fixtures import SENTENCE_BANK, run_all, write_config


def _docs(n: int) -> list[dict]:
    topics = list(SENTENCE_BANK)
    return [
        {
            "id": f"d{i}",
            "title": f"Entry {i}",
            "text": " ".join(s.format(e=f"Entry {i}") for s in SENTENCE_BANK[topics[i % len(topics)]]),
        }
        for i in range(n)
    ]


def _write(path, docs):
    path.write_text("".join(json.dumps(d) + "\n" for d in docs), encoding="utf-8")


def test_publish_switches_atomically_keeps_one_previous_and_migrates_a_legacy_graph(tmp_path):
    out = tmp_path / "out"
    legacy = out / "graph"
    legacy.mkdir(parents=True)
    (legacy / "manifest.json").write_text("{}")  # a graph built before generations: a plain folder
    gens = [out / "graphs" / name for name in ("a", "b", "c")]
    for g in gens:
        g.mkdir(parents=True)
        (g / "manifest.json").write_text(json.dumps({"name": g.name}))
    rec = generations.publish(out, gens[0])
    assert (out / "graph").is_symlink() and generations.published(out) == gens[0].resolve()
    assert rec["previous"] == "legacy" and (out / "graphs" / "legacy" / "manifest.json").exists()
    assert generations.publish(out, gens[0]) == rec  # the current one again: nothing changes
    generations.publish(out, gens[1])
    assert [d.name for d in generations.retired(out)] == ["c", "legacy"]  # neither current nor kept for a rollback
    reader = (out / "graph").resolve()  # a reader resolves the link once (GraphIndex)
    generations.publish(out, gens[2])
    assert reader == gens[1].resolve() and json.loads((reader / "manifest.json").read_text())["name"] == "b"
    back = generations.rollback(out)
    assert (back["current"], back["previous"]) == ("b", "c") and generations.published(out) == gens[1].resolve()
    assert generations.rollback(out)["current"] == "c"  # a second rollback undoes the first


def test_a_rollback_with_nothing_before_is_a_clear_error(tmp_path):
    g = tmp_path / "out" / "graphs" / "a"
    g.mkdir(parents=True)
    generations.publish(tmp_path / "out", g)
    with pytest.raises(ConfigError, match="no previous graph"):
        generations.rollback(tmp_path / "out")


def _assert_store_holds(backend, path, key, url, gen):
    """The store graph holds this generation's nodes and edges, no more, no fewer."""
    import pyarrow.parquet as pq

    from sagegraph.model import read_nodes
    from sagegraph.store import open_store

    with open_store(backend, path, key, url=url) as s:
        ids = sorted(r["id"] for r in s.read("MATCH (n) RETURN n.id AS id"))
        edges = sorted(
            (r["a"], r["t"], r["b"], round(r["w"], 6))
            for r in s.read("MATCH (a)-[r]->(b) RETURN a.id AS a, type(r) AS t, b.id AS b, r.weight AS w")
        )
    table = pq.read_table(gen / "edges.parquet").to_pylist()
    assert ids == sorted(n.id for n in read_nodes(gen / "nodes.parquet"))
    assert edges == sorted((e["src"], e["type"], e["dst"], round(e["weight"], 6)) for e in table)


@pytest.mark.e2e
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
    # one document more than the published graph: the store graph is a copy of the published one
    # with the difference written, and holds exactly the new generation's nodes and edges
    assert third["store"]["mode"] == "difference" and third["store"]["base"] == old_gen.name
    assert third["store"]["difference"]["nodes_added"] > 0 and third["store"]["difference"]["nodes_removed"] == 0
    _assert_store_holds(backend, cfg.out / "store", third["store"]["graph"], url, Layout.of(third["cfg"]).graph)
    kept = {p.name for p in (cfg.out / "graphs").iterdir() if p.is_dir()}
    assert kept == {Layout.of(third["cfg"]).graph.name, old_gen.name}  # the rolled-back-from one is retired
    with open_store(backend, cfg.out / "store", third["store"]["graph"], url=url) as s:
        graphs = set(s.graphs())
    assert second["store"]["graph"] not in graphs and {first["store"]["graph"], third["store"]["graph"]} <= graphs


@pytest.mark.e2e
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
