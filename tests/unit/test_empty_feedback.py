"""What a query that found nothing is told about the KB, on a hand-made genealogy KB (relations
stored child -> parent): where its walk stopped, and what the KB holds there, in the KB's names."""

import numpy as np
import pytest

from sagegraph.retrieve.kb.feedback import empty_result_feedback, held_relations
from sagegraph.retrieve.kb.grounding import view_schema
from sagegraph.retrieve.kb.view import kb_view
from tests.kb_mini import build_mini, family_records


@pytest.fixture(scope="module")
def family(tmp_path_factory):
    view = kb_view(build_mini(tmp_path_factory.mktemp("family"), family_records()))
    return view, view_schema(view)


def row_of(view, name):
    return view.names.index(name)


def test_a_first_relation_the_named_node_lacks_is_named_with_what_it_has(family):
    view, schema = family
    said = empty_result_feedback(
        "MATCH (a:Human {name: 'Jonas Berg'})-[:member_of]->(g:Guild) RETURN DISTINCT g.id AS id", schema, view
    )
    assert said is not None
    first, *rest = said.splitlines()
    assert first == (
        "(:Human {name: 'Jonas Berg'})-[:member_of]->(:Guild) matches nothing: "
        "(:Human {name: 'Jonas Berg'}) has no -[:member_of]->(:Guild)."
    )
    assert rest == ["What the KB holds there:", "  -[:born_in]->(:Town): 1 node", "  -[:child_of]->(:Human): 1 node"]


def test_a_later_hop_that_reaches_nothing_is_told_from_the_nodes_before_it(family):
    view, schema = family
    said = empty_result_feedback(
        "MATCH (a:Human {name: 'Ingrid Ørsted'})-[:born_in]->(t:Town)-[:member_of]->(g:Guild) RETURN g.id AS id",
        schema,
        view,
    )
    assert said is not None and said.splitlines() == [
        "(:Human {name: 'Ingrid Ørsted'})-[:born_in]->(:Town)-[:member_of]->(:Guild) matches nothing: "
        "(:Human {name: 'Ingrid Ørsted'})-[:born_in]->(:Town) has no -[:member_of]->(:Guild).",
        "What the KB holds there:",
        "  <-[:born_in]-(:Human): 2 nodes",
    ]


def test_a_walk_that_reaches_nodes_says_nothing(family):
    """The store's empty result came from a condition the walk does not read: nothing to tell."""
    view, schema = family
    query = "MATCH (a:Human {name: 'Ingrid Ørsted'})-[:child_of]->(p:Human) WHERE a.born > 3000 RETURN p.id AS id"
    assert empty_result_feedback(query, schema, view) is None


def test_a_name_the_kb_lacks_is_told_with_the_nodes_the_question_names(family):
    view, schema = family
    said = empty_result_feedback(
        "MATCH (a:Human {name: 'Olaf Orsted'})-[:child_of]->(p:Human) RETURN DISTINCT p.id AS id",
        schema,
        view,
        named=[row_of(view, "Håkon Ørsted")],
    )
    assert said is not None and said.splitlines()[:2] == [
        "No node (:Human {name: 'Olaf Orsted'}) is in the KB.",
        "What the KB holds around (:Human {name: 'Håkon Ørsted'}):",
    ]
    assert "  <-[:child_of]-(:Human): 2 nodes" in said.splitlines() and "  -[:member_of]->(:Guild): 1 node" in said


def test_a_query_that_is_not_one_path_gets_the_relations_of_the_nodes_it_names(family):
    view, schema = family
    said = empty_result_feedback(
        "MATCH (p:Human)-[:member_of]->(s:Human) WHERE s.name = 'Jonas Berg' RETURN DISTINCT p.id AS id", schema, view
    )
    assert said is not None and said.splitlines() == [
        "What the KB holds around (:Human {name: 'Jonas Berg'}):",
        "  -[:born_in]->(:Town): 1 node",
        "  -[:child_of]->(:Human): 1 node",
    ]
    assert empty_result_feedback("MATCH (p:Human) WHERE p.name = 'Nobody' RETURN p.id AS id", schema, view) is None


def test_a_name_with_a_quote_is_written_as_a_cypher_string(family):
    view, schema = family
    query = 'MATCH (a:Human {name: "O\'Hara"})-[:child_of]->(p:Human) RETURN p.id AS id'
    said = empty_result_feedback(query, schema, view)
    assert said is not None and said.splitlines()[0] == "No node (:Human {name: 'O\\'Hara'}) is in the KB."


def test_held_relations_list_the_most_reached_first_and_stop_at_the_limit(family):
    view, _ = family
    hakon = row_of(view, "Håkon Ørsted")
    held = held_relations(view, np.array([hakon]))
    assert held[0] == "<-[:child_of]-(:Human): 2 nodes" and len(held_relations(view, np.array([hakon]), limit=1)) == 1
