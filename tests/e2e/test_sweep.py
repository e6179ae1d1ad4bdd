"""The end-to-end half of tests/unit/test_sweep.py: servers, subprocesses or whole builds."""

from __future__ import annotations

import json
import os

import yaml

from sagegraph.eval.runner import EvalConfig
from tests.fixtures import sagegraph


def test_edge_variant_shares_nodes_and_rebuilds_only_edges(graph_dir):
    from sagegraph.construct.variants import base_config_of, build_variant, variant_graph_dir
    from sagegraph.model import read_edges

    base = base_config_of(graph_dir)
    assert build_variant(base, {"percentile": base.edges.percentile}) == graph_dir  # no change: the graph as built
    loose = build_variant(base, {"percentile": 50.0})
    assert loose == variant_graph_dir(base, {"percentile": 50.0}) and loose != graph_dir
    assert (loose / "nodes.parquet").stat().st_ino == (graph_dir / "nodes.parquet").stat().st_ino  # hard link, no copy
    assert (loose.parent / "stats" / "graph_stats.json").exists()

    def sim(graph):
        return sum(e.type.startswith("SIMILAR_") for e in read_edges(graph / "edges.parquet"))

    assert sim(loose) > 2 * sim(graph_dir) > 0
    assert json.loads((loose / "manifest.json").read_text())["config"]["edges"]["percentile"] == 50.0
    before = (loose / "edges.parquet").stat().st_mtime_ns
    assert (
        build_variant(base, {"percentile": 50.0}) == loose and (loose / "edges.parquet").stat().st_mtime_ns == before
    )  # resumed


def test_sweep_end_to_end_with_mlflow_and_resume(graph_dir, ottqa_dir, tmp_path, monkeypatch):
    """Also runs CONTRIBUTING.md's example retriever, loaded through SAGEGRAPH_RETRIEVERS (which
    the CLI process and its Dask workers inherit), with no edit of sagegraph."""
    from pathlib import Path

    from mlflow.tracking import MlflowClient

    examples = Path(__file__).resolve().parents[2] / "docs" / "examples"
    monkeypatch.setenv("SAGEGRAPH_RETRIEVERS", "neighbour_vote")
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [str(examples), os.environ.get("PYTHONPATH")])))

    spec = {
        "name": "t",
        "graph": str(graph_dir),
        "questions": str(ottqa_dir / "questions.jsonl"),
        "out": str(tmp_path / "sweep"),
        "mlflow": {"experiment": "test"},
        "grid": [
            {"retriever": ["hybrid"], "k": [1, 2, 4]},
            {"retriever": ["sage"], "total_k": [2, 4], "seed_share": [0.5]},
            {"retriever": ["bm25", "nope"], "k": [2]},
            {"retriever": ["neighbour-vote"], "k": [2], "params": {"depth": 5}},
        ],
        "edges": {"percentile": [60, 95]},
        "plot_totals": [2, 4],
    }
    bad = tmp_path / "bad.yaml"
    bad.write_text(yaml.safe_dump(spec))
    res = sagegraph("sweep", str(bad))
    assert res.returncode == 2 and "unknown retriever 'nope'" in res.stderr  # rejected before any work
    spec["grid"][2]["retriever"] = ["bm25"]
    p = tmp_path / "sweep.yaml"
    p.write_text(yaml.safe_dump(spec))
    first = sagegraph("sweep", str(p), "--flow", "--workers", "1")  # the flow's path; a second worker only costs CPU
    assert first.returncode == 0, first.stderr[-3000:]
    summary = json.loads(first.stdout.strip().splitlines()[-1])
    assert (
        "bm25[k=2]: 12 of 12 questions to run" in first.stderr and "bm25[k=2]: 12/12 questions" in first.stderr
    )  # progress, in the task's log
    assert (
        summary["configurations"] == 10
    )  # 3 hybrid + bm25, and 2 sage splits and the example on each of 2 edge variants
    assert {(r["k"], r["edges"]) for r in summary["figure4"]} == {
        (k, f"percentile={p}") for k in (2, 4) for p in (60, 95)
    }
    assert all("extended_bl" in r for r in summary["figure4"])
    out = tmp_path / "sweep"
    assert (out / "recall_at_k.png").exists() and (out / "summary.csv").read_text().count("\n") == 11
    variants = json.loads((out / "edge_variants.json").read_text())
    assert variants["percentile=60"]["edges"] > variants["percentile=95"]["edges"]
    client = MlflowClient(tracking_uri=f"sqlite:///{out / 'mlflow.db'}")
    exp = client.get_experiment_by_name("test")
    runs = client.search_runs([exp.experiment_id])
    parent = [r for r in runs if r.data.tags.get("sagegraph.kind") == "sweep"]
    children = [r for r in runs if r.data.tags.get("mlflow.parentRunId") == parent[0].info.run_id]
    assert len(parent) == 1 and len(children) == 10
    view = f"open: http://127.0.0.1:5000/#/experiments/{exp.experiment_id}/runs?viewStateShareKey=sagegraph"
    assert (
        view in first.stdout and "mlflow ui --backend-store-uri sqlite:///" in first.stdout
    )  # the runs view, with its columns
    assert "metrics.`recall_at_4`" in json.loads(exp.tags["mlflow.sharedViewState.sagegraph"])["selectedColumns"]
    assert sorted(
        c.data.params["edges.percentile"] for c in children if c.data.params["retriever"] == "neighbour-vote"
    ) == ["60", "95"]
    assert "neighbour-vote[k=2,depth=5]" in (out / "comparison.csv").read_text()
    assert sorted(c.data.params["edges.percentile"] for c in children if c.data.params["retriever"] == "sage") == [
        "60",
        "60",
        "95",
        "95",
    ]
    assert any(k.startswith("bl_graph_gain_at_2/percentile_60") for k in parent[0].data.metrics)
    child = children[0]
    assert {"recall_at_2", "hit_at_1", "mrr"} <= set(child.data.metrics) and "retriever" in child.data.params
    assert {a.path for a in client.list_artifacts(child.info.run_id)} >= {"per_query.csv", "run.trec", "metrics.json"}
    assert {a.path for a in client.list_artifacts(parent[0].info.run_id)} >= {"summary.csv", "recall_at_k.png"}
    # a rerun resumes: finished configurations are neither re-evaluated nor logged twice; with
    # nothing left to run, the report is made in the CLI's process, with no server or worker
    before = {f: (out / f).read_text() for f in ("summary.csv", "comparison.csv", "figure4.json")}
    second = sagegraph("sweep", str(p))
    assert second.returncode == 0, second.stderr[-3000:]
    assert "every configuration finished on these inputs" in second.stdout and "Prefect API" not in second.stdout
    assert {f: (out / f).read_text() for f in before} == before
    runs = client.search_runs([exp.experiment_id])
    assert len(runs) == 11
    from sagegraph.eval.runner import run_dir
    from sagegraph.eval.sweep import configurations, load_sweep
    from sagegraph.sweeps import finished_sweep

    # read here without the example retriever (registered in the CLI's processes, not in this one)
    builtin = tmp_path / "builtin.yaml"
    builtin.write_text(
        yaml.safe_dump({**spec, "grid": [g for g in spec["grid"] if g["retriever"] != ["neighbour-vote"]]})
    )
    monkeypatch.delenv("SAGEGRAPH_RETRIEVERS")
    cfg = load_sweep(builtin)
    bm25 = run_dir(out / "runs", next(c for c in configurations(cfg) if c.retriever == "bm25"))
    stamp = (bm25 / "inputs.txt").read_text()
    (bm25 / "inputs.txt").write_text("made-on-other-inputs")
    assert finished_sweep(cfg) is None  # a run made on other inputs is run again, by the flow
    (bm25 / "inputs.txt").write_text(stamp)
    (bm25 / "metrics.json").unlink()
    assert finished_sweep(cfg) is None  # so is one that did not finish


def test_sweep_rebuilds_a_graph_built_from_other_settings(ottqa_dir, tmp_path, monkeypatch):
    import sagegraph.flows.build_graph
    from sagegraph.config import load_config
    from sagegraph.construct.artifacts import Layout
    from sagegraph.eval.sweep import SweepConfig
    from sagegraph.flows.sweep import ensure_graph
    from tests.fixtures import write_config

    conf = write_config(
        tmp_path / "c.yaml", {"kind": "ottqa", "path": str(ottqa_dir)}, tmp_path / "out", store={"backend": "none"}
    )
    built = []

    class FakeFlow:
        def with_options(self, **_):
            return lambda cfg: built.append(cfg)

    monkeypatch.setattr(sagegraph.flows.build_graph, "build_graph", FakeFlow())
    sweep_cfg = SweepConfig(build=conf, grid=[{"retriever": ["bm25"], "k": [2]}])
    ensure_graph(sweep_cfg)
    assert len(built) == 1  # nothing built yet
    graph = tmp_path / "out" / "graph"
    graph.mkdir(parents=True)
    (graph / "edges.parquet").write_bytes(b"")
    (graph / "manifest.json").write_text(json.dumps({"fingerprint": Layout.of(load_config(conf)).cfg_fp["edges"]}))
    ensure_graph(sweep_cfg)
    assert len(built) == 1  # up to date: not rebuilt
    (graph / "manifest.json").write_text(json.dumps({"fingerprint": "from-other-settings"}))
    ensure_graph(sweep_cfg)
    assert len(built) == 2


def test_sweep_on_a_missing_corpus_fails_before_prefect_starts(tmp_path, monkeypatch, capsys):
    import sagegraph.flows.runtime
    from sagegraph.cli import main
    from tests.fixtures import write_config

    conf = write_config(
        tmp_path / "c.yaml",
        {"kind": "ottqa", "path": str(tmp_path / "no-such-dir")},
        tmp_path / "out",
        store={"backend": "none"},
    )
    spec = tmp_path / "sweep.yaml"
    spec.write_text(
        yaml.safe_dump(
            {"build": str(conf), "out": str(tmp_path / "sweep"), "grid": [{"retriever": ["bm25"], "k": [2]}]}
        )
    )

    def no_server(*_a, **_k):
        raise AssertionError("a Prefect server was started for a sweep that cannot build its graph")

    monkeypatch.setattr(sagegraph.flows.runtime, "prefect_api", no_server)
    assert main(["sweep", str(spec)]) == 2
    err = capsys.readouterr().err
    assert (
        "corpus.path (ottqa reads tables.jsonl, passages.jsonl there): " in err and "no-such-dir does not exist" in err
    )


def test_a_sweep_experiment_opens_on_its_runs_and_keeps_artifacts_beside_its_database(tmp_path, monkeypatch):
    """MLflow 3 opens an experiment on its GenAI overview unless tagged as model development, and
    artifacts went to ./mlruns under whatever directory the command ran from."""
    from mlflow.tracking import MlflowClient

    from sagegraph.tracking import EXPERIMENT_KIND, SweepTracker, default_tracking_uri

    monkeypatch.chdir(tmp_path)  # where a command would have left ./mlruns
    out = tmp_path / "sweep"
    out.mkdir()
    uri = default_tracking_uri(out)
    tracker = SweepTracker(uri, "exp", out / "mlflow_parent.json", "sweep")
    exp = MlflowClient(uri).get_experiment(tracker.experiment_id)
    assert exp.tags[EXPERIMENT_KIND[0]] == EXPERIMENT_KIND[1]
    (tmp_path / "table.csv").write_text("a,b\n1,2\n")
    tracker.log_summary([tmp_path / "table.csv"])
    assert list((out / "mlartifacts").rglob("table.csv")) and not (tmp_path / "mlruns").exists()
    # an experiment made before (no kind, or one MLflow inferred) is told too
    client = MlflowClient(uri)
    old = client.create_experiment("older")
    SweepTracker(uri, "older", out / "p2.json", "sweep")
    assert client.get_experiment(old).tags[EXPERIMENT_KIND[0]] == EXPERIMENT_KIND[1]


def test_a_sweep_shares_a_runs_view_with_its_metrics_in_columns(tmp_path):
    """MLflow has no server-side default columns; the sweep saves its layout as the experiment's
    shared view (the tag the UI's Share button writes) and prints the URL that opens it."""
    from mlflow.tracking import MlflowClient

    from sagegraph.tracking import VIEW_KEY, VIEW_TAG_PREFIX, SweepTracker, default_tracking_uri, view_columns

    results = [
        (
            EvalConfig("hybrid", 20, {"alpha": 0.3}),
            {"hit@1": 0.1, "mrr": 0.2, "recall@5": 0.3, "recall@20": 0.5, "errors": 0},
        ),
        (EvalConfig("spark", 20), {"hit@1": 0.4, "recall@20": 0.6, "llm_calls_per_query": 1.0, "questions": 10}),
    ]
    cols = view_columns(results, [5, 20])
    assert cols == [
        "params.`retriever`",
        "params.`k`",
        "params.`params.alpha`",
        "metrics.`hit_at_1`",
        "metrics.`mrr`",
        "metrics.`recall_at_5`",
        "metrics.`recall_at_20`",
        "metrics.`errors`",
        "metrics.`llm_calls_per_query`",
    ]
    assert "metrics.`recall_at_20`" in view_columns(results) and "metrics.`recall_at_5`" not in view_columns(
        results
    )  # no plot: each config's k
    out = tmp_path / "sweep"
    out.mkdir()
    tracker = SweepTracker(default_tracking_uri(out), "exp", out / "mlflow_parent.json", "sweep")
    url = tracker.share_view(cols)
    assert url == f"http://127.0.0.1:5000/#/experiments/{tracker.experiment_id}/runs?viewStateShareKey={VIEW_KEY}"
    tag = MlflowClient(tracker.tracking_uri).get_experiment(tracker.experiment_id).tags[VIEW_TAG_PREFIX + VIEW_KEY]
    assert json.loads(tag)["selectedColumns"] == cols and json.loads(tag)["orderByKey"] == "metrics.`mrr`"
