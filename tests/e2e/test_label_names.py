"""A KB whose type names are not Cypher labels (STaRK-PRIME's `gene/protein`): the store labels
them `gene_protein`, and SPARK's and AF's repairs and readings of the model's words use the
store's label, so a moved label is still Cypher and a type the model names either way is known."""

from __future__ import annotations

import json

import pytest

from sagegraph.config import LLMConfig, load_config
from sagegraph.loopback import FakeOpenAI, completion
from sagegraph.retrieve import get_retriever
from sagegraph.retrieve.af.retriever import ORACLE_CYPHER_MARK, ORACLE_TYPE_MARK
from sagegraph.retrieve.graph_index import GraphIndex
from sagegraph.retrieve.resources import open_resources
from sagegraph.retrieve.spark.retriever import SYSTEM as SPARK_SYSTEM
from tests.fixtures import run_all, write_config

QUESTION = "Which genes are expressed in the liver?"
PPI = "Which proteins interact with GENE0?"


@pytest.fixture(scope="module")
def graph(tmp_path_factory):
    root = tmp_path_factory.mktemp("labels")
    nodes = [{"id": "a1", "type": "anatomy", "fields": {"name": "liver"}}]
    nodes += [{"id": f"g{i}", "type": "gene/protein", "fields": {"name": f"GENE{i}"}} for i in range(6)]
    edges = [{"src": "a1", "dst": f"g{i}", "type": "expression_present"} for i in range(3)]
    edges += [{"src": f"g{i}", "dst": f"g{i + 1}", "type": "ppi"} for i in range(5)]
    (root / "kb").mkdir()
    (root / "kb" / "nodes.jsonl").write_text("".join(json.dumps(n) + "\n" for n in nodes), encoding="utf-8")
    (root / "kb" / "edges.jsonl").write_text("".join(json.dumps(e) + "\n" for e in edges), encoding="utf-8")
    cfg = load_config(write_config(root / "c.yaml", {"kind": "kb", "path": str(root / "kb")}, root / "out"))
    run_all(cfg)
    return GraphIndex(cfg.out / "graph")


def _answer(body: dict) -> tuple[int, dict]:
    messages = body["messages"]
    last = str(messages[-1]["content"])
    if messages[0]["content"] == SPARK_SYSTEM:  # the name written on the other type's label
        cypher = "MATCH (t:anatomy {name: 'GENE0'})-[:ppi]-(x:gene_protein) RETURN x"
        return 200, completion(json.dumps({"target": "gene_protein", "cypher": cypher, "vector": []}))
    if ORACLE_TYPE_MARK in last:
        return 200, completion("gene/protein")
    if ORACLE_CYPHER_MARK in last:
        cypher = "MATCH (t:anatomy {name: 'liver'})-[:expression_present]->(x:gene_protein) RETURN x.name"
        return 200, completion(cypher)
    return 200, completion("")


def _run(graph, tmp_path, retriever: str, question: str = QUESTION, **params):
    with FakeOpenAI(_answer) as server:
        llm = LLMConfig(base_url=server.base_url, model="scripted", cache_dir=tmp_path / retriever, max_retries=1)
        res = open_resources(graph, llm)
        try:
            return get_retriever(retriever, res, **params).search(question, 5)
        finally:
            res.close()


def test_spark_moves_a_name_to_the_stored_label_of_a_type_that_is_not_a_label(graph, tmp_path):
    found = _run(graph, tmp_path, "spark", PPI)
    counters = found.trace["counters"]
    assert counters["ground_label_moved"] == 1 and counters["cypher_ran"] == 1 and counters["cypher_invalid"] == 0
    assert graph.source_ids[found.idx[0]] == "g1" and found.found_by[0] == "cypher"


def test_af_knows_a_type_named_by_its_name_or_its_label(graph, tmp_path):
    found = _run(graph, tmp_path, "af", reranker="none")
    counters = found.trace["counters"]
    assert found.trace["steps"]["target_type"] == "gene/protein" and counters["type_invalid"] == 0
    assert counters["parse_unknown_type"] == 0 and counters["with_triplet"] == 1
    assert {graph.source_ids[r] for r in found.idx[:3]} == {"g0", "g1", "g2"}
