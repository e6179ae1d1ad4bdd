"""The end-to-end half of tests/unit/test_reliability.py: servers, subprocesses or whole builds."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import pytest

from sagegraph.config import LLMConfig
from sagegraph.errors import StoreUnavailable
from sagegraph.eval.runner import EvalConfig, read_done, run_eval
from tests.fake_openai import FakeOpenAI
from tests.fixtures import ROOT, write_config
from tests.unit.test_reliability import (
    _copy_of,
    _first_rows,
    _graph_with_questions,
    _hold_in_child,
    _loaded,
    kb_built,  # noqa: F401 (a fixture)
)


def test_a_second_build_into_one_out_dir_stops_before_any_server(tmp_path):
    from tests.fixtures import sagegraph

    (tmp_path / "docs.jsonl").write_text(json.dumps({"id": "d1", "text": "One document."}) + "\n")
    cfg = write_config(
        tmp_path / "c.yaml", {"kind": "generic", "documents": str(tmp_path / "docs.jsonl")}, tmp_path / "out"
    )
    child = _hold_in_child(tmp_path / "out")
    try:
        t0 = time.monotonic()
        done = sagegraph("build", str(cfg))
    finally:
        child.kill()
        child.wait()
    assert done.returncode == 2 and f"pid {child.pid}" in done.stderr and len(done.stderr.strip().splitlines()) == 1
    assert "Prefect" not in done.stdout + done.stderr and time.monotonic() - t0 < 60


# ---- run files cut by a crash (finding 5) ----
def test_a_per_query_file_cut_at_any_byte_of_its_last_line_resumes_exactly(graph_dir, tmp_path):
    g, qs = _graph_with_questions(graph_dir)
    calls: list[str] = []

    def search(q):
        calls.append(q.id)
        return _first_rows(g, q)

    run = tmp_path / "run"
    full = run_eval(g, qs, EvalConfig("hybrid", k=3), search, run)
    whole = (run / "per_query.jsonl").read_bytes()
    last_start = whole.rstrip(b"\n").rfind(b"\n") + 1
    last_qid = json.loads(whole[last_start:])["qid"]
    for cut in range(last_start, len(whole)):  # every byte offset of the last line, newline excluded
        (run / "per_query.jsonl").write_bytes(whole[:cut])
        calls.clear()
        again = run_eval(g, qs, EvalConfig("hybrid", k=3), search, run)
        lines = (run / "per_query.jsonl").read_text().splitlines()
        assert calls == [last_qid]  # only the question whose row was cut runs again
        assert len(lines) == len(qs) and all(json.loads(x)["qid"] for x in lines)
        assert sorted(read_done(run / "per_query.jsonl")) == sorted(q.id for q in qs)
        assert again["recall@5"] == full["recall@5"]


def test_a_store_without_its_finished_load_is_an_outage_not_empty_results(kb_built, tmp_path):
    from sagegraph.retrieve.graph_index import GraphIndex
    from sagegraph.retrieve.resources import open_resources

    out = _copy_of(kb_built.out, tmp_path / "out")
    res = open_resources(GraphIndex(out / "graph"))
    assert res.store.count_nodes() > 0  # whole: opens
    res.close()
    marker = _loaded(out, kb_built.store.graph)[1]
    loaded = json.loads(marker.read_text())
    marker.write_text(json.dumps({**loaded, "nodes": loaded["nodes"] + 5}))  # the load wrote more than is there
    with pytest.raises(StoreUnavailable, match="holds .* nodes .* its load wrote"):
        _ = open_resources(GraphIndex(out / "graph")).store
    marker.unlink()  # a load that never finished
    with pytest.raises(StoreUnavailable, match="no finished load"):
        _ = open_resources(GraphIndex(out / "graph")).store


def test_evaluate_on_a_half_loaded_store_exits_with_one_line_and_no_metrics(kb_built, tmp_path, capsys):
    from sagegraph import cli

    out = _copy_of(kb_built.out, tmp_path / "out")
    _loaded(out, kb_built.store.graph)[1].unlink()
    qfile = tmp_path / "q.jsonl"
    qfile.write_text(
        json.dumps({"id": "q1", "question": "Which papers cite dense retrieval?", "answer_ids": ["p2"]}) + "\n"
    )
    code = cli.main(
        [
            "evaluate",
            str(out / "graph"),
            "--retriever",
            "spark",
            "--questions",
            str(qfile),
            "--out",
            str(tmp_path / "run"),
            "--oracle",
        ]
    )
    err = capsys.readouterr().err
    assert code == 2 and "no finished load" in err.splitlines()[-1], err
    assert not (tmp_path / "run" / "metrics.json").exists()


def test_a_reused_store_is_checked_and_reloaded_when_it_lost_its_data(kb_built):
    from sagegraph.construct import stages as build_stages
    from sagegraph.store import open_store

    first = build_stages.load_store(kb_built)
    assert first["resumed"]
    with open_store("falkordb", kb_built.out / "store", _loaded(kb_built.out, kb_built.store.graph)[0]) as s:
        s.write("MATCH (n:Node) WITH n LIMIT 2 DETACH DELETE n")
    again = build_stages.load_store(kb_built)
    assert not again["resumed"] and (again["nodes"], again["edges"]) == (first["nodes"], first["edges"])


def test_a_server_reading_host_from_its_environment_listens_on_loopback(tmp_path):
    """A stand-in for llama_cpp.server that, like it, lets HOST/PORT in its environment win, run
    with the environment `sagegraph llm serve` gives it while HOST=0.0.0.0 is exported."""
    import psutil

    from sagegraph.local_model import server_env

    standin = (
        "import os, socket, time\ns = socket.socket(); s.bind((os.environ.get('HOST', '127.0.0.1'), 0)); s.listen(1)\n"
        "print(s.getsockname()[1], flush=True); time.sleep(30)"
    )
    env = server_env({**os.environ, "HOST": "0.0.0.0"})
    child = subprocess.Popen([sys.executable, "-c", standin], env=env, stdout=subprocess.PIPE, text=True)
    try:
        port = int(child.stdout.readline())
        listening = [c.laddr for c in psutil.Process(child.pid).net_connections() if c.status == psutil.CONN_LISTEN]
        assert [(a.ip, a.port) for a in listening] == [("127.0.0.1", port)]
    finally:
        child.kill()
        child.wait()


# ---- a killed build leaves no server behind (finding 15) ----
def test_kill_9_of_a_build_leaves_no_orphan_server_or_worker(tmp_path):
    import psutil

    (tmp_path / "docs.jsonl").write_text(
        "".join(json.dumps({"id": f"d{i}", "text": f"Document {i} about rivers."}) + "\n" for i in range(4))
    )
    cfg = write_config(
        tmp_path / "c.yaml", {"kind": "generic", "documents": str(tmp_path / "docs.jsonl")}, tmp_path / "out"
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("PREFECT_API")}
    build = subprocess.Popen(
        [sys.executable, "-m", "sagegraph.cli", "build", str(cfg)],
        cwd=ROOT,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    parent = psutil.Process(build.pid)
    deadline, helpers = time.monotonic() + 120, []
    while time.monotonic() < deadline:  # until the API server and the workers are up
        kids = [p for p in parent.children(recursive=True) if p.create_time() >= parent.create_time()]
        if any("uvicorn" in " ".join(p.cmdline()) for p in kids if p.is_running()) and len(kids) >= 3:
            helpers = kids
            break
        time.sleep(0.2)
    assert helpers, "the build never started its server"
    build.kill()
    build.wait()
    gone, alive = psutil.wait_procs(helpers, timeout=20)
    assert not alive, [" ".join(p.cmdline())[:80] for p in alive]


# ---- every LLM method under a hostile endpoint (benchmarks/hostile_replies.py on the test KB) ----
def test_no_question_raises_out_of_an_llm_retriever_whatever_the_model_replies(synth_kb, tmp_path):
    """Each LLM method at its default and the paper's settings, one question of each family, every
    reply drawn from the benchmark's menu of broken and hostile ones: no question is an error, each
    configuration finishes, and the store is unchanged (no DELETE, no file read, no user made)."""
    from benchmarks.hostile_replies import CONFIGS, responder, run_configs
    from sagegraph.retrieve.graph_index import GraphIndex
    from sagegraph.retrieve.resources import open_resources

    qs = list({q.meta["family"]: q for q in synth_kb["questions"] if q.meta["split"] == "test"}.values())
    with FakeOpenAI(responder) as server:
        res = open_resources(
            GraphIndex(synth_kb["graph"]),
            LLMConfig(base_url=server.base_url, model="hostile", max_retries=1, cache_dir=tmp_path / "cache"),
        )
        try:
            before = (res.store.count_nodes(), res.store.count_edges())
            rows = run_configs(res, qs, tmp_path, timeout_s=60)
            assert len(rows) == len(CONFIGS)
            for row in rows:
                assert row["errors"] == 0 and row["questions"] == len(qs), row["config"]
            assert (res.store.count_nodes(), res.store.count_edges()) == before
        finally:
            res.close()
    assert len(server.requests) > len(CONFIGS) * len(qs)  # every configuration asked, and was answered badly


def test_a_whole_load_into_a_graph_holding_rows_no_marker_accounts_for_replaces_them(kb_built):
    """The out dir made anew beside a store that kept its graphs: a store graph under this build's
    name may hold rows of a load the new out dir knows nothing of (a difference half-applied
    there). A whole load then ends with exactly this graph, not the two mixed."""
    from sagegraph.construct import stages as build_stages
    from sagegraph.store import open_store

    first = build_stages.load_store(kb_built)
    key, marker = _loaded(kb_built.out, kb_built.store.graph)
    with open_store("falkordb", kb_built.out / "store", key) as s:
        s.write("CREATE (:Node {id: 'left-behind', modality: 'entity'})")
    marker.unlink()
    again = build_stages.load_store(kb_built)
    assert (again["nodes"], again["edges"]) == (first["nodes"], first["edges"]) and again["mode"] == "full"
    with open_store("falkordb", kb_built.out / "store", key) as s:
        assert s.read("MATCH (n {id: 'left-behind'}) RETURN count(n) AS c")[0]["c"] == 0
