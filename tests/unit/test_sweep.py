import json

import pytest
import yaml

from sagegraph.errors import ConfigError
from sagegraph.eval.runner import EvalConfig
from sagegraph.eval.sweep import GridBlock, configurations, expand, figure4, groups, load_sweep, plot_figure4
from sagegraph.retrieve.spark.retriever import PROMPT_VERSION as SPARK_PROMPT


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


def test_a_new_local_tracking_store_is_a_copy_of_an_empty_migrated_one(tmp_path, monkeypatch):
    """MLflow migrating each new out dir's database took 4.7 s of a sweep's start; a new local store
    is a copy of one migrated once per MLflow version, its Default experiment's artifacts beside it,
    and anything unusual leaves the store to MLflow."""
    import sqlite3

    from sagegraph import empty_db
    from sagegraph.tracking import SweepTracker, seed_local_store

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    uri = f"sqlite:///{tmp_path / 'out' / 'mlflow.db'}"
    assert seed_local_store(uri)
    with sqlite3.connect(tmp_path / "out" / "mlflow.db") as db:
        assert db.execute("select version_num from alembic_version").fetchone()[0]
        assert db.execute("select count(*) from runs").fetchone()[0] == 0
    assert not seed_local_store(uri)  # a store that is there is kept
    assert not [p.name for p in (tmp_path / "out").iterdir() if p.name.startswith(".")]  # no staged copy left
    assert not seed_local_store("http://127.0.0.1:5000")  # a server keeps its own
    tracker = SweepTracker(uri, "sweep", tmp_path / "out" / "parent.json", "s")
    assert tracker.client.get_experiment("0").artifact_location == f"{(tmp_path / 'out' / 'mlartifacts').as_uri()}/0"
    (tmp_path / "file").write_text("")
    monkeypatch.setattr(empty_db, "template_path", lambda tool, version: tmp_path / "file" / "empty.db")  # unwritable
    other = f"sqlite:///{tmp_path / 'other' / 'mlflow.db'}"
    assert not seed_local_store(other) and not (tmp_path / "other" / "mlflow.db").exists()  # MLflow makes its own
