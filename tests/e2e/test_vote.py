"""The vote on a small synthetic KB: SPARK (through the oracle endpoint: tests only) and DGR's
chains, each question settled as tests/unit/test_vote.py says, the members' calls counted once."""

from __future__ import annotations

from sagegraph.config import LLMConfig
from sagegraph.eval.evaluate import evaluate_one
from sagegraph.eval.oracle import oracle_endpoint
from sagegraph.eval.runner import EvalConfig
from sagegraph.retrieve import get_retriever
from sagegraph.retrieve.dgr.retriever import DGRRetriever
from sagegraph.retrieve.graph_index import GraphIndex
from sagegraph.retrieve.resources import open_resources
from sagegraph.retrieve.spark.retriever import SparkRetriever
from sagegraph.retrieve.vote import VoteParams, VoteRetriever


def test_a_vote_takes_the_answering_members_first_result_and_counts_its_calls(synth_kb, tmp_path):
    qs = [q for q in synth_kb["questions"] if q.meta["split"] == "test"][:5]
    members = {"members": ["spark", "dgr"], "member_params": {"dgr": {"n_agents": 0}}}
    with oracle_endpoint(qs) as server:
        llm = LLMConfig(base_url=server.base_url, model="oracle", cache_dir=tmp_path / "cache")
        res = open_resources(GraphIndex(synth_kb["graph"]), llm)
        try:
            vote = get_retriever("vote", res, **members)
            spark = get_retriever("spark", res)
            for q in qs:
                alone = spark.search(q.text, 10)
                together = vote.search(q.text, 10)
                assert together.trace["members"]["spark"]["answered"], q.text  # the oracle's plan ran
                assert together.idx[0] == alone.idx[0] and together.found_by[0] == "vote"
                assert set(together.idx[1:].tolist()) <= set(alone.idx.tolist()) | set(
                    get_retriever("dgr", res, n_agents=0).search(q.text, 20).idx.tolist()
                )
            metrics = evaluate_one(res, EvalConfig("vote", k=10, params=members), qs, tmp_path / "run")
            assert metrics["llm_calls"] == len(qs) and metrics["hit@1"] == 1.0  # SPARK's one call each, cached
        finally:
            res.close()
    assert VoteRetriever.needs_llm(VoteParams(**members))
    key = VoteRetriever.prompt_for(VoteParams(**members))  # a member's new prompt reruns the vote
    spark_key = SparkRetriever.prompt_for(SparkRetriever.Params())
    assert key == f"{spark_key}+{DGRRetriever.prompt_for(DGRRetriever.Params(n_agents=0))}"
