"""A rebuild never shows readers a half-built graph: the new graph is written and loaded beside the
one in use, published in one step, the one before is kept for `--rollback`, and older ones go."""

import json

import pytest

from sagegraph.config import load_config
from sagegraph.construct import generations
from sagegraph.construct.artifacts import Layout
from sagegraph.construct.stages import rollback_graph, up_to_date
from sagegraph.errors import ConfigError
from tests.fixtures import SENTENCE_BANK, run_all, write_config


def _docs(n: int) -> list[dict]:
    topics = list(SENTENCE_BANK)
    return [{"id": f"d{i}", "title": f"Entry {i}", "text": " ".join(s.format(e=f"Entry {i}") for s in SENTENCE_BANK[topics[i % len(topics)]])}
            for i in range(n)]


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
    _write(docs, _docs(6))
    url = request.getfixturevalue("falkordb_server") if backend == "falkordb-server" else None
    store = {"backend": backend, **({"url": url, "graph": f"gen-{tmp_path.name}"} if url else {})}
    cfg = load_config(write_config(tmp_path / "c.yaml", {"kind": "generic", "documents": str(docs)}, tmp_path / "out", store=store))
    first = run_all(cfg)
    reader = open_resources(GraphIndex(cfg.out / "graph"))
    before = reader.store.count_nodes()
    old_gen = reader.graph.dir

    _write(docs, _docs(9))
    second = run_all(cfg)  # the reader's store graph is not touched while the new one loads
    assert reader.store.count_nodes() == before == len(reader.graph.ids)
    assert second["store"]["graph"] != first["store"]["graph"] and second["store"]["nodes"] > before
    now = open_resources(GraphIndex(cfg.out / "graph"))
    assert now.graph.dir != old_gen and now.store.count_nodes() == second["store"]["nodes"]
    assert up_to_date(second["cfg"]) is not None
    now.close()
    reader.close()

    rec = rollback_graph(cfg)
    assert generations.published(cfg.out) == old_gen and rec["previous"] == Layout.of(second["cfg"]).graph.name
    back = open_resources(GraphIndex(cfg.out / "graph"))
    assert back.store.count_nodes() == before  # the old graph's own store load, checked whole
    back.close()
    assert up_to_date(second["cfg"]) is None  # not published: the next build publishes it again

    _write(docs, _docs(7))
    third = run_all(cfg)
    kept = {p.name for p in (cfg.out / "graphs").iterdir() if p.is_dir()}
    assert kept == {Layout.of(third["cfg"]).graph.name, old_gen.name}  # the rolled-back-from one is retired
    with open_store(backend, cfg.out / "store", third["store"]["graph"], url=url) as s:
        graphs = set(s.graphs())
    assert second["store"]["graph"] not in graphs and {first["store"]["graph"], third["store"]["graph"]} <= graphs
