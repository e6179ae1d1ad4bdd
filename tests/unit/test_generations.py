"""A rebuild never shows readers a half-built graph: the new graph is written and loaded beside the
one in use, published in one step, the one before is kept for `--rollback`, and older ones go."""

import json

import pytest

from sagegraph.construct import generations
from sagegraph.errors import ConfigError
from tests.fixtures import SENTENCE_BANK


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
