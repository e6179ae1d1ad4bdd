"""A query one relation short of its question, lengthened along the KB's own patterns, on a
hand-made schema and a bag-of-words reader (a word read alike in the question and a chain's
phrase), so each case shows the rule and not an encoder's taste."""

import re

import numpy as np

from sagegraph.retrieve.kb.grounding import KBSchema
from sagegraph.retrieve.kb.lengthen import Hop, lengthened, next_hops, query_path

PATTERNS = {
    ("Person", "parents", "Person"),
    ("Person", "nationality", "Country"),
    ("Country", "capital", "City"),
    ("City", "country", "Country"),
    ("Film", "directed_by", "Person"),
}
SCHEMA = KBSchema(PATTERNS)
WORDS = ["parent", "nationality", "capital", "city", "country", "directed", "film", "who", "what"]


def read(texts: list[str]) -> np.ndarray:
    """One count per known word (a plural read as its singular; a phrase's types left out), normalised."""
    rows = []
    for text in texts:
        text = re.sub(r"\(\w+\)", " ", text)
        said = [w[:-1] if w.endswith("s") and w[:-1] in WORDS else w for w in re.findall(r"[a-z]+", text.lower())]
        v = np.array([said.count(w) for w in WORDS], dtype=np.float64) + 1e-3
        rows.append(v / np.linalg.norm(v))
    return np.stack(rows)


PARENTS = "MATCH (p:Person {name: 'Ada'})-[:parents]->(q:Person) RETURN DISTINCT q.id AS id"


def test_a_query_one_relation_short_returns_the_relation_the_question_adds():
    query, repairs = lengthened(PARENTS, SCHEMA, "What is the nationality of Ada's parent?", read, margin=0.03)
    assert query == (
        "MATCH (p:Person {name: 'Ada'})-[:parents]->(q:Person) "
        "MATCH (q)-[:nationality]->(lengthened_2:Country) RETURN DISTINCT lengthened_2.id AS id"
    )
    assert [r.kind for r in repairs] == ["return_lengthened"] and "nationality" in repairs[0].detail


def test_a_query_that_reads_as_its_question_is_left_as_written():
    assert lengthened(PARENTS, SCHEMA, "Who are Ada's parents?", read, margin=0.03) == (PARENTS, [])


def test_lengthened_one_relation_at_a_time_up_to_the_most_relations():
    question = "What is the capital of the nationality of Ada's parent?"
    query, repairs = lengthened(PARENTS, SCHEMA, question, read, margin=0.03, max_relations=3)
    assert len(repairs) == 2 and "[:nationality]" in repairs[0].detail and "[:capital]" in repairs[1].detail
    path = query_path(query, SCHEMA)
    assert path is not None and [h.relation for h in path.hops] == ["parents", "nationality", "capital"]  # no fourth
    shorter, once = lengthened(PARENTS, SCHEMA, question, read, margin=0.03, max_relations=2)
    path = query_path(shorter, SCHEMA)
    assert len(once) == 1 and path is not None and len(path.hops) == 2


def test_a_condition_on_the_returned_node_keeps_the_query():
    for query in (
        "MATCH (p:Person {name: 'Ada'})-[:parents]->(q:Person) WHERE q.born > 1800 RETURN q.id AS id",
        "MATCH (p:Person {name: 'Ada'})-[:parents]->(q:Person {gender: 'female'}) RETURN q.id AS id",
    ):
        assert lengthened(query, SCHEMA, "What is the nationality of Ada's parent?", read, margin=0.03) == (query, [])


def test_anything_but_one_path_from_one_named_node_is_left_alone():
    for query in (
        "MATCH (p:Person {name: 'Ada'})-[:parents]->(q:Person)<-[:parents]-(s:Person {name: 'Bo'}) RETURN q.id AS id",
        "MATCH (p:Person)-[:parents]->(q:Person) RETURN q.id AS id",  # names nothing
        "MATCH (p:Person {name: 'Ada'})-[:parents]-(q:Person) RETURN q.id AS id",  # undirected
        "MATCH (p:Person {name: 'Ada'})-[:parents]->(q:Person) RETURN q.name AS name",  # not the id
        "MATCH (p:Person {name: 'Ada'})-[:parents]->(q:Person), (q)-[:parents]->(r:Person), (q)-[:nationality]->(c) "
        "RETURN r.id AS id",  # a branch
        "MATCH (p:Person {name: 'Ada'}) RETURN p.id AS id",  # no relation
        "this is not Cypher (",
    ):
        assert query_path(query, SCHEMA) is None, query
        assert lengthened(query, SCHEMA, "What is the nationality of Ada's parent?", read, margin=0.0) == (query, [])


def test_only_relations_walked_their_stored_way_are_offered():
    # from a Person: its parents and nationality; never directed_by walked back to a Film
    assert next_hops(SCHEMA, Hop("parents", True, "Person")) == [
        Hop("nationality", True, "Country"),
        Hop("parents", True, "Person"),
    ]
    assert Hop("directed_by", False, "Film") not in next_hops(SCHEMA, Hop("directed_by", True, "Person"))


def test_the_start_label_said_beside_its_name_is_not_read_as_a_relation():
    # 'the city of Oslo' names Oslo's kind: not a reason to walk on to the country's capital city
    query = "MATCH (c:City {name: 'Oslo'})-[:country]->(n:Country) RETURN n.id AS id"
    assert lengthened(query, SCHEMA, "In what country is the city of Oslo?", read, margin=0.03) == (query, [])
    # the words stay where the path already ends at the start's label: they may name the answer
    query = "MATCH (c:Country {name: 'Chad'})-[:capital]->(x:City)-[:country]->(n:Country) RETURN n.id AS id"
    path = query_path(query, SCHEMA)
    assert path is not None and path.start_label == "Country" and path.hops[-1].end == "Country"
