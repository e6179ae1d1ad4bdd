"""AF-Retriever's Cypher parser on recorded model outputs (good, malformed, adversarial) and the
grounding round schedule."""

import pytest

from sagegraph.retrieve.af.parse import grow_schedule, parse_cypher

TYPES = {"Movie", "Person", "Studio", "Genre", "Country", "Award"}
RELS = {"DIRECTED", "ACTED_IN", "PRODUCED_BY", "HAS_GENRE", "WON", "BORN_IN"}


def test_a_two_hop_query_gives_symbols_triplets_and_conditions():
    reply = """```cypher
MATCH (p:Person {name: 'Ana Silva'})-[:DIRECTED]->(m:Movie)-[:PRODUCED_BY]->(s:Studio)
WHERE m.year > 1990 AND s.name CONTAINS 'North'
RETURN m.title
```"""
    q = parse_cypher(reply, TYPES, RELS)
    assert q.counters["parsed"] == 1 and q.target == "m" and q.target_type == "Movie"
    assert [(t.head, t.rel, t.tail) for t in q.triplets] == [("p", "DIRECTED", "m"), ("m", "PRODUCED_BY", "s")]
    assert [(c.prop, c.op, c.value) for c in q.symbols["m"].conditions] == [("year", ">", 1990)]
    assert {s.var for s in q.constants} == {"p", "s"} and q.symbols["p"].conditions[0].value == "Ana Silva"


def test_direction_of_a_backward_edge_is_kept_and_anonymous_nodes_get_names():
    q = parse_cypher("MATCH (g:Genre {name: 'Drama'})<-[:HAS_GENRE]-(m:Movie)-[:WON]->(:Award) RETURN m", TYPES, RELS)
    assert [(t.head, t.rel, t.tail) for t in q.triplets] == [("m", "HAS_GENRE", "g"), ("m", "WON", "_anon1")]
    assert q.symbols["_anon1"].type == "Award"


def test_invented_schema_is_weakened_and_counted_not_fatal():
    q = parse_cypher("MATCH (a:Actor {name: 'Kenji Tanaka'})-[:STARRED_IN]->(m:film) RETURN m", TYPES, RELS)
    assert q.counters["parsed"] == 1 and q.counters["unknown_type"] == 2 and q.counters["unknown_relation"] == 1
    assert q.symbols["a"].type is None and q.triplets[0].rel is None and q.target_type is None


@pytest.mark.parametrize(
    "reply,counter",
    [
        ("I think the answer is a movie.", "no_single_return"),
        ("MATCH (m:Movie) RETURN m UNION MATCH (p:Person) RETURN p", "no_single_return"),
        ("MATCH (m:Movie) WHERE m.year > 2000 OR m.rating > 8 RETURN m", "forbidden_syntax"),
        ("MATCH (m:Movie {title: 'It'}) RETURN m", "no_triplet"),
    ],
)
def test_malformed_replies_have_a_defined_outcome(reply, counter):
    assert parse_cypher(reply, TYPES, RELS).counters[counter] == 1


def test_adversarial_names_stay_values_and_in_lists_parse():
    reply = (
        "MATCH (p:Person {name: 'O\\'Brien }) DETACH DELETE (x)'})-[:ACTED_IN]->(m:Movie) WHERE m.year IN "
        "[1999, 2001] RETURN m"
    )
    q = parse_cypher(reply, TYPES, RELS)
    assert q.symbols["p"].conditions[0].value.startswith("O'Brien")
    assert ("year", "in", [1999, 2001]) in [(c.prop, c.op, c.value) for c in q.symbols["m"].conditions]


def test_grow_schedules_follow_the_paper_or_the_public_code():
    assert grow_schedule(100) == [1, 2, 3, 6, 15, 59, 100]
    assert grow_schedule(100, "code") == [1, 2, 3, 5, 8, 12, 18, 27, 41, 62, 93]
    assert grow_schedule(1) == [1] and grow_schedule(10) == [1, 2, 3, 6, 10]
    with pytest.raises(ValueError):
        grow_schedule(0)


def test_an_anonymous_middle_node_is_one_symbol_for_both_hops():
    q = parse_cypher(
        "MATCH (d:Person {name: 'Lucia Hansen'})-[:DIRECTED]->(:Movie)<-[:ACTED_IN]-(a:Person) RETURN a", TYPES, RELS
    )
    assert [(t.head, t.rel, t.tail) for t in q.triplets] == [("d", "DIRECTED", "_anon1"), ("a", "ACTED_IN", "_anon1")]
    assert q.target_type == "Person" and [s.var for s in q.constants] == ["d"]


def test_a_return_of_a_variable_the_match_never_binds_is_not_a_query():
    """`RETURN y.name` with no `y` in the MATCH is counted and left to the fallback: guessing the
    pattern's far end as the answer met the study's rule on no development KB
    (experiments/af-grounding)."""
    q = parse_cypher(
        "MATCH (p:Person {name: 'Ana Silva'})-[:DIRECTED]->(m:Movie)-[:PRODUCED_BY]->(s:Studio) RETURN y.name",
        TYPES,
        RELS,
    )
    assert q.target is None and q.counters["no_single_return"] == 1 and q.counters["parsed"] == 0
