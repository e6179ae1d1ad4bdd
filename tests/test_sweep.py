import json
import os

import pytest
import yaml

from sagegraph.errors import ConfigError
from sagegraph.eval.runner import EvalConfig
from sagegraph.eval.sweep import GridBlock, configurations, expand, figure4, groups, load_sweep, plot_figure4
from sagegraph.retrieve.spark.retriever import PROMPT_VERSION as SPARK_PROMPT
from tests.fixtures import sagegraph


def test_grid_expansion_and_seed_groups():
    block = GridBlock(retriever=["sage"], total_k=[10, 20], seed_share=[0.5, 0.7], k=[5])
    cfgs = expand(block)
    pairs = sorted((c.k, c.params["k_prime"]) for c in cfgs)
    assert pairs == [(5, 5), (5, 15), (7, 3), (10, 10), (14, 6)]  # (5, 5) from both forms, once
    grp = groups(cfgs + expand(GridBlock(retriever=["hybrid"], k=[5, 10])))
    sizes = sorted(len(g) for g in grp)
    assert sizes == [1, 1, 1, 1, 1, 2]  # the two k=5 sage configurations share their seeds
    plain = expand(GridBlock(retriever=["sage"], k=[3], k_prime=[0, 4]))
    assert sorted((c.k, c.params["k_prime"]) for c in plain) == [(3, 0), (3, 4)]
    assert [c.total for c in sorted(plain, key=lambda c: c.total)] == [3, 7]


def test_figure4_picks_the_best_split_per_k():
    res = [
        (EvalConfig("hybrid", 10), {"recall@10": 0.50}),
        (EvalConfig("hybrid", 5), {"recall@5": 0.40, "recall@10": 0.40}),
        (EvalConfig("hybrid", 7), {"recall@10": 0.45}),
        (EvalConfig("sage", 5, {"k_prime": 5}), {"recall@10": 0.56}),
        (EvalConfig("sage", 7, {"k_prime": 3}), {"recall@10": 0.53}),
    ]
    (row,) = figure4(res, [10])
    assert row == {
        "k": 10,
        "edges": "",
        "baseline": "hybrid",
        "extended_bl": 0.50,
        "bl_graph": 0.56,
        "k1": 5,
        "k2": 5,
        "bl": 0.40,
        "gain": pytest.approx(0.06),
    }
    # per edge variant: BL+Graph from that variant's sage runs, the same Extended BL
    res.append((EvalConfig("sage", 5, {"k_prime": 5}, edges="percentile=80"), {"recall@10": 0.60}))
    (row80,) = figure4(res, [10], "percentile=80")
    assert row80["bl_graph"] == 0.60 and row80["extended_bl"] == 0.50 and row80["edges"] == "percentile=80"


def test_the_recall_at_k_plot_is_drawn_only_when_it_has_a_line(tmp_path):
    rows = figure4(
        [(EvalConfig("hybrid", 10), {"recall@10": 0.5}), (EvalConfig("sage", 5, {"k_prime": 5}), {"recall@10": 0.6})],
        [10],
    )
    path = plot_figure4(rows, tmp_path / "fig.png")
    assert path == tmp_path / "fig.png" and path.stat().st_size > 0
    only_bm25 = figure4([(EvalConfig("bm25", 10), {"recall@10": 0.5})], [10])
    assert plot_figure4(only_bm25, tmp_path / "none.png") is None and not (tmp_path / "none.png").exists()


def test_bad_sweep_file_is_a_clear_error(tmp_path):
    p = tmp_path / "s.yaml"
    p.write_text(yaml.safe_dump({"graph": "g", "grid": [{"retriever": ["sage"], "k_prime": [-1]}]}))
    with pytest.raises(ConfigError, match="grid.0"):
        load_sweep(p)
    p.write_text(
        yaml.safe_dump({"graph": "g", "grid": [{"retriever": ["sage"], "k": [2]}], "edges": {"percentile": [90, 100]}})
    )
    with pytest.raises(ConfigError, match=r"s.yaml: edges.percentile: .*less than 100.*100"):
        load_sweep(p)
    p.write_text(
        yaml.safe_dump({"graph": "g", "grid": [{"retriever": ["sage"], "k": [2]}], "edges": {"percentil": [90]}})
    )
    with pytest.raises(ConfigError, match="unknown setting.*percentil"):
        load_sweep(p)


def test_edge_axis_runs_edge_retrievers_per_variant_only():
    from sagegraph.eval.sweep import SweepConfig, configurations

    cfg = SweepConfig(
        graph="g",
        grid=[{"retriever": ["hybrid", "sage"], "k": [2], "k_prime": [3]}],
        edges={"percentile": [90, 99], "logic": ["or", "and"]},
    )
    cfgs = configurations(cfg)
    assert sorted(c.edges for c in cfgs if c.retriever == "sage") == [
        "logic=and,percentile=90",
        "logic=and,percentile=99",
        "logic=or,percentile=90",
        "logic=or,percentile=99",
    ]
    assert [c.edges for c in cfgs if c.retriever == "hybrid"] == [""]
    assert (
        len(groups(cfgs)) == 5
        and EvalConfig("sage", 2, {"k_prime": 3}).key()
        != EvalConfig("sage", 2, {"k_prime": 3}, edges="percentile=90").key()
    )


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


@pytest.mark.e2e
def test_sweep_end_to_end_with_mlflow_and_resume(graph_dir, ottqa_dir, tmp_path, monkeypatch):
    """Also runs CONTRIBUTING.md's example retriever, loaded through SAGEGRAPH_RETRIEVERS (which
    the CLI process and its Dask workers inherit), with no edit of sagegraph."""
    from pathlib import Path

    from mlflow.tracking import MlflowClient

    examples = Path(__file__).resolve().parents[1] / "docs" / "examples"
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
    first = sagegraph("sweep", str(p))
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
    # a rerun resumes: finished configurations are neither re-evaluated nor logged twice
    second = sagegraph("sweep", str(p))
    assert second.returncode == 0, second.stderr[-3000:]
    runs = client.search_runs([exp.experiment_id])
    assert len(runs) == 11


@pytest.mark.e2e
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


@pytest.mark.e2e
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


def test_grid_params_expand_validate_and_carry_the_prompt_version(tmp_path):
    from sagegraph.eval.sweep import configurations, param_grid

    assert param_grid({"repair": [True, False], "max_rows": 500}) == [
        {"repair": True, "max_rows": 500},
        {"repair": False, "max_rows": 500},
    ]
    base = {"graph": str(tmp_path), "out": str(tmp_path / "o")}
    path = tmp_path / "s.yaml"
    path.write_text(
        yaml.safe_dump(
            {
                **base,
                "grid": [
                    {"retriever": ["spark"], "k": [10], "params": {"repair": [True, False]}},
                    {"retriever": ["sage"], "seed_retriever": ["spark"], "k": [5], "k_prime": [5]},
                ],
            }
        )
    )
    cfgs = configurations(load_sweep(path))
    spark = [c for c in cfgs if c.retriever == "spark"]
    assert sorted(c.params["repair"] for c in spark) == [False, True] and len({c.key() for c in cfgs}) == 3
    assert {c.prompt for c in cfgs} == {SPARK_PROMPT}  # sage seeded by spark carries spark's prompt version
    import dataclasses

    assert dataclasses.replace(spark[0], prompt="spark-1").key() != spark[0].key()  # a changed prompt reruns
    assert (
        EvalConfig("hybrid", 20).key() == EvalConfig("hybrid", 20, params={}, prompt="").key()
    )  # older keys stay valid
    path.write_text(
        yaml.safe_dump({**base, "grid": [{"retriever": ["spark"], "k": [10], "params": {"repiar": [True]}}]})
    )
    with pytest.raises(ConfigError, match=r"grid\.0\.params.*repiar"):
        load_sweep(path)
    path.write_text(yaml.safe_dump({**base, "llm": "nowhere.yaml", "grid": [{"retriever": ["bm25"], "k": [10]}]}))
    with pytest.raises(ConfigError, match="nowhere.yaml"):
        load_sweep(path)


def test_question_sample_is_stratified_deterministic_and_verbatim(tmp_path):
    from sagegraph.corpus.questions import load_questions, sample_questions, write_question_subset

    src = tmp_path / "q.jsonl"
    src.write_text(
        "".join(
            json.dumps(
                {
                    "id": f"q{i}",
                    "question": f"question {i}?",
                    "answer_ids": [f"a{i}"],
                    "family": "ab"[i % 3 == 0],
                    "x": i,
                }
            )
            + "\n"
            for i in range(30)
        )
    )
    qs = load_questions(src)
    picked = sample_questions(qs, 10, "family", seed=1)
    assert [q.id for q in picked] == [q.id for q in sample_questions(qs, 10, "family", seed=1)]
    assert sum(q.meta["family"] == "b" for q in picked) == 5  # 10 of 30 with 10 in 'b': half each, not a third
    assert [q.id for q in sample_questions(qs, 10, "family", seed=2)] != [q.id for q in picked]
    out = write_question_subset(src, {q.id for q in picked}, tmp_path / "sub.jsonl")
    assert [q.meta["x"] for q in load_questions(out)] == [q.meta["x"] for q in picked]


def test_a_block_key_no_retriever_of_the_block_takes_is_refused(tmp_path):
    p = tmp_path / "s.yaml"
    p.write_text(yaml.safe_dump({"graph": "g", "grid": [{"retriever": ["bm25", "hybrid"], "k": [2], "k_prim": [3]}]}))
    with pytest.raises(ConfigError, match="grid.0: no retriever of this block .* takes 'k_prim'"):
        load_sweep(p)
    p.write_text(yaml.safe_dump({"graph": "g", "grid": [{"retriever": ["bm25", "hybrid"], "k": [2], "alpha": [0.3]}]}))
    cfgs = {c.retriever: c for c in configurations(load_sweep(p))}
    assert cfgs["hybrid"].params == {"alpha": 0.3} and cfgs["bm25"].params == {}  # taken by the retriever that has it
    p.write_text(yaml.safe_dump({"graph": "g", "grid": [{"retriever": ["sage"], "total_k": [10]}]}))
    with pytest.raises(ConfigError, match="total_k needs k"):
        load_sweep(p)


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

    from sagegraph.eval.runner import EvalConfig
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


def test_a_sweep_ends_with_three_plain_lines_on_what_the_graph_did(tmp_path):
    from sagegraph.eval.sweep_report import plain_lines

    graph = tmp_path / "out" / "graph"
    (tmp_path / "out" / "stats").mkdir(parents=True)
    (tmp_path / "out" / "stats" / "graph_stats.json").write_text(json.dumps({"nodes": 10, "edges": 30}))
    rows = [
        {"k": 5, "edges": "", "baseline": "hybrid", "gain": 0.172},
        {"k": 20, "edges": "", "baseline": "hybrid", "gain": -0.01},
        {"k": 20, "edges": "percentile=90", "baseline": "hybrid", "gain": 0.5},
    ]
    built, compared, means = plain_lines(rows, graph, 717)
    assert (
        built.endswith("(10 nodes, 30 edges)")
        and "on 717 questions" in compared
        and "chosen on these questions" in compared
    )
    assert means == "means:     the graph's edges add Recall@k at some k only: +17.2 / -1.0 points at k = 5 / 20"
    assert plain_lines([{"k": 5, "baseline": "hybrid"}], graph, 3) == []  # nothing compared: nothing claimed
