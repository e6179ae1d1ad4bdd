import json

import pytest
import yaml

from sagegraph.errors import ConfigError
from sagegraph.eval.runner import EvalConfig
from sagegraph.eval.sweep import GridBlock, expand, figure4, groups, load_sweep
from tests.fixtures import sagegraph


def test_grid_expansion_and_seed_groups():
    block = GridBlock(retriever=["sage"], total_k=[10, 20], seed_share=[0.5, 0.7], k=[5])
    cfgs = expand(block)
    pairs = sorted((c.k, c.k_prime) for c in cfgs)
    assert pairs == [(5, 5), (5, 15), (7, 3), (10, 10), (14, 6)]  # (5, 5) from both forms, once
    grp = groups(cfgs + expand(GridBlock(retriever=["hybrid"], k=[5, 10])))
    sizes = sorted(len(g) for g in grp)
    assert sizes == [1, 1, 1, 1, 1, 2]  # the two k=5 sage configurations share their seeds
    plain = expand(GridBlock(retriever=["sage"], k=[3], k_prime=[0, 4]))
    assert sorted((c.k, c.k_prime) for c in plain) == [(3, 0), (3, 4)]


def test_figure4_picks_the_best_split_per_k():
    res = [
        (EvalConfig("hybrid", 10), {"recall@10": 0.50}),
        (EvalConfig("hybrid", 5), {"recall@5": 0.40, "recall@10": 0.40}),
        (EvalConfig("hybrid", 7), {"recall@10": 0.45}),
        (EvalConfig("sage", 5, 5), {"recall@10": 0.56}),
        (EvalConfig("sage", 7, 3), {"recall@10": 0.53}),
    ]
    (row,) = figure4(res, [10])
    assert row == {"k": 10, "extended_bl": 0.50, "bl_graph": 0.56, "k1": 5, "k2": 5, "bl": 0.40, "gain": pytest.approx(0.06)}


def test_bad_sweep_file_is_a_clear_error(tmp_path):
    p = tmp_path / "s.yaml"
    p.write_text(yaml.safe_dump({"graph": "g", "grid": [{"retriever": ["sage"], "k_prime": [-1]}]}))
    with pytest.raises(ConfigError, match="grid.0"):
        load_sweep(p)


def test_sweep_end_to_end_with_mlflow_and_resume(graph_dir, ottqa_dir, tmp_path):
    from mlflow.tracking import MlflowClient

    spec = {
        "name": "t", "graph": str(graph_dir), "questions": str(ottqa_dir / "questions.jsonl"), "out": str(tmp_path / "sweep"),
        "mlflow": {"experiment": "test"},
        "grid": [{"retriever": ["hybrid"], "k": [1, 2, 4]}, {"retriever": ["sage"], "total_k": [2, 4], "seed_share": [0.5]}, {"retriever": ["bm25", "nope"], "k": [2]}],
        "plot_totals": [2, 4],
    }
    bad = tmp_path / "bad.yaml"
    bad.write_text(yaml.safe_dump(spec))
    res = sagegraph("sweep", str(bad))
    assert res.returncode == 2 and "unknown retriever 'nope'" in res.stderr  # rejected before any work
    spec["grid"][2]["retriever"] = ["bm25"]
    p = tmp_path / "sweep.yaml"
    p.write_text(yaml.safe_dump(spec))
    first = sagegraph("sweep", str(p))
    assert first.returncode == 0, first.stderr[-3000:]
    summary = json.loads(first.stdout.strip().splitlines()[-1])
    assert summary["configurations"] == 6
    assert {r["k"] for r in summary["figure4"]} == {2, 4} and all("extended_bl" in r for r in summary["figure4"])
    out = tmp_path / "sweep"
    assert (out / "recall_at_k.png").exists() and (out / "summary.csv").read_text().count("\n") == 7
    client = MlflowClient(tracking_uri=f"sqlite:///{out / 'mlflow.db'}")
    exp = client.get_experiment_by_name("test")
    runs = client.search_runs([exp.experiment_id])
    parent = [r for r in runs if r.data.tags.get("sagegraph.kind") == "sweep"]
    children = [r for r in runs if r.data.tags.get("mlflow.parentRunId") == parent[0].info.run_id]
    assert len(parent) == 1 and len(children) == 6
    child = children[0]
    assert {"recall_at_2", "hit_at_1", "mrr"} <= set(child.data.metrics) and "retriever" in child.data.params
    assert {a.path for a in client.list_artifacts(child.info.run_id)} >= {"per_query.csv", "run.trec", "metrics.json"}
    assert {a.path for a in client.list_artifacts(parent[0].info.run_id)} >= {"summary.csv", "recall_at_k.png"}
    # a rerun resumes: finished configurations are neither re-evaluated nor logged twice
    second = sagegraph("sweep", str(p))
    assert second.returncode == 0, second.stderr[-3000:]
    runs = client.search_runs([exp.experiment_id])
    assert len(runs) == 7
