"""`sagegraph diagnose groups|failures|report` on a hand-written sweep directory over the test KB:
each reads only the run files (0 calls), gold only to classify, and each method's own reading of
its misses and its runs comes from the method (`miss_kind`, `run_report`)."""

import json
from pathlib import Path

import pytest

from sagegraph.cli import main
from sagegraph.eval.runner import EvalConfig
from tests.kb_mini import build_mini

SPARK_SHORT = {
    "plan": {"cypher": "MATCH (p:Person {name: 'Ana Silva'})-[:DIRECTED]->(m:Movie) RETURN m.id AS id"},
    "cypher_executed": "MATCH (p:Person {name: 'Ana Silva'})-[:DIRECTED]->(m:Movie) RETURN m.id AS id",
    "counters": {"fallback": 0},
}


def _run(sweep: Path, cfg: EvalConfig, graph: Path, rows: list[dict], traces: list[dict], metrics: dict) -> None:
    run = sweep / "runs" / cfg.key()
    run.mkdir(parents=True)
    (run / "config.json").write_text(json.dumps({**cfg.__dict__, "label": cfg.label(), "graph": str(graph)}))
    (run / "per_query.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (run / "traces.jsonl").write_text("".join(json.dumps(t) + "\n" for t in traces))
    (run / "metrics.json").write_text(json.dumps({"questions": len(rows), **metrics}))


@pytest.fixture()
def sweep(tmp_path):
    graph = tmp_path / "graph"
    build_mini(graph)
    questions = [
        {"id": "q0", "question": "Which films did Ana Silva direct?", "answer_ids": ["m1"], "hops": 1},
        {"id": "q1", "question": "Which studio made the films Ana Silva directed?", "answer_ids": ["s1"], "hops": 2},
        {"id": "q2", "question": "Who directed Paper Moon?", "answer_ids": ["p1"], "hops": 1},
    ]
    sweep = tmp_path / "sweep"
    sweep.mkdir()
    (sweep / "questions.sample.jsonl").write_text("".join(json.dumps(q) + "\n" for q in questions))
    hits = [1.0, 0.0, 0.0]
    rows = [
        {"qid": q["id"], "hit@1": h, "hit@5": h, "recall@20": h, "mrr": h, "llm_calls": 1}
        for q, h in zip(questions, hits)
    ]
    spark_traces = [
        {"qid": "q0", **SPARK_SHORT},
        {"qid": "q1", **SPARK_SHORT},
        {"qid": "q2", "plan": {"cypher": None}, "counters": {}},
    ]
    # a resumed run appended q1's row and trace again: each question counts once, its last row
    _run(
        sweep,
        EvalConfig(retriever="spark", k=20),
        graph,
        [*rows, rows[1]],
        [*spark_traces, spark_traces[1]],
        {"hit@1": 1 / 3, "llm_calls_per_query": 1.0},
    )
    agents = [{"prompt_tokens": [100, 180, 260]}]
    _run(
        sweep,
        EvalConfig(retriever="dgr", k=20, params={"n_agents": 1}),
        graph,
        rows,
        [{"qid": q["id"], "agents": agents, "events": [{"kind": "llm"}]} for q in questions],
        {
            "hit@1": 1 / 3,
            "count_agents": 3,
            "count_steps": 9,
            "count_global_calls": 3,
            "count_neighbour_calls": 6,
            "count_stop_t_max": 3,
            "count_fallback_answers": 2,
        },
    )
    return sweep


def test_groups_report_and_failures_read_a_sweeps_runs(sweep, capsys):
    assert main(["diagnose", "groups", str(sweep), "--by", "hops", "--json"]) == 0
    rows = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    spark = {r["group"]: r for r in rows if r["config"] == "spark[k=20]"}
    assert set(spark) == {"1", "2", "all"} and spark["1"]["hit@1"] == 0.5 and spark["2"]["hit@1"] == 0.0
    assert spark["2"]["questions"] == 1 and spark["all"]["questions"] == 3

    assert main(["diagnose", "report", str(sweep)]) == 0
    out = capsys.readouterr().out.splitlines()
    report = json.loads(out[-1])["runs"]
    dgr = next(r for r in report if r["config"].startswith("dgr["))
    assert (
        dgr["global_share"] == round(3 / 9, 3)
        and dgr["steps_per_agent"] == 3.0
        and dgr["fallback_share"] == round(2 / 3, 3)
    )
    assert dgr["prompt_tokens_by_step"] == {"1": 100, "2": 180, "3": 260}
    assert "global_share" not in next(
        r for r in report if r["config"].startswith("spark[")
    )  # a method's own columns only
    assert out[0].startswith("| config |")

    assert main(["diagnose", "failures", str(sweep), "--label", "spark[k=20]", "--label", "dgr[k=20,n_agents=1]"]) == 0
    found = json.loads(capsys.readouterr().out.splitlines()[-1])["misses"]
    # SPARK's reading: q1 walks one relation of a two-relation question, q2 wrote no query
    assert found["spark[k=20]"] == {"1": {"hit": 1, "no query": 1}, "2": {"fewer relations": 1}}
    assert found["dgr[k=20,n_agents=1]"] == {"1": {"hit": 1, "missed": 1}, "2": {"missed": 1}}  # no reading of its own


def test_a_label_the_sweep_did_not_run_is_one_clear_error(sweep, capsys):
    assert main(["diagnose", "failures", str(sweep), "--label", "af[k=20]"]) == 2
    assert "no finished run labelled ['af[k=20]']" in capsys.readouterr().err
    assert main(["diagnose", "groups", str(sweep.parent)]) == 2
    assert "not a sweep directory" in capsys.readouterr().err
