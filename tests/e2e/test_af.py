"""The end-to-end half of tests/unit/test_af.py: servers, subprocesses or whole builds."""

from __future__ import annotations

from sagegraph.config import LLMConfig
from sagegraph.retrieve.graph_index import GraphIndex
from sagegraph.retrieve.resources import open_resources


def test_oracle_ceiling_of_steps_3_to_7_on_the_synthetic_kb(synth_kb, tmp_path):
    """With the gold target type and gold Cypher (the oracle endpoint), parsing and grounding must
    recover the gold answers: the ceiling docs/results.md reports, here on the 600-node test KB."""
    from sagegraph.eval.evaluate import evaluate_one
    from sagegraph.eval.oracle import oracle_endpoint
    from sagegraph.eval.runner import EvalConfig

    qs = [
        q
        for q in synth_kb["questions"]
        if q.meta["split"] == "test" and q.meta["family"] in ("one_hop", "two_hop", "intersection", "filter")
    ][:16]
    with oracle_endpoint(qs) as server:
        res = open_resources(
            GraphIndex(synth_kb["graph"]),
            LLMConfig(base_url=server.base_url, model="oracle", cache_dir=tmp_path / "cache"),
        )
        m = evaluate_one(res, EvalConfig("af", k=20, params={"reranker": "none"}), qs, tmp_path / "run")
        res.close()
    assert m["questions"] == 16 and m["diag_target_type_accuracy"] == 1.0 and m["rate_parse_parsed"] == 1.0
    assert m["diag_grounded_recall"] >= 0.95 and m["diag_grounded_hit"] == 1.0 and m["diag_candidates_hit"] >= 0.95
    assert m["rate_with_triplet"] == 1.0 and m["count_vss_only"] == 0, m


def test_af_through_the_cli_query(synth_kb, tmp_path, capsys):
    """`sagegraph -v query --retriever af` against the oracle endpoint, in process (its sweep, MLflow
    params and diagnostics are tested with the other LLM retrievers in test_spark's KB sweep)."""
    import yaml

    from sagegraph.cli import main
    from sagegraph.eval.oracle import oracle_endpoint

    qs = [q for q in synth_kb["questions"] if q.meta["split"] == "test"]
    with oracle_endpoint(qs) as server:
        (tmp_path / "llm.yaml").write_text(
            yaml.safe_dump({"base_url": server.base_url, "model": "oracle", "cache_dir": str(tmp_path / "cache")})
        )
        assert (
            main(
                [
                    "-v",
                    "query",
                    str(synth_kb["graph"]),
                    qs[0].text,
                    "--retriever",
                    "af",
                    "--k",
                    "5",
                    "--param",
                    "reranker=listwise",
                    "--llm",
                    str(tmp_path / "llm.yaml"),
                ]
            )
            == 0
        )
    out = capsys.readouterr()
    assert len(out.out.strip().splitlines()) == 5 and '"derive cypher"' in out.err and '"grounding"' in out.err
