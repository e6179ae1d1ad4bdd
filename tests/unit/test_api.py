"""The Python API (`sagegraph.open(...).retrieve(...)`): typed hits from any retriever, the README's
example as written, and concurrent calls from threads giving what serial calls give."""

from __future__ import annotations

from pathlib import Path

import pytest

import sagegraph
from sagegraph.errors import SageGraphError

README = Path(__file__).resolve().parents[2] / "README.md"


def test_a_graph_opens_from_its_out_folder_and_answers_with_typed_hits(graph_dir):
    with sagegraph.open(graph_dir.parent) as graph:
        assert {"bm25", "hybrid", "sage", "spark"} <= set(graph.retrievers())
        hits = graph.retrieve("Which river flows through the capital?", retriever="sage", k=7, k_prime=3)
    assert 7 <= len(hits) <= 7 + 3 and all(
        isinstance(h, sagegraph.Hit) for h in hits
    )  # k seeds, at most k_prime neighbours
    assert [h.score for h in hits] == sorted((h.score for h in hits), reverse=True)
    assert all(h.node_id and h.text and h.source_id for h in hits)
    assert {h.found_by for h in hits} <= {"hybrid", "neighbour"} and "neighbour" in {h.found_by for h in hits}


def test_bad_names_and_values_are_one_clear_error(graph_dir):
    with sagegraph.open(graph_dir) as graph:
        with pytest.raises(SageGraphError, match="unknown retriever"):
            graph.retrieve("q", retriever="nope")
        with pytest.raises(SageGraphError):
            graph.retrieve("q", retriever="sage", k_prime=-1)
        with pytest.raises(SageGraphError, match="k must be"):
            graph.retrieve("q", retriever="bm25", k=0)
    with pytest.raises(SageGraphError, match="no built graph"):
        sagegraph.open(graph_dir.parent / "nowhere")


def test_build_in_process_then_open_then_a_rebuild_finds_it_up_to_date(kb_dir, tmp_path):
    """`sagegraph.build` runs the flow's stages here, with no Prefect server or Dask cluster."""
    import json

    config = tmp_path / "kb.yaml"
    config.write_text(
        json.dumps({"name": "kb", "corpus": {"kind": "kb", "path": str(kb_dir)}, "runner": {"batch_size": 4}})
    )
    report = sagegraph.build(config, out=tmp_path / "out")
    assert report["counts"]["nodes"] == 6 and report["store"]["nodes"] == 6 and not report["up_to_date"]
    assert report["published"]["current"] and (tmp_path / "out" / ".sagegraph").is_file()
    with sagegraph.open(report["graph"]) as graph:
        hits = graph.retrieve("dense passage retrieval with dual encoders", retriever="bm25", k=3)
    assert hits[0].source_id == "p2"
    again = sagegraph.build(config, out=tmp_path / "out")
    assert again["up_to_date"] and again["published"]["current"] == report["published"]["current"]


def test_a_sweep_file_runs_from_python_and_a_second_call_resumes_it(graph_dir, ottqa_dir, tmp_path):
    """`sagegraph.sweep` runs a sweep in this process (no Prefect, no Dask): the CLI's files and
    MLflow runs; called again, it finds every configuration finished and runs nothing."""
    import yaml
    from mlflow.tracking import MlflowClient

    spec = {
        "name": "py",
        "graph": str(graph_dir),
        "questions": str(ottqa_dir / "questions.jsonl"),
        "out": str(tmp_path / "sweep"),
        "grid": [{"retriever": ["hybrid", "bm25"], "k": [2]}],
    }
    (tmp_path / "s.yaml").write_text(yaml.safe_dump(spec))
    first = sagegraph.sweep(tmp_path / "s.yaml")
    assert first["configurations"] == 2 and Path(first["summary"]).read_text().count("\n") == 3
    assert {row["config"] for row in first["table"]} == {"hybrid[k=2,a=0.6]", "bm25[k=2]"}
    client = MlflowClient(first["mlflow"]["tracking_uri"])
    assert len(client.search_runs([client.get_experiment_by_name("sagegraph").experiment_id])) == 3
    before = (tmp_path / "sweep" / "summary.csv").read_text()
    again = sagegraph.sweep(tmp_path / "s.yaml")
    assert again["table"] == first["table"] and (tmp_path / "sweep" / "summary.csv").read_text() == before
    assert len(client.search_runs([client.get_experiment_by_name("sagegraph").experiment_id])) == 3
