"""The side-by-side report: paired bootstrap intervals, the comparison rows read from run
directories, and the two plots, on hand-written per-query results."""

import json

import pytest

from sagegraph.eval.compare import compare_files, load_results, paired_bootstrap
from sagegraph.eval.runner import EvalConfig


def _run(runs, cfg: EvalConfig, hits: list[float], recalls: list[float], extra=None):
    d = runs / cfg.key()
    d.mkdir(parents=True)
    (d / "config.json").write_text(json.dumps({**cfg.__dict__, "label": cfg.label()}))
    with (d / "per_query.jsonl").open("w") as fh:
        for i, (h, r) in enumerate(zip(hits, recalls)):
            fh.write(json.dumps({"qid": f"q{i}", "hit@1": h, "recall@20": r}) + "\n")
    m = {
        "questions": len(hits),
        "hit@1": sum(hits) / len(hits),
        "recall@20": sum(recalls) / len(recalls),
        **(extra or {}),
    }
    (d / "metrics.json").write_text(json.dumps(m))


def test_paired_bootstrap_centres_on_the_mean_difference_and_excludes_zero_only_when_it_should():
    same = {f"q{i}": float(i % 2) for i in range(40)}
    assert paired_bootstrap(same, same) == {"questions": 40, "diff": 0.0, "ci_low": 0.0, "ci_high": 0.0}
    better = {q: 1.0 for q in same}
    ci = paired_bootstrap(better, same)
    assert ci["diff"] == 0.5 and 0 < ci["ci_low"] < 0.5 < ci["ci_high"] <= 1.0
    noisy = {q: float((i * 7) % 3 == 0) for i, q in enumerate(same)}
    ci = paired_bootstrap(noisy, same)
    assert ci["ci_low"] < ci["diff"] < ci["ci_high"]
    assert paired_bootstrap({"q0": 1.0}, {"q1": 0.0})["diff"] is None  # no question in common
    # only questions both runs scored are paired
    assert paired_bootstrap({**better, "extra": 1.0}, same)["questions"] == 40


def test_comparison_rows_intervals_and_plots_from_run_directories(tmp_path):
    runs = tmp_path / "runs"
    n = 30
    _run(runs, EvalConfig(retriever="hybrid", k=20), [0.0] * n, [0.1] * n)
    _run(
        runs,
        EvalConfig(retriever="spark", k=20),
        [1.0] * 20 + [0.0] * 10,
        [0.6] * n,
        {"llm_calls_per_query": 1.0, "llm_work_seconds_per_query": 4.0, "llm_cost_usd_per_query": 0.001},
    )
    results = load_results(runs)
    assert {c.retriever for c, _ in results} == {"hybrid", "spark"}
    files = compare_files(results, runs, tmp_path)
    assert {f.name for f in files} == {"comparison.csv", "comparison.json", "retrievers_bar.png", "quality_vs_cost.png"}
    assert all(f.stat().st_size > 0 for f in files)
    rows = {r["retriever"]: r for r in json.loads((tmp_path / "comparison.json").read_text())}
    assert "hit@1 vs hybrid" not in rows["hybrid"]
    spark = rows["spark"]
    assert (
        spark["hit@1 vs hybrid"]["diff"] == pytest.approx(20 / 30, abs=1e-6)
        and spark["hit@1 vs hybrid"]["ci_low"] > 0.4
    )
    assert spark["recall@20 vs hybrid"]["diff"] == pytest.approx(0.5) and spark["llm_seconds/q"] == 4.0
    assert spark["hit@1 interval"]["mean"] == pytest.approx(20 / 30, abs=1e-6)
    assert spark["hit@1 interval"]["ci_low"] < 20 / 30 < spark["hit@1 interval"]["ci_high"]
    assert rows["hybrid"]["recall@20 interval"] == {
        "questions": n,
        "mean": 0.1,
        "ci_low": 0.1,
        "ci_high": 0.1,
    }  # no spread
    header = (tmp_path / "comparison.csv").read_text().splitlines()[0]
    assert "hit@1 vs hybrid diff" in header and "hit@1 interval ci_low" in header
    assert compare_files(results[:1], runs, tmp_path / "one") == []  # one retriever: nothing to compare


def test_the_compare_command_reads_a_sweeps_finished_runs(tmp_path, capsys):
    from sagegraph.cli import main

    runs = tmp_path / "runs"
    _run(runs, EvalConfig(retriever="hybrid", k=20), [0.0, 1.0, 0.0], [0.2, 0.4, 0.0])
    assert main(["compare", str(tmp_path)]) == 2  # one retriever: a clear error, no files
    assert "fewer than two retrievers" in capsys.readouterr().err
    _run(runs, EvalConfig(retriever="bm25", k=20), [1.0, 1.0, 0.0], [0.5, 0.4, 0.1])
    assert main(["compare", str(tmp_path), "--json"]) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    bm25 = json.loads(lines[0])
    assert bm25["config"] == "bm25[k=20]" and bm25["hit@1 vs hybrid"]["questions"] == 3
    assert (
        main(["compare", str(tmp_path)]) == 0
    )  # for a person: a table, the difference to the baseline with its interval
    table = capsys.readouterr().out.splitlines()
    assert table[0].split()[:3] == ["config", "q", "hit@1"] and "(vs hybrid [95% CI])" in table[0]
    row = next(line for line in table if line.startswith("bm25[k=20]"))
    diff = bm25["hit@1 vs hybrid"]
    assert f"{bm25['hit@1']:.3f} ({diff['diff']:+.3f} [{diff['ci_low']:+.3f}, {diff['ci_high']:+.3f}])" in row
    assert next(line for line in table if line.startswith("hybrid[")).split()[2] == f"{0.0 + 1.0 / 3:.3f}"
    assert (tmp_path / "retrievers_bar.png").exists() and (tmp_path / "quality_vs_cost.png").exists()


def test_a_run_still_going_is_compared_only_when_asked_and_on_the_questions_it_has_done(tmp_path, capsys):
    from sagegraph.cli import main
    from sagegraph.eval.metrics import metric_names
    from sagegraph.eval.runner import recall_ks

    runs = tmp_path / "runs"
    _run(runs, EvalConfig(retriever="hybrid", k=20), [0.0, 1.0, 0.0, 0.0], [0.2, 0.4, 0.0, 0.1])
    _run(runs, EvalConfig(retriever="bm25", k=20), [1.0, 1.0, 0.0, 1.0], [0.5, 0.4, 0.1, 0.3])
    going = EvalConfig(retriever="dgr", k=20)
    d = runs / going.key()
    d.mkdir()
    (d / "config.json").write_text(json.dumps({**going.__dict__, "label": going.label()}))
    keys = metric_names(recall_ks(going))
    rows = [
        {"qid": "q0", **dict.fromkeys(keys, 1.0), "latency_ms": 5.0, "llm_calls": 4},
        {"qid": "q2", **dict.fromkeys(keys, 0.0), "latency_ms": 7.0, "llm_calls": 6},
    ]
    (d / "per_query.jsonl").write_text(
        "".join(json.dumps(r) + "\n" for r in rows) + '{"qid": "q3", "hit'
    )  # a line cut by a crash
    assert [c.retriever for c, _ in load_results(runs)] == ["bm25", "hybrid"]  # finished runs only, in table order
    assert main(["compare", str(tmp_path), "--partial", "--json"]) == 0
    out = [json.loads(x) for x in capsys.readouterr().out.strip().splitlines()[:-1]]
    dgr = next(r for r in out if r["retriever"] == "dgr")
    assert (
        dgr["partial"]
        and dgr["config"] == "dgr[k=20] (partial: 2 q)"
        and dgr["questions"] == 2
        and dgr["llm_calls/q"] == 5.0
    )
    assert (
        dgr["hit@1 vs hybrid"]["questions"] == 2 and dgr["hit@1 vs hybrid"]["diff"] == 0.5
    )  # paired on q0 and q2 only
    assert not next(r for r in out if r["retriever"] == "bm25")["partial"]
    assert (tmp_path / "partial" / "comparison.csv").exists() and not (tmp_path / "comparison.csv").exists()
    # a run left from an earlier prompt version is told apart by it, not shown as a second twin
    old = EvalConfig(retriever="dgr", k=20, prompt="dgr-1")
    (runs / old.key()).mkdir()
    (runs / old.key() / "config.json").write_text(json.dumps({**old.__dict__, "label": old.label()}))
    (runs / old.key() / "per_query.jsonl").write_text(json.dumps(rows[0]) + "\n")
    assert main(["compare", str(tmp_path), "--partial", "--json"]) == 0
    labels = {json.loads(x)["config"] for x in capsys.readouterr().out.strip().splitlines()[:-1]}
    assert {"dgr[k=20] (dgr-1) (partial: 1 q)", f"dgr[k=20] ({going.key()}) (partial: 2 q)"} <= labels


def test_configurations_are_listed_with_their_numbers_in_numeric_order(tmp_path):
    runs = tmp_path / "runs"
    for t in (20, 5, 10):
        _run(runs, EvalConfig(retriever="dgr", k=20, params={"t_max": t}), [0.0, 1.0], [0.5, 0.5])
    _run(runs, EvalConfig(retriever="bm25", k=20), [0.0, 1.0], [0.5, 0.5])
    labels = [c.label() for c, _ in load_results(runs)]
    assert labels == ["bm25[k=20]", "dgr[k=20,t_max=5]", "dgr[k=20,t_max=10]", "dgr[k=20,t_max=20]"]
