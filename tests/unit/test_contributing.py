"""CONTRIBUTING.md's example retriever (docs/examples/neighbour_vote.py) runs with no edit of
sagegraph: loaded through SAGEGRAPH_RETRIEVERS, it is listed, validated, queried, evaluated and
compared here; `test_sweep_end_to_end_with_mlflow_and_resume` runs it in a sweep on Dask workers
and finds it in MLflow."""

import json
from pathlib import Path

import pytest

from sagegraph.retrieve import registry

EXAMPLES = Path(__file__).resolve().parents[2] / "docs" / "examples"


@pytest.fixture
def example_retriever(monkeypatch):
    monkeypatch.syspath_prepend(str(EXAMPLES))
    monkeypatch.setenv(registry.ENV, "neighbour_vote")
    monkeypatch.setattr(registry, "_loaded", False)
    yield "neighbour-vote"
    registry.REGISTRY.pop("neighbour-vote", None)
    registry._loaded = False


def test_the_guide_example_runs_through_evaluate_query_and_compare(
    example_retriever, graph_dir, ottqa_dir, tmp_path, capsys
):
    from sagegraph.cli import main

    assert example_retriever in registry.retriever_names()
    assert main(["retrievers", example_retriever]) == 0
    assert "depth = 20" in capsys.readouterr().out
    assert (
        main(
            [
                "query",
                str(graph_dir),
                "Which film won the audience award?",
                "--retriever",
                example_retriever,
                "--k",
                "5",
                "-p",
                "depth=5",
            ]
        )
        == 0
    )
    assert 1 <= len(capsys.readouterr().out.strip().splitlines()) <= 5
    assert (
        main(["evaluate", str(graph_dir), "--retriever", example_retriever, "-p", "weight=9"]) == 2
    )  # validated by its own Params
    assert "weight" in capsys.readouterr().err
    runs = tmp_path / "sweep" / "runs"
    for retriever in (example_retriever, "bm25"):
        out = runs / retriever
        assert (
            main(
                [
                    "evaluate",
                    str(graph_dir),
                    "--retriever",
                    retriever,
                    "--k",
                    "5",
                    "--questions",
                    str(ottqa_dir / "questions.jsonl"),
                    "--out",
                    str(out),
                ]
            )
            == 0
        )
    metrics = json.loads(capsys.readouterr().out.strip().splitlines()[-2])
    assert metrics["questions"] == 12 and 0 < metrics["recall@5"] <= 1
    assert main(["compare", str(tmp_path / "sweep"), "--baseline", "bm25"]) == 0
    table = (tmp_path / "sweep" / "comparison.csv").read_text()
    assert "neighbour-vote[k=5]" in table and "vs bm25" in table


def test_an_unimportable_module_in_the_variable_is_one_clear_error(monkeypatch):
    from sagegraph.errors import ConfigError

    monkeypatch.setenv(registry.ENV, "no_such_module_here")
    monkeypatch.setattr(registry, "_loaded", False)
    with pytest.raises(ConfigError, match="SAGEGRAPH_RETRIEVERS: cannot import 'no_such_module_here'"):
        registry.retriever_names()
    monkeypatch.setattr(registry, "_loaded", False)
