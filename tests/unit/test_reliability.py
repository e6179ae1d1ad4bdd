"""What a careless user, a hostile reply or a crash did to sagegraph, one test a finding (the
the reliability table in docs/operations.md). The Cypher guard's findings are in test_cypher_guard.py."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from sagegraph.config import LLMConfig, load_config
from sagegraph.corpus.records import Question
from sagegraph.errors import ConfigError, InputError
from sagegraph.eval.runner import EvalConfig, run_eval
from sagegraph.llm import LLMClient, retry_wait, usage_scope
from sagegraph.retrieve.base import Retrieval
from sagegraph.runfiles import cut_to_last_line, replaced, write_metrics, write_text_whole
from sagegraph.runlock import DirectoryLocked, hold
from tests.fake_openai import FakeOpenAI, completion
from tests.fixtures import ROOT, run_all, write_config


# ---- locks: two runs into one directory (findings 3 and 6) ----
def _hold_in_child(directory: Path) -> subprocess.Popen:
    code = (
        "import sys, time; from sagegraph.runlock import hold\n"
        f"with hold({str(directory)!r}, 'build'):\n    print('held', flush=True); time.sleep(60)"
    )
    child = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True, cwd=ROOT)
    assert child.stdout.readline().strip() == "held"
    return child


def test_a_second_writer_is_refused_naming_the_first_and_a_dead_ones_lock_is_taken_over(tmp_path, caplog):
    out = tmp_path / "out"
    child = _hold_in_child(out)
    try:
        with pytest.raises(DirectoryLocked, match=rf"another build is writing here: pid {child.pid} \(.*-c"):
            with hold(out, "build"):
                pass
    finally:
        child.kill()
        child.wait()
    with hold(out, "evaluation"):  # the holder was killed: its lock is the next run's, and the log says so
        with hold(out, "evaluation"):  # re-entrant in the holding process (the CLI, then its flow)
            pass
    assert "taking over the lock of pid" in caplog.text and str(child.pid) in caplog.text


def test_a_folder_made_while_held_is_the_holders_in_a_nested_hold_and_marked_when_it_ends(tmp_path):
    """The CLI holds a sweep's new folder and writes its question sample there before the sweep
    takes the lock again in the same process: the nested hold lets it through (the outer one
    claimed it), and the folder is marked as sagegraph's when the outer hold ends."""
    out = tmp_path / "sweep"
    with hold(out, "sweep"):
        out.mkdir()
        (out / "questions.sample.jsonl").write_text("{}\n")
        with hold(out, "sweep"):
            pass
    assert (out / ".sagegraph").is_file()
    with hold(out, "sweep"):  # and a later run takes it as its own
        pass


def test_a_deployment_sweep_into_a_directory_in_use_is_refused(tmp_path):
    """A deployment's sweep (no CLI around it to take the lock) refuses a directory another sweep
    is writing, before it reads or writes anything there."""
    from sagegraph.eval.sweep import SweepConfig
    from sagegraph.flows.sweep import sweep

    cfg = SweepConfig(graph=tmp_path / "no-graph", out=tmp_path / "out", grid=[{"retriever": ["bm25"], "k": [5]}])
    child = _hold_in_child(tmp_path / "out")
    try:
        with pytest.raises(DirectoryLocked, match=f"pid {child.pid}"):
            sweep.fn(cfg)
    finally:
        child.kill()
        child.wait()
    assert not (tmp_path / "out" / "runs").exists() and not (tmp_path / "out" / "mlflow.db").exists()


def _graph_with_questions(graph_dir: Path):
    from sagegraph.retrieve.graph_index import GraphIndex

    g = GraphIndex(graph_dir)
    sources = list(dict.fromkeys(g.source_ids.tolist()))[:6]
    return g, [Question(id=f"q{i}", text=f"question {i}", gold_sources=[s]) for i, s in enumerate(sources)]


def _first_rows(g, q: Question) -> Retrieval:
    return Retrieval(np.arange(3, dtype=np.int64), np.ones(3, np.float32), ["x"] * 3, {})


def test_a_second_evaluation_into_one_run_dir_is_refused(graph_dir, tmp_path):
    g, qs = _graph_with_questions(graph_dir)
    child = _hold_in_child(tmp_path / "run")
    try:
        with pytest.raises(DirectoryLocked, match=f"another evaluation is writing here: pid {child.pid}"):
            run_eval(g, qs, EvalConfig("hybrid", k=3), lambda q: _first_rows(g, q), tmp_path / "run")
    finally:
        child.kill()
        child.wait()
    assert not (tmp_path / "run" / "per_query.jsonl").exists()


def test_a_question_that_hangs_times_out_and_the_rest_still_run_on_one_worker(graph_dir, tmp_path):
    """A question stuck in a computation (a quadratic regex on a hostile reply, found by
    benchmarks/hostile_replies.py) keeps its thread: with one worker nothing else ever started.
    Now it is scored as timed out and the others move to a fresh worker and finish."""
    import threading

    g, qs = _graph_with_questions(graph_dir)
    release, hung_returned = threading.Event(), threading.Event()

    def search(q):
        if q.id == "q1":
            release.wait(30)  # the hang, released at the end so the thread ends with the test
            hung_returned.set()
        return _first_rows(g, q)

    try:
        summary = run_eval(g, qs, EvalConfig("hybrid", k=3), search, tmp_path / "run", concurrency=1, timeout_s=0.5)
        assert not hung_returned.is_set()  # the run finished without waiting for the stuck question
    finally:
        release.set()
    rows = {
        json.loads(x)["qid"]: json.loads(x) for x in (tmp_path / "run" / "per_query.jsonl").read_text().splitlines()
    }
    assert sorted(rows) == sorted(q.id for q in qs) and summary["timeouts"] == 1
    assert rows["q1"]["error"] == "timed out after 0.5 s" and not any(rows[q.id]["error"] for q in qs if q.id != "q1")


def test_cut_to_last_line_keeps_whole_lines_only(tmp_path):
    p = tmp_path / "f.jsonl"
    p.write_bytes(b'{"a": 1}\n{"b": 2}\n{"c"')
    assert cut_to_last_line(p) == 4 and p.read_bytes() == b'{"a": 1}\n{"b": 2}\n'
    p.write_bytes(b'{"c"')
    assert cut_to_last_line(p) == 4 and p.read_bytes() == b""
    p.write_bytes(b"x" * 200_000 + b"\n" + b"y" * 70_000)  # the last newline further back than one read block
    assert cut_to_last_line(p) == 70_000 and p.stat().st_size == 200_001


# ---- files written whole (metrics.json, config.json, labels, archives, graph artifacts) ----
def test_a_writer_killed_before_its_rename_leaves_the_old_file_whole(tmp_path):
    path = tmp_path / "metrics.json"
    path.write_text('{"hit@1": 0.5}')
    code = (
        "import sys, time; from pathlib import Path; from sagegraph.runfiles import replaced\n"
        f"with replaced(Path({str(path)!r})) as tmp:\n"
        "    tmp.write_text('{\"hit@1\": 0.'); print('writing', flush=True); time.sleep(60)"
    )
    child = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True, cwd=ROOT)
    try:
        assert child.stdout.readline().strip() == "writing"
        child.kill()
        child.wait(10)
    finally:
        child.kill()
    assert json.loads(path.read_text()) == {"hit@1": 0.5}
    left = [f.name for f in tmp_path.iterdir() if f != path]
    assert len(left) == 1 and left[0].startswith(f".metrics.json.{child.pid}-")  # its hidden temporary, nothing else

    # the file's next writer removes the dead writer's temporary (as large as the file, never read)
    # and leaves a live writer's to it
    live = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        (tmp_path / f".metrics.json.{live.pid}-1.tmp").write_text("{")
        (tmp_path / f".other.json.{child.pid}-1.tmp").write_text("{")  # another file's: not this writer's to judge
        write_metrics(path, {"hit@1": 0.75})
        assert sorted(f.name for f in tmp_path.iterdir()) == sorted(
            ["metrics.json", f".metrics.json.{live.pid}-1.tmp", f".other.json.{child.pid}-1.tmp"]
        )
        assert json.loads(path.read_text()) == {"hit@1": 0.75}
    finally:
        live.kill()
        live.wait()


def test_an_error_while_writing_keeps_the_old_file_and_leaves_no_temporary(tmp_path):
    path = tmp_path / "labels.jsonl"
    write_text_whole(path, "old\n")
    with pytest.raises(RuntimeError), replaced(path) as tmp:
        tmp.write_text("half")
        raise RuntimeError("killed mid-write")
    assert path.read_text() == "old\n" and sorted(tmp_path.iterdir()) == [path]


def test_two_writers_of_one_file_at_once_each_publish_a_whole_file(tmp_path):
    """With one fixed temporary name (the old `path.tmp`), a second writer truncated the first's
    half-written file, which the first then renamed into place."""
    from concurrent.futures import ThreadPoolExecutor

    path = tmp_path / "comparison.json"
    texts = [json.dumps({"writer": i, "rows": ["x" * 64] * 20_000}) for i in range(8)]
    with ThreadPoolExecutor(8) as pool:
        list(pool.map(lambda t: write_text_whole(path, t), texts))
    assert path.read_text() in texts and sorted(tmp_path.iterdir()) == [path]


# ---- store health (finding 4, and the reused-store check of finding 3) ----
@pytest.fixture(scope="module")
def kb_built(kb_dir, tmp_path_factory):
    tmp = tmp_path_factory.mktemp("health")
    cfg = load_config(write_config(tmp / "c.yaml", {"kind": "kb", "path": str(kb_dir)}, tmp / "out"))
    run_all(cfg)
    return cfg


def _copy_of(built_out: Path, out: Path) -> Path:
    """A copy of a built graph and its store whose manifest points at the copy."""
    import shutil

    shutil.copytree(built_out, out)
    manifest = json.loads((out / "graph" / "manifest.json").read_text())
    manifest["config"]["out"] = str(out)
    (out / "graph" / "manifest.json").write_text(json.dumps(manifest))
    return out


def _loaded(out: Path, graph: str) -> tuple[str, Path]:
    """The store graph and marker of the load of out's published graph (one per build generation)."""
    from sagegraph.store.loaded import loaded_place

    fp = json.loads((out / "graph" / "manifest.json").read_text())["fingerprint"]
    return loaded_place("falkordb", out, out / "store", graph, fp)


# ---- the local model server's bind address (finding 7) ----
def test_llm_serve_passes_no_bind_address_from_the_environment(monkeypatch, tmp_path):
    from sagegraph import cli, local_model

    seen = {}
    monkeypatch.setattr(local_model, "server_available", lambda: True)
    monkeypatch.setattr(local_model, "verify", lambda model: None)
    monkeypatch.setattr(os, "execve", lambda path, argv, env: seen.update(argv=argv, env=env))
    for name, value in {
        "HOST": "0.0.0.0",
        "PORT": "9999",
        "host": "0.0.0.0",
        "Model": "/tmp/x.gguf",
        "KEEP_ME": "1",
    }.items():
        monkeypatch.setenv(name, value)
    cli.main(["llm", "serve", "--model", str(tmp_path / "m.gguf"), "--skip-check"])
    assert seen["argv"][seen["argv"].index("--host") + 1] == "127.0.0.1"
    assert not {"HOST", "PORT", "host", "Model"} & set(seen["env"]) and seen["env"]["KEEP_ME"] == "1"


# ---- odd endpoint replies (findings 8 and 9) ----
def _client(server, tmp_path, **kw) -> LLMClient:
    return LLMClient(
        LLMConfig(base_url=server.base_url, model="m", max_retries=2, **kw),
        tmp_path / "llm.sqlite",
        sleep=lambda s: None,
    )


@pytest.mark.parametrize(
    "header,expected",
    [
        ("-5", (1.0, 1.1)),
        ("nan", (1.0, 1.1)),
        ("inf", (1.0, 1.1)),
        ("1e9", (60.0, 66.0)),
        ("soon", (1.0, 1.1)),
        ("3", (3.0, 3.3)),
        (None, (1.0, 1.1)),
    ],
)
def test_retry_after_is_clamped(header, expected):
    assert expected[0] <= retry_wait(header, 1.0) <= expected[1]


def test_a_negative_retry_after_is_a_retry_not_a_traceback(tmp_path):
    answers = iter([(429, {"error": {"message": "slow down"}}, {"retry-after": "-5"}), (200, completion("fine"))])
    with FakeOpenAI(lambda body: next(answers)) as server:
        reply = _client(server, tmp_path).chat([{"role": "user", "content": "hi"}])
    assert reply.text == "fine"


def test_an_html_page_with_status_200_is_retried_then_stops_the_run_with_one_line(tmp_path):
    from sagegraph.errors import LLMUnavailable

    with FakeOpenAI(lambda body: (200, "<html><body>Bad gateway</body></html>")) as server:
        with pytest.raises(LLMUnavailable, match="not a chat completion") as caught:
            _client(server, tmp_path).chat([{"role": "user", "content": "hi"}])
        assert len(server.requests) == 3  # the first try and two retries
    assert "\n" not in str(caught.value)


@pytest.mark.parametrize(
    "body,counter",
    [
        ({**completion("x"), "choices": []}, "malformed"),
        ({**completion("x"), "choices": [{"index": 0, "finish_reason": "stop"}]}, "malformed"),
        (
            {
                **completion('{"cypher": "MATCH (n) RET'),
                "choices": [
                    {
                        "index": 0,
                        "message": {"role": "assistant", "content": '{"cypher": "MATCH (n) RET'},
                        "finish_reason": "length",
                    }
                ],
            },
            "truncated",
        ),
    ],
)
def test_an_empty_or_cut_reply_is_counted_and_never_served_again_as_good(tmp_path, body, counter):
    answers = [body, completion('{"cypher": "MATCH (n) RETURN n"}')]
    with FakeOpenAI(lambda b: (200, answers[min(len(server.requests), 2) - 1])) as server:
        client = _client(server, tmp_path)
        with usage_scope() as u:
            first = client.chat([{"role": "user", "content": "plan"}])
        assert getattr(u, counter) == 1 and not first.whole
        # A replay of this run reproduces the reply it recorded, and counts it again ...
        replay = LLMClient(
            LLMConfig(base_url=server.base_url, model="m", cache_mode="replay"), tmp_path / "other.sqlite"
        )
        assert replay.cache.insert_all([next(client.cache.rows([first.key]))]) == 1
        with usage_scope() as u:
            assert replay.chat([{"role": "user", "content": "plan"}]).whole is False
        assert getattr(u, counter) == 1 and len(server.requests) == 1
        # ... a live rerun serves a cut reply as cut (the same request, not paid twice) but asks
        # again for an empty one (the endpoint's fault more than the request's) ...
        with usage_scope() as u:
            second = client.chat([{"role": "user", "content": "plan"}])
        if counter == "truncated":
            assert not second.whole and second.text == first.text and u.truncated == 1 and len(server.requests) == 1
            # ... unless the user asks for cut replies to be asked again.
            reask = _client(server, tmp_path, reask_cut=True)
            second = reask.chat([{"role": "user", "content": "plan"}])
        assert second.whole and second.text.endswith('RETURN n"}') and len(server.requests) == 2
        # Never served as good, and the whole reply that replaced it is what a rerun gets.
        assert client.chat([{"role": "user", "content": "plan"}]).whole and len(server.requests) == 2


def test_a_completion_without_a_message_reads_as_empty():
    from sagegraph.llm import read_completion

    class R:
        choices = [type("C", (), {"message": None, "finish_reason": "stop"})()]
        usage = None

    assert read_completion(R(), [{"role": "user", "content": "x"}], 0.1).finish_reason == "empty"


# ---- inputs (findings 10 to 14) ----
def _kb(tmp_path: Path, nodes: list[str], edges: list[str] | None = None) -> Path:
    root = tmp_path / "kb"
    root.mkdir(parents=True, exist_ok=True)
    (root / "nodes.jsonl").write_text("\n".join(nodes) + "\n")
    if edges is not None:
        (root / "edges.jsonl").write_text("\n".join(edges) + "\n")
    return root


def _load_kb(root: Path, **policy):
    from sagegraph.corpus.jsonl import ErrorPolicy
    from sagegraph.corpus.kb import load_kb

    p = ErrorPolicy(**policy)
    return load_kb(root, p), p


def test_two_objects_under_one_id_name_both_lines_or_the_last_wins_counted(tmp_path):
    root = _kb(
        tmp_path,
        [
            '{"id": "a", "type": "T", "name": "first"}',
            '{"id": "b", "type": "T", "name": "x"}',
            '{"id": "a", "type": "T", "name": "second"}',
        ],
    )
    with pytest.raises(InputError, match=r"nodes.jsonl:3: field 'id': duplicate id 'a': line 1 has it too"):
        _load_kb(root)
    (nodes, _), policy = _load_kb(root, on_duplicate="last")
    assert [n.fields["name"] for n in nodes if n.id == "a"] == ["second"] and policy.skipped == {"duplicate": 1}


@pytest.mark.parametrize(
    "value,field",
    [
        ("NaN", "fields.score"),
        ("Infinity", "fields.score"),
        ("-Infinity", "fields.score"),
        (str(2**70), "fields.score"),
        (f"[1, {2**64}]", "fields.score[1]"),
    ],
)
def test_non_finite_numbers_and_integers_beyond_64_bits_name_file_line_and_field(tmp_path, value, field):
    root = _kb(
        tmp_path,
        [
            '{"id": "a", "type": "T", "fields": {"name": "ok"}}',
            '{"id": "b", "type": "T", "fields": {"name": "x", "score": ' + value + "}}",
        ],
    )
    with pytest.raises(InputError) as caught:
        _load_kb(root)
    assert caught.value.line == 2 and caught.value.field == field and "nodes.jsonl" in caught.value.path
    ok = _kb(
        tmp_path / "ok",
        ['{"id": "a", "type": "T", "fields": {"name": "NaN and Infinity are words", "n": 9223372036854775807}}'],
    )
    (nodes, _), _ = _load_kb(ok)
    assert nodes[0].fields["n"] == 2**63 - 1


def test_an_empty_config_file_is_an_error(tmp_path):
    (tmp_path / "c.yaml").write_text("# nothing yet\n")
    with pytest.raises(ConfigError, match="c.yaml: the config file is empty"):
        load_config(tmp_path / "c.yaml")


def test_an_edge_naming_an_unknown_node_names_its_line(tmp_path):
    root = _kb(
        tmp_path,
        ['{"id": "a", "type": "T", "name": "x"}', '{"id": "b", "type": "T", "name": "y"}'],
        ['{"src": "a", "dst": "b", "type": "R"}', '{"src": "a", "dst": "zz", "type": "R"}'],
    )
    with pytest.raises(InputError, match=r"edges.jsonl:2: field 'dst': names unknown node 'zz'"):
        _load_kb(root)


def test_a_bad_node_line_stops_the_build_before_prefect_and_dask_start(tmp_path):
    from tests.fixtures import sagegraph

    root = _kb(
        tmp_path, ['{"id": "a", "type": "T", "name": "x"}', '{"id": "b", "type": "T", "fields": {"score": NaN}}']
    )
    cfg = write_config(tmp_path / "c.yaml", {"kind": "kb", "path": str(root)}, tmp_path / "out")
    done = sagegraph("build", str(cfg))
    assert done.returncode == 2
    assert (
        done.stderr.strip()
        == f"sagegraph: error: {root / 'nodes.jsonl'}:2: field 'fields.score': NaN is not a finite number"
    )
    assert "Prefect" not in done.stdout and not (tmp_path / ".prefect").exists()


# ---- MLflow as work finishes (finding 16) ----
def test_finished_configurations_reach_mlflow_before_a_later_one_fails_and_the_parent_says_why(graph_dir, tmp_path):
    from mlflow.tracking import MlflowClient

    from sagegraph.tracking import SweepTracker, default_tracking_uri

    g, qs = _graph_with_questions(graph_dir)
    runs = tmp_path / "runs"
    done = []
    for k in (3, 5):
        c = EvalConfig("hybrid", k=k)
        done.append((c, run_eval(g, qs, c, lambda q: _first_rows(g, q), runs / c.key())))
    seen_at_failure = []

    def third():
        seen_at_failure.extend(
            r.info.run_name for r in client.search_runs([tracker.experiment_id], "tags.mlflow.parentRunId != ''")
        )
        raise RuntimeError("retriever exploded on its third configuration\nsecond line")

    uri = default_tracking_uri(tmp_path)
    tracker = SweepTracker(uri, "exp", tmp_path / "mlflow_parent.json", "sweep")
    client = MlflowClient(uri)
    with pytest.raises(RuntimeError):
        try:
            tracker.log_as_finished([lambda: [done[0]], lambda: [done[1]], third], runs)
        except RuntimeError as exc:
            tracker.fail(exc)
            raise
    assert sorted(seen_at_failure) == sorted(c.label() for c, _ in done)  # logged as they finished
    parent = client.get_run(tracker.parent_id)
    assert (
        parent.info.status == "FAILED"
        and parent.data.tags["sagegraph.failure"] == "RuntimeError: retriever exploded on its third configuration"
    )
    again = SweepTracker(
        uri, "exp", tmp_path / "mlflow_parent.json", "sweep"
    )  # the resumed sweep: the same parent, nothing logged twice
    assert again.parent_id == tracker.parent_id and client.get_run(again.parent_id).info.status == "RUNNING"
    assert again.log_as_finished([lambda: done], runs) == done
    assert len(client.search_runs([again.experiment_id], "tags.mlflow.parentRunId != ''")) == 2
    # a sweep killed while it logged a child leaves that child RUNNING: the rerun logs the
    # configuration whole and the half-logged child goes to MLflow's trash, not beside it
    c = EvalConfig("hybrid", k=7)
    half = client.create_run(
        again.experiment_id, run_name=c.label(), tags={"mlflow.parentRunId": again.parent_id}
    ).info.run_id
    whole = (c, run_eval(g, qs, c, lambda q: _first_rows(g, q), runs / c.key()))
    assert again.log_as_finished([lambda: [whole]], runs) == [whole]
    children = client.search_runs([again.experiment_id], "tags.mlflow.parentRunId != ''")
    assert len(children) == 3 and half not in {r.info.run_id for r in children}
    assert client.get_run(half).info.lifecycle_stage == "deleted"


def test_a_directory_is_listed_for_dead_temporaries_once_per_process(tmp_path, monkeypatch):
    from sagegraph import runfiles

    listed = []
    listing = runfiles._hidden_temporaries
    monkeypatch.setattr(
        runfiles, "_hidden_temporaries", lambda directory: listed.append(directory) or listing(directory)
    )
    for k in range(50):  # a stage's batch files
        write_text_whole(tmp_path / f"batch-{k}.json", "{}")
    assert listed == [tmp_path] and len(list(tmp_path.iterdir())) == 50


def test_a_sweep_in_this_process_stops_at_a_fault_outside_the_model_and_keeps_what_finished(
    graph_dir, ottqa_dir, tmp_path, monkeypatch
):
    """Run in the CLI's process, a sweep's groups run in turn: an endpoint or store fault stops it
    (no later group would fare better), the finished group stays in its run dir and in MLflow,
    and the parent run says why."""
    import yaml
    from mlflow.tracking import MlflowClient

    from sagegraph import sweeps
    from sagegraph.errors import InfraError
    from sagegraph.eval import sweep_steps
    from sagegraph.eval.sweep import load_sweep

    spec = {
        "name": "faulty",
        "graph": str(graph_dir),
        "questions": str(ottqa_dir / "questions.jsonl"),
        "out": str(tmp_path / "sweep"),
        "grid": [{"retriever": ["hybrid", "bm25", "dense"], "k": [2]}],
    }
    (tmp_path / "s.yaml").write_text(yaml.safe_dump(spec))
    cfg = load_sweep(tmp_path / "s.yaml")
    assert sweeps.evaluations(cfg) == 3 * 12
    real = sweep_steps.evaluate_configs
    groups_run: list[str] = []

    def second_fails(graph, questions, qvec, records, *rest, **named):
        groups_run.append(records[0]["retriever"])
        if len(groups_run) == 2:
            raise InfraError("the store stopped answering")
        return real(graph, questions, qvec, records, *rest, **named)

    monkeypatch.setattr(sweep_steps, "evaluate_configs", second_fails)
    with pytest.raises(InfraError, match="the store stopped answering"):
        sweeps.sweep_in_process(cfg)
    assert len(groups_run) == 2  # the third group was not started
    client = MlflowClient(f"sqlite:///{tmp_path / 'sweep' / 'mlflow.db'}")
    runs = client.search_runs([client.get_experiment_by_name("sagegraph").experiment_id])
    parent = next(r for r in runs if r.data.tags.get("sagegraph.kind") == "sweep")
    children = [r for r in runs if r.data.tags.get("mlflow.parentRunId") == parent.info.run_id]
    assert parent.info.status == "FAILED" and "the store stopped answering" in parent.data.tags["sagegraph.failure"]
    assert [c.data.params["retriever"] for c in children] == [groups_run[0]]
    monkeypatch.setattr(sweep_steps, "evaluate_configs", real)
    result = sweeps.sweep_in_process(cfg)  # resumed: the finished group is read back, not run or logged again
    assert result["configurations"] == 3
    assert len(client.search_runs([client.get_experiment_by_name("sagegraph").experiment_id])) == 4
