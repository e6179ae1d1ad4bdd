"""The per-group table of a KB sweep, on a hand-written sweep directory: groups from the question
file, `all`, and a diagnostic column that leaves out questions whose trace lacks it."""

import json
from pathlib import Path

from sagegraph.eval.diagnose import group_runs, group_table


def _sweep(tmp_path: Path) -> Path:
    qs = [
        {"id": f"q{i}", "question": f"question {i}", "answer_ids": ["a"], "hops": 2 if i < 2 else 3} for i in range(4)
    ]
    (tmp_path / "questions.sample.jsonl").write_text("".join(json.dumps(q) + "\n" for q in qs))
    run = tmp_path / "runs" / "r1"
    run.mkdir(parents=True)
    (run / "config.json").write_text(json.dumps({"label": "dgr[k=20]"}))
    (run / "metrics.json").write_text("{}")
    rows = []
    for i in range(4):
        row = {
            "qid": f"q{i}",
            "hit@1": float(i == 0),
            "hit@5": float(i < 2),
            "recall@20": 0.5,
            "mrr": 0.25,
            "llm_calls": 2,
        }
        if i != 3:  # q3's trace has no agent step (an error): it must not count as "not shown"
            row["diagnostics"] = {"seen_hit": float(i in (0, 2))}
        rows.append(row)
    (run / "per_query.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return tmp_path


def test_groups_and_a_diagnostic_column(tmp_path):
    [(label, per)] = group_runs(_sweep(tmp_path), "hops")
    table = {r["group"]: r for r in group_table(label, per, ("seen_hit",))}
    assert set(table) == {"2", "3", "all"}
    assert table["2"]["questions"] == 2 and table["2"]["hit@1"] == 0.5 and table["3"]["hit@1"] == 0.0
    assert table["2"]["seen_hit"] == 0.5
    assert table["3"]["seen_hit"] == 1.0  # q2 shown; q3 left out, not scored 0
    assert table["all"]["seen_hit"] == round(2 / 3, 3)
    assert "seen_hit" not in group_table(label, per)[0]
