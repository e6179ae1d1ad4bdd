import json

import pytest
import pytrec_eval

from sagegraph.corpus.records import Question
from sagegraph.eval.evaluate import evaluate_group, evaluate_one, read_questions
from sagegraph.eval.metrics import mean_metrics, query_metrics
from sagegraph.eval.runner import EvalConfig, run_eval
from sagegraph.retrieve.graph_index import GraphIndex


def test_metric_definitions_on_a_crafted_ranking():
    ranked = ["a", "x", "b", "y", "c"]
    m = query_metrics(ranked, {"b", "c", "z"}, recall_ks=(2, 5, 100))
    assert m["hit@1"] == 0 and m["hit@5"] == 1 and m["mrr"] == pytest.approx(1 / 3)
    assert m["recall@2"] == 0 and m["recall@5"] == pytest.approx(2 / 3) and m["recall@100"] == pytest.approx(2 / 3)
    # recall is a fraction of gold covered, not a 0/1 hit; duplicates of a source count once
    assert query_metrics(["b", "b", "b"], {"b", "c"}, recall_ks=(2,))["recall@2"] == 0.5
    assert query_metrics(["q"], {"b"})["mrr"] == 0.0


def test_metrics_agree_with_pytrec_eval():
    import random

    rng = random.Random(0)
    qrels, run, ours = {}, {}, []
    docs = [f"d{i}" for i in range(60)]
    for q in range(40):
        gold = set(rng.sample(docs, rng.randint(1, 4)))
        ranked = rng.sample(docs, 30)  # unique sources: chunk level equals source level
        qrels[f"q{q}"] = {d: 1 for d in gold}
        run[f"q{q}"] = {d: float(30 - i) for i, d in enumerate(ranked)}
        ours.append(query_metrics(ranked, gold, recall_ks=(2, 5, 10, 20)))
    ev = pytrec_eval.RelevanceEvaluator(qrels, {"recall.2,5,10,20", "recip_rank", "success.1,5"})
    theirs = ev.evaluate(run)
    mean = mean_metrics(ours)
    for ours_key, trec_key in [
        ("recall@2", "recall_2"),
        ("recall@5", "recall_5"),
        ("recall@10", "recall_10"),
        ("recall@20", "recall_20"),
        ("mrr", "recip_rank"),
        ("hit@1", "success_1"),
        ("hit@5", "success_5"),
    ]:
        ref = sum(v[trec_key] for v in theirs.values()) / len(theirs)
        assert mean[ours_key] == pytest.approx(ref, abs=1e-9), ours_key


@pytest.fixture(scope="module")
def g(graph_dir, encoder):
    return GraphIndex(graph_dir, encoder=encoder)


@pytest.fixture(scope="module")
def questions(ottqa_dir):
    return read_questions(ottqa_dir / "questions.jsonl")


def test_evaluate_writes_run_artifacts(g, questions, tmp_path):
    m = evaluate_one(g, EvalConfig("hybrid", k=10), questions, tmp_path / "run")
    assert m["questions"] == 12 and 0 < m["recall@10"] <= 1 and m["gold_missing"] == 0
    assert set(m) >= {"hit@1", "hit@5", "recall@2", "recall@100", "mrr", "latency_p50_ms"}
    lines = (tmp_path / "run" / "run.trec").read_text().splitlines()
    qid, q0, doc, rank, score, tag = lines[0].split()
    assert q0 == "Q0" and rank == "1" and tag.startswith("hybrid")
    header = (tmp_path / "run" / "per_query.csv").read_text().splitlines()[0]
    assert header.startswith("qid,gold,ranked,hit@1") and "latency_ms" in header
    assert json.loads((tmp_path / "run" / "metrics.json").read_text())["recall@10"] == m["recall@10"]


def test_question_with_gold_outside_the_corpus_is_counted(g, questions, tmp_path):
    extra = Question("ghost", "Who wrote the missing book?", ["Not_A_Table_0", "/wiki/Nowhere"])
    m = evaluate_one(g, EvalConfig("bm25", k=5), questions + [extra], tmp_path / "run")
    assert m["gold_missing"] == 1 and m["questions"] == 12


def test_a_failing_question_is_counted_not_fatal(g, questions, tmp_path):
    blank = Question("blank", "   ", [questions[0].gold_sources[0]])
    m = evaluate_one(g, EvalConfig("sage", k=2, params={"k_prime": 2}), questions + [blank], tmp_path / "run")
    assert m["errors"] == 1 and m["questions"] == 13


def test_evaluation_resumes_after_a_crash(g, questions, tmp_path):
    cfg = EvalConfig("bm25", k=5)
    from sagegraph.retrieve import get_retriever

    r = get_retriever("bm25", g)
    seen = []

    def crashing(q):
        seen.append(q.id)
        if len(seen) == 5:
            raise KeyboardInterrupt  # a crash: not a question's error, the run itself stops
        return r.search(q.text, 5)

    with pytest.raises(KeyboardInterrupt):
        run_eval(g, questions, cfg, crashing, tmp_path / "run")
    seen.clear()
    m = run_eval(g, questions, cfg, lambda q: (seen.append(q.id), r.search(q.text, 5))[1], tmp_path / "run")
    assert len(seen) == 8 and m["questions"] == 12  # 4 finished before the crash were not redone


def test_a_finished_run_on_other_inputs_is_set_aside_not_reused(g, questions, tmp_path):
    cfg = EvalConfig("bm25", k=5)
    from sagegraph.retrieve import get_retriever

    r = get_retriever("bm25", g)
    seen = []

    def search(q):
        seen.append(q.id)
        return r.search(q.text, 5)

    run_eval(g, questions, cfg, search, tmp_path / "run")
    seen.clear()
    again = run_eval(g, questions, cfg, search, tmp_path / "run")
    assert seen == [] and not (tmp_path / "run.stale-1").exists()  # same inputs: everything reused
    changed = [Question(q.id, q.text + " (reworded)", q.gold_sources) for q in questions]
    m = run_eval(g, changed, cfg, search, tmp_path / "run")
    assert len(seen) == 12 and m["inputs"] != again["inputs"]  # other questions: all run again
    assert (tmp_path / "run.stale-1" / "per_query.jsonl").read_text().count("\n") == 12  # the old run is kept


def _count_hybrid_searches(monkeypatch) -> dict[str, int]:
    """Counts hybrid retrievals from here on (SAGE's seeds, in these tests)."""
    from sagegraph.retrieve.flat import HybridRetriever

    calls = {"n": 0}
    real = HybridRetriever._search

    def counting(self, query, k):
        calls["n"] += 1
        return real(self, query, k)

    monkeypatch.setattr(HybridRetriever, "_search", counting)
    return calls


def test_group_reuses_seeds_across_k_prime(g, questions, tmp_path, monkeypatch):
    cfgs = [EvalConfig("sage", k=3, params={"k_prime": kp}) for kp in (0, 2, 5)]
    calls = _count_hybrid_searches(monkeypatch)
    grouped = evaluate_group(g, cfgs, questions, tmp_path / "g")
    assert calls["n"] == len(questions)  # once per question, not once per k'
    single = evaluate_one(g, cfgs[2], questions, tmp_path / "one")
    assert grouped[2]["recall@100"] == single["recall@100"] and grouped[2]["mrr"] == single["mrr"]
    assert grouped[0]["recall@100"] <= grouped[1]["recall@100"] <= grouped[2]["recall@100"]


def test_progress_says_how_far_and_how_long_at_most_every_interval():
    from sagegraph.progress import Progress, duration

    now = [0.0]
    p = Progress("dgr[k=20]", total=10, resumed=4, every_s=30, clock=lambda: now[0])
    assert p.start_line() == "dgr[k=20]: 6 of 10 questions to run (4 done before, resumed)"
    now[0] = 20.0
    assert p.tick() is None  # within the interval
    now[0] = 300.0
    assert p.tick() == "dgr[k=20]: 6/10 questions, 2.5 min each, about 10.0 min left"  # pace from this process's 2
    now[0] = 301.0
    assert p.tick() is None
    for t in (302.0, 303.0):
        now[0] = t
        p.tick()
    now[0] = 360.0
    assert p.tick().endswith("10/10 questions, 60 s each, done")  # the last always says so
    assert Progress("x", total=3, resumed=3).start_line() is None
    assert (duration(42), duration(450), duration(4.1 * 3600)) == ("42 s", "7.5 min", "4.1 h")


def test_at_a_terminal_progress_is_one_live_line_and_the_last_stays(monkeypatch, capsys):
    import sys

    from sagegraph import progress

    now = [0.0]
    monkeypatch.setenv(progress.QUIET, "1")
    monkeypatch.setattr(sys.stderr, "isatty", lambda: True)
    p = progress.Progress("embed", total=3, every_s=30, unit="batches", clock=lambda: now[0])
    assert p.every_s == progress.LIVE_EVERY_S  # a live line moves every second, not every 30
    for t in (2.0, 4.0, 6.0):
        now[0] = t
        progress.show(p.tick())
    lines = capsys.readouterr().err.split(progress.CLEAR_LINE)
    assert lines == [
        "",
        "embed: 1/3 batches, 2 s each, about 4 s left",
        "embed: 2/3 batches, 2 s each, about 2 s left",
        "embed: 3/3 batches, 2 s each, done\n",
    ]
    monkeypatch.setattr(sys.stderr, "isatty", lambda: False)  # a log: plain lines, nothing rewritten
    now[0] = 0.0
    plain = progress.Progress("x", total=1, clock=lambda: now[0])
    now[0] = 5.0
    progress.show(plain.tick())
    assert capsys.readouterr().err == "x: 1/1 questions, 5 s each, done\n"


def test_a_run_logs_its_progress(g, questions, tmp_path, caplog):
    from sagegraph.retrieve import get_retriever

    r = get_retriever("bm25", g)
    with caplog.at_level("INFO", logger="sagegraph.eval"):
        run_eval(g, questions, EvalConfig("bm25", k=5), lambda q: r.search(q.text, 5), tmp_path / "run")
    lines = [m for m in caplog.messages if m.startswith("bm25[k=5]")]
    assert lines[0] == "bm25[k=5]: 12 of 12 questions to run" and lines[-1].startswith("bm25[k=5]: 12/12 questions")
    caplog.clear()
    with caplog.at_level("INFO", logger="sagegraph.eval"):
        run_eval(g, questions, EvalConfig("bm25", k=5), lambda q: r.search(q.text, 5), tmp_path / "run")
    assert not [m for m in caplog.messages if m.startswith("bm25[k=5]")]  # nothing to run: nothing said


def test_a_bug_met_by_one_question_is_its_error_with_its_traceback_and_the_run_goes_on(g, tmp_path):
    import numpy as np

    from sagegraph.eval.runner import failed_questions
    from sagegraph.retrieve.base import Retrieval

    sources = list(dict.fromkeys(g.source_ids.tolist()))[:4]
    qs = [
        Question(id=f"q{i}", text=f"q {i}", gold_sources=[s], meta={"hops": 1 + i % 2}) for i, s in enumerate(sources)
    ]

    def search(q):
        if q.id == "q2":
            return np.array([], dtype=np.int64)[0]  # the IndexError a real KB raised out of GraphRAFT
        return Retrieval(np.arange(3, dtype=np.int64), np.ones(3, np.float32), ["x"] * 3, {})

    m = run_eval(g, qs, EvalConfig("hybrid", k=3), search, tmp_path / "run")
    assert m["questions"] == 4 and m["errors"] == 1 and failed_questions(m) == 1
    errors = [json.loads(x) for x in (tmp_path / "run" / "errors.jsonl").read_text().splitlines()]
    assert (
        [e["qid"] for e in errors] == ["q2"]
        and errors[0]["error"].startswith("IndexError")
        and "Traceback" in errors[0]["traceback"]
    )
    # per question group: hops 1 (q0, q2) and hops 2 (q1, q3), each with its own metrics
    assert m["by_group"]["hops"]["1"]["questions"] == 2 and m["by_group"]["hops"]["2"]["questions"] == 2
    assert set(m["by_group"]["hops"]["1"]) == {"questions", "hit@1", "hit@5", "recall@20", "mrr"}
    saved = json.loads((tmp_path / "run" / "metrics.json").read_text())
    assert saved["by_group"] == m["by_group"]


def test_a_run_made_under_a_version_1_key_is_adopted_and_resumed(g, questions, tmp_path, monkeypatch):
    """Run keys of version 1 hashed SAGE's axes as fields of every configuration; a run made then
    is found by that key, renamed to the new one and resumed, not paid again."""
    import hashlib

    def v1_key(fields):  # version 1's formula, written out
        return hashlib.sha1(json.dumps(fields, sort_keys=True).encode()).hexdigest()[:10]

    cfg = EvalConfig("sage", 2, {"k_prime": 3})
    v1 = {"retriever": "sage", "k": 2, "k_prime": 3, "alpha": 0.6, "seed_retriever": "hybrid", "policy": "+edge"}
    assert cfg.legacy_key() == v1_key(v1)
    assert EvalConfig("spark", 20, {"ground": False}).legacy_key() == v1_key(
        {
            "retriever": "spark",
            "k": 20,
            "k_prime": 0,
            "alpha": 0.6,
            "seed_retriever": "hybrid",
            "policy": "+edge",
            "params": {"ground": False},
        }
    )
    # a version-1 config.json reads back as the same configuration, and so the same key
    assert EvalConfig.from_record({**v1, "edges": "", "params": {}, "prompt": ""}).key() == cfg.key()
    assert EvalConfig.from_record({**v1, "policy": "-edge"}).params == {"k_prime": 3, "policy": "-edge"}

    old = tmp_path / cfg.legacy_key()
    evaluate_one(g, cfg, questions, old)
    rows = (old / "per_query.jsonl").read_text().splitlines(keepends=True)
    (old / "per_query.jsonl").write_text("".join(rows[:-3]))  # stopped three questions before the end
    calls = _count_hybrid_searches(monkeypatch)
    (m,) = evaluate_group(g, [cfg], questions, tmp_path)
    assert calls["n"] == 3 and m["questions"] == len(questions)
    assert (tmp_path / cfg.key() / "per_query.jsonl").exists() and not old.exists()


def test_a_sub_step_over_before_its_first_line_was_due_says_nothing(monkeypatch):
    from sagegraph import progress

    monkeypatch.delenv(progress.QUIET, raising=False)  # a log, not a live terminal
    lines: list[str] = []
    now = [0.0]
    quick = progress.ticker("embed b1", 4, "texts", lines.append, every_s=10, clock=lambda: now[0])
    now[0] = 1.0
    quick(2)
    quick(2)
    assert lines == []  # 4 texts in a second: the stage's line is enough
    now[0] = 0.0
    slow = progress.ticker("embed b2", 4, "texts", lines.append, every_s=10, clock=lambda: now[0])
    now[0] = 12.0
    slow(2)
    now[0] = 13.0
    slow(2)
    assert [line.split(", ")[0] for line in lines] == ["embed b2: 2/4 texts", "embed b2: 4/4 texts"]
