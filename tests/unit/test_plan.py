"""The relation plan: read from a reply, matched with the chains a selector ranks."""

import json

import pytest

from sagegraph.llm import Reply, ReplyRejected
from sagegraph.retrieve.kb.plan import Plan, ask_plan, names_type, plan_match, plan_schema, read_plan, walk_match

RELATIONS = ["children", "parents", "spouse", "gender", "country", "shares_border_with"]


def test_a_plan_is_read_walk_by_walk_and_outside_relations_dropped():
    reply = json.dumps(
        {
            "walks": [
                {"from": "Ana Silva", "relations": ["children", "made_up", "gender"]},
                {"from": "nobody named", "relations": ["spouse"]},
                {"from": "Bo", "relations": ["made_up"]},
            ]
        }
    )
    assert read_plan(reply, ["ana silva", "Bo"], RELATIONS) == {0: ("children", "gender")}


def test_a_walk_from_no_named_entity_is_the_only_entitys():
    reply = json.dumps({"walks": [{"from": "her", "relations": ["spouse"]}]})
    assert read_plan(reply, ["Ana Silva"], RELATIONS) == {0: ("spouse",)}


def test_an_unreadable_reply_is_an_empty_plan_counted():
    def chat(name, messages, **kw):
        assert kw["response_format"]["schema"] == plan_schema(RELATIONS)
        text = "I think the answer is 42"
        try:
            kw["accept"](text)  # the client refuses to cache what its caller cannot read
        except ValueError as exc:
            raise ReplyRejected(str(exc)) from exc
        return Reply(text=text, prompt_tokens=1, completion_tokens=1, cached=False)

    plan = ask_plan(chat, "who is Ana's husband?", ["Ana"], RELATIONS)
    assert plan.unreadable and plan.walks == {}
    assert plan_match(plan, {0: ("spouse",)}, "Person") == 0.0


def test_no_entity_asks_nothing():
    def chat(name, messages, **kw):
        raise AssertionError("asked")

    assert ask_plan(chat, "which films are dramas?", [], RELATIONS) == Plan()


def test_the_chain_that_follows_the_plan_ranks_above_shorter_longer_and_reordered_ones():
    plan = Plan({0: ("parents", "children", "gender")})
    exact = plan_match(plan, {0: ("parents", "children", "gender")}, "Gender")
    shorter = plan_match(plan, {0: ("parents", "gender")}, "Gender")
    reordered = plan_match(plan, {0: ("children", "parents", "gender")}, "Gender")
    other = plan_match(plan, {0: ("spouse",)}, "Person")
    assert exact == 1.0 > shorter > other == 0.0
    assert exact > reordered > other


def test_a_last_relation_named_as_the_target_type_may_be_left_out():
    assert names_type("country", "Country") and names_type("official_language", "OfficialLanguage")
    assert not names_type("country", "City")
    planned = ("shares_border_with", "country")
    assert walk_match(planned, ("shares_border_with",), "Country") == 1.0
    assert walk_match(planned, ("shares_border_with",), "City") == pytest.approx(2 / 3)
    assert walk_match(planned, ("shares_border_with", "country"), "City") == 1.0


def test_a_conjunction_plan_favours_the_path_that_uses_both_entities():
    plan = Plan({0: ("children",), 1: ("spouse",)})
    both = plan_match(plan, {0: ("children",), 1: ("spouse",)}, "Person")
    one = plan_match(plan, {0: ("children",)}, "Person")
    assert both == 1.0 and one == 0.5
