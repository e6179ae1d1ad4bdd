"""`sagegraph diagnose failures`: each miss gets the first kind its method says applies, read from a
trace alone."""

from sagegraph.eval.diagnose import gold_relations
from sagegraph.retrieve.af.diagnostics import miss_kind as af_kind
from sagegraph.retrieve.graphraft.diagnostics import miss_kind as graphraft_kind
from sagegraph.retrieve.spark.diagnostics import miss_kind as spark_kind


def test_spark_misses():
    ran = {
        "counters": {"fallback": 0},
        "plan": {"cypher": "MATCH (a:P {name: 'x'})-[:r]->(b:P) RETURN b.id AS id"},
        "cypher_executed": "MATCH (a:P {name: 'x'})-[:r]->(b:P) RETURN b.id AS id",
    }
    assert spark_kind({"counters": {}, "plan": {"cypher": None}}, "P", 2) == "no query"
    assert spark_kind({**ran, "counters": {"fallback": 1}}, "P", 2) == "empty"
    assert spark_kind(ran, "P", 2) == "fewer relations"
    assert spark_kind(ran, "P", 1) == "enough relations"
    assert spark_kind(ran, "P", 0) == "missed"  # no gold path (a descriptive question)


def test_af_misses():
    steps = {"target_type": "Person", "parsed": {"triplets": [["p", "children", "y"]]}}
    assert af_kind({"steps": {}}, "Gender", 2) == "no query"
    assert af_kind({"steps": steps}, "Gender", 2) == "answer type"
    assert af_kind({"steps": steps}, "Person", 2) == "fewer relations"
    assert af_kind({"steps": steps}, "Person", 1) == "enough relations"


def test_graphraft_misses():
    template = (
        "MATCH (e0:Person)-[:DIRECTED]->(:Movie)-[:PRODUCED_BY]->(x:Studio) WHERE e0.id IN $e0 RETURN "
        "DISTINCT x.id AS id"
    )
    assert graphraft_kind({}, "Movie", 1) == "no template"
    assert graphraft_kind({"chosen_template": template}, "Movie", 1) == "answer type"
    assert graphraft_kind({"chosen_template": template}, "Studio", 2) == "right type"


def test_gold_relations():
    assert gold_relations({"relation_paths": [["a", "b", "c"]], "hops": 2}) == 3
    assert gold_relations({"hops": 2}) == 2 and gold_relations({}) is None
