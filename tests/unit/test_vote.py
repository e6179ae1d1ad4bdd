"""The vote of several KB retrievers: how a question is settled, the fusion of the rest, its
parameters. The members running together on a KB are in tests/e2e/test_vote.py."""

from __future__ import annotations

import numpy as np
import pytest
from pydantic import ValidationError

from sagegraph.retrieve.vote import VoteParams, answered_by_method, reciprocal_rank_fusion, settle


def test_two_members_ranking_one_node_first_settle_it_over_the_first_member():
    assert settle([7, 9, 9], [True, True, False]) == (9, "agreed")


def test_without_agreement_the_first_member_whose_method_answered_settles_it():
    assert settle([7, 8, 9], [False, True, True]) == (8, "first answering member")
    assert settle([None, 8, 9], [True, True, True]) == (8, "first answering member")


def test_when_no_member_answered_by_its_method_the_first_result_stands():
    assert settle([None, 8, 9], [False, False, False]) == (8, "first member")
    assert settle([None, None], [False, False]) == (None, "first member")


def test_a_first_result_found_by_a_flat_fallback_is_not_the_methods_answer():
    assert answered_by_method(["cypher", "fill"]) and answered_by_method(["template1"])
    assert answered_by_method(["cypher (sentences)"]) and answered_by_method(["agents"])
    assert not answered_by_method(["fallback"]) and not answered_by_method(["hybrid"])
    assert not answered_by_method([])


def test_reciprocal_rank_fusion_adds_ranks_and_keeps_first_appearance_on_ties():
    rows, scores = reciprocal_rank_fusion([np.array([1, 2, 3]), np.array([2, 4])], 3)
    assert rows.tolist() == [2, 1, 4] and scores[0] == pytest.approx(1 / 62 + 1 / 61)
    assert reciprocal_rank_fusion([np.array([5]), np.array([6])], 5)[0].tolist() == [5, 6]


def test_parameters_refuse_a_vote_of_one_a_member_twice_and_params_of_no_member():
    assert VoteParams().members == ["spark", "graphraft", "dgr"]
    assert VoteParams(members=["graphraft", "dgr"]).member_params == {"dgr": {"n_agents": 0}}  # SPARK's left out
    assert VoteParams(members=["spark", "graphraft"]).member_params == {"spark": {"repair_empty": False}}
    for bad in (
        {"members": ["spark"]},
        {"members": ["spark", "spark"]},
        {"members": ["vote", "spark"]},
        {"members": ["spark", "graphraft"], "member_params": {"dgr": {"n_agents": 0}}},
    ):
        with pytest.raises(ValidationError):
            VoteParams(**bad)
