"""The KB regime end to end on a small synthetic KB: typed store, introspection, gold Cypher, and
SPARK through the real openai client against a loopback endpoint with scripted replies (faults
included). No network, no model."""

import contextlib
import json

import numpy as np
import pytest

from sagegraph.config import LLMConfig
from sagegraph.errors import InfraError, InputError, LLMUnavailable, QueryStopped, ReplayMiss
from sagegraph.eval.evaluate import evaluate_one
from sagegraph.eval.oracle import oracle_endpoint
from sagegraph.eval.runner import EvalConfig
from sagegraph.retrieve import get_retriever
from sagegraph.retrieve.af.retriever import PROMPT_VERSION as AF_PROMPT
from sagegraph.retrieve.graph_index import GraphIndex
from sagegraph.retrieve.resources import open_resources
from sagegraph.retrieve.spark.retriever import PROMPT_VERSION, traverses_edges
from tests.fake_openai import FakeOpenAI, completion


@pytest.fixture(scope="module")
def kb(synth_kb):
    return synth_kb


def plan(cypher, target="Movie", vector=()):
    return json.dumps({"target": target, "cypher": cypher, "vector": list(vector)})


def llm_cfg(server, tmp_path, **kw):
    kw.setdefault("cache_dir", tmp_path / "cache")
    return LLMConfig(base_url=server.base_url, model="test-model", max_retries=2, **kw)


@contextlib.contextmanager
def scripted(kb, tmp_path, responder):
    """Resources over the test KB with an LLM endpoint answering by `responder`; closed after."""
    with FakeOpenAI(responder) as server:
        res = open_resources(GraphIndex(kb["graph"]), llm_cfg(server, tmp_path))
        try:
            yield server, res
        finally:
            res.close()


def first_row(kb, cypher):
    """The first row a read of the test KB's store gives."""
    res = open_resources(GraphIndex(kb["graph"]))
    try:
        return res.store.read(cypher, max_rows=1)[0]
    finally:
        res.close()


def test_store_has_typed_properties_and_every_pattern(kb):
    res = open_resources(GraphIndex(kb["graph"]))
    try:
        schema = res.store.introspect()
        assert (
            schema.properties["Movie"]["year"].type == "INTEGER"
            and schema.properties["Movie"]["rating"].type == "FLOAT"
        )
        assert schema.properties["Person"]["aliases"].type == "LIST"
        assert ("Person", "DIRECTED", "Movie") in schema.patterns and (
            "Studio",
            "BASED_IN",
            "Country",
        ) in schema.patterns
        assert ("Movie", "SEQUEL_OF", "Movie") in schema.patterns or "SEQUEL_OF" not in schema.relationship_types
        assert schema.label_counts["Movie"] == 240
    finally:
        res.close()


def test_gold_cypher_returns_exactly_the_gold_ids(kb):
    g = GraphIndex(kb["graph"])
    res = open_resources(g)
    try:
        for q in kb["questions"][::5]:
            rows, _ = res.store.read_untrusted(q.meta["gold_cypher"], max_rows=5000)
            got = {g.source_ids[i] for i in g.rows_for_ids(r["id"] for r in rows)}
            assert got == set(q.gold_sources), q.text
    finally:
        res.close()


def test_spark_runs_a_plan_and_fills_to_k(kb, tmp_path):
    q = next(q for q in kb["questions"] if q.meta["template"] == "movies_directed_by")
    with scripted(kb, tmp_path, lambda b: (200, completion(plan(q.meta["gold_cypher"])))) as (server, res):
        g = res.graph
        r = get_retriever("spark", res).search(q.text, len(q.gold_sources) + 5)
    top = {g.source_ids[i] for i in r.idx[: len(q.gold_sources)]}
    assert top == set(q.gold_sources) and len(r) == len(q.gold_sources) + 5
    assert r.found_by[: len(q.gold_sources)] == ["cypher"] * len(q.gold_sources) and "fill" in r.found_by
    assert r.trace["edge_constrained"] is True and r.usage["calls"] == 1 and r.usage["prompt_tokens"] == 100
    assert (
        "Schema:" in server.requests[0]["messages"][1]["content"]
        and "(:Person)-[:DIRECTED]->(:Movie)" in server.requests[0]["messages"][1]["content"]
    )


@pytest.mark.parametrize(
    "reply,counter",
    [
        ("Sure, here is my plan: find the films.", None),
        (plan("MATCH (m:Movie) DETACH DELETE m"), "cypher_rejected"),
        (plan("MATCH (m:Movie) SET m.title = 'x' RETURN m.id AS id"), "cypher_rejected"),
        (plan("CALL dbms.security.createUser('x', 'y', false)"), "cypher_rejected"),
        (plan("LOAD CSV FROM 'file:///etc/passwd' AS row RETURN row"), "cypher_rejected"),
        (plan("MATCH (m:Movie) RETURN m.id AS id; MATCH (n) DETACH DELETE n"), "cypher_rejected"),
        (plan("MATCH (m:Movie {title: 'No Such Film'}) RETURN m.id AS id"), "cypher_empty"),
    ],
)
def test_bad_plans_fall_back_to_hybrid_and_leave_the_graph_unchanged(kb, tmp_path, reply, counter):
    with scripted(kb, tmp_path, lambda b: (200, completion(reply))) as (_, res):
        before = (res.store.count_nodes(), res.store.count_edges())
        r = get_retriever("spark", res).search("Which films were directed by someone?", 5)
        assert (res.store.count_nodes(), res.store.count_edges()) == before
    assert r.trace["counters"]["fallback"] == 1 and len(r) == 5 and set(r.found_by) == {"fallback"}
    assert r.trace["counters"]["plan_parsed"] == (counter is not None)
    if counter:
        assert r.trace["counters"][counter] == 1


def test_a_cypher_syntax_error_gets_one_repair_fed_the_error(kb, tmp_path):
    q = next(q for q in kb["questions"] if q.meta["template"] == "movies_starring")
    replies = iter(
        [plan("MATCH (p:Person {name: 'x'})-[:ACTED_IN]->(m:Movie RETURN m.id AS id"), plan(q.meta["gold_cypher"])]
    )
    with scripted(kb, tmp_path, lambda b: (200, completion(next(replies)))) as (server, res):
        g = res.graph
        r = get_retriever("spark", res).search(q.text, len(q.gold_sources) + 2)
    c = r.trace["counters"]
    assert c["cypher_invalid"] == 1 and c["repair_calls"] == 1 and c["fallback"] == 0 and r.usage["calls"] == 2
    assert "could not run" in server.requests[1]["messages"][-1]["content"] and len(server.requests[1]["messages"]) == 4
    assert {g.source_ids[i] for i in r.idx[: len(q.gold_sources)]} == set(q.gold_sources)


def test_a_reply_whose_query_the_store_stopped_is_asked_again_live_not_served_as_good(kb, tmp_path):
    """The reliability probe's stalled reply stayed cached and stalled every rerun: now a query
    stopped at the store's bound (here its memory bound, while planning) is counted, the method
    falls back, and a live rerun asks again instead of serving the same reply."""
    from sagegraph.llm import STOPPED

    q = kb["questions"][0]
    with scripted(
        kb, tmp_path, lambda b: (200, completion(plan("MATCH (m:Movie) RETURN range(1, 10000000) AS id")))
    ) as (server, res):
        first = get_retriever("spark", res).search(q.text, 5)
        row = res.llm.cache.get(first.trace["events"][0]["key"])
        again = get_retriever("spark", res).search(q.text, 5)
    assert first.trace["counters"]["cypher_stopped"] == 1 and first.trace["counters"]["fallback"] == 1
    assert row is not None and row.finish_reason == STOPPED
    assert len(server.requests) == 2 and again.trace["counters"]["cypher_stopped"] == 1


def test_rate_limit_then_success_and_a_timeout_are_retried(kb, tmp_path):
    q = kb["questions"][0]
    calls = {"n": 0}

    def flaky(body):
        calls["n"] += 1
        if calls["n"] == 1:
            return 429, {"error": {"message": "slow down"}}
        if calls["n"] == 2:
            return 503, {"error": {"message": "overloaded"}}
        return 200, completion(plan(q.meta["gold_cypher"], q.meta["target_type"]))

    with scripted(kb, tmp_path, flaky) as (_, res):
        res.llm._sleep = lambda s: None
        r = get_retriever("spark", res).search(q.text, 5)
    assert r.usage["retries"] == 2 and r.trace["counters"]["fallback"] == 0


def test_outage_mid_run_stops_keeps_finished_and_resume_repays_nothing(kb, tmp_path):
    qs = [q for q in kb["questions"] if q.meta["split"] == "test"][:8]
    state = {"up": True, "n": 0}

    def endpoint(body):
        text = body["messages"][-1]["content"]
        q = next(q for q in qs if q.text in text)
        if not state["up"]:
            return 500, {"error": {"message": "down"}}
        state["n"] += 1
        if state["n"] == 5:
            state["up"] = False
        return 200, completion(plan(q.meta["gold_cypher"], q.meta["target_type"]))

    cfg = EvalConfig("spark", k=10, prompt="spark-2")
    with FakeOpenAI(endpoint) as server:
        res = open_resources(GraphIndex(kb["graph"]), llm_cfg(server, tmp_path))
        res.llm._sleep = lambda s: None
        try:
            with pytest.raises(LLMUnavailable):
                evaluate_one(res, cfg, qs, tmp_path / "run")
            done = [json.loads(x) for x in (tmp_path / "run" / "per_query.jsonl").read_text().splitlines()]
            assert len(done) == 5 and not (tmp_path / "run" / "metrics.json").exists()
            state["up"] = True
            sent = len(server.requests)
            m = evaluate_one(res, cfg, qs, tmp_path / "run")
        finally:
            res.close()
    assert m["questions"] == 8 and m["errors"] == 0 and m["count_fallback"] == 0
    assert len(server.requests) - sent == 3  # only the three unfinished questions are asked again
    assert m["llm_calls_per_query"] == 1.0 and m["hit@1"] == 1.0


def test_exported_replies_reproduce_a_run_elsewhere_with_zero_new_calls(kb, tmp_path):
    """The published-run path: run live, `llm export` the run's replies, `llm import` them into a
    fresh cache, rerun in replay mode: the same numbers, no request reaches the endpoint."""
    from sagegraph.eval.replies import export_replies, import_replies

    qs = [q for q in kb["questions"] if q.meta["split"] == "test"][:6]
    with oracle_endpoint(qs) as server:
        cfg_live = llm_cfg(server, tmp_path)
        res = open_resources(GraphIndex(kb["graph"]), cfg_live)
        first = evaluate_one(res, EvalConfig("spark", k=10), qs, tmp_path / "live", concurrency=3)
        res.close()
        assert json.loads((tmp_path / "live" / "config.json").read_text())["llm"]["model"] == "test-model"
        assert export_replies(tmp_path / "live", tmp_path / "replies.jsonl") == 6
        assert import_replies(tmp_path / "replies.jsonl", tmp_path / "elsewhere" / "llm.sqlite") == (6, 0)
        assert import_replies(tmp_path / "replies.jsonl", tmp_path / "elsewhere" / "llm.sqlite") == (0, 6)
        # gzip by the name, byte for byte the same on a second export (archives are committed)
        assert (
            export_replies(tmp_path / "live", tmp_path / "a.jsonl.gz")
            == 6
            == export_replies(tmp_path / "live", tmp_path / "b.jsonl.gz")
        )
        assert (tmp_path / "a.jsonl.gz").read_bytes() == (tmp_path / "b.jsonl.gz").read_bytes()
        assert import_replies(tmp_path / "a.jsonl.gz", tmp_path / "gz" / "llm.sqlite") == (6, 0)
        (tmp_path / "cut.jsonl.gz").write_bytes((tmp_path / "a.jsonl.gz").read_bytes()[:-9])
        with pytest.raises(InputError, match="cut.jsonl.gz"):
            import_replies(tmp_path / "cut.jsonl.gz", tmp_path / "gz" / "llm.sqlite")
        sent = len(server.requests)
        res = open_resources(
            GraphIndex(kb["graph"]), llm_cfg(server, tmp_path, cache_mode="replay", cache_dir=tmp_path / "elsewhere")
        )
        again = evaluate_one(res, EvalConfig("spark", k=10), qs, tmp_path / "replay")
        res.close()
        assert len(server.requests) == sent and again["llm_cached"] == 6
        assert {k: v for k, v in again.items() if k.startswith(("hit", "recall", "mrr"))} == {
            k: v for k, v in first.items() if k.startswith(("hit", "recall", "mrr"))
        }
        res = open_resources(GraphIndex(kb["graph"]), llm_cfg(server, tmp_path, cache_mode="replay"))
        with pytest.raises(ReplayMiss):
            get_retriever("spark", res).search("A question nobody asked before?", 5)
        res.close()
    assert issubclass(ReplayMiss, InfraError)


def test_sage_expands_spark_seeds_and_minus_edge_skips_after_a_traversal(kb, tmp_path):
    q = next(q for q in kb["questions"] if q.meta["template"] == "movies_directed_by")
    with scripted(kb, tmp_path, lambda b: (200, completion(plan(q.meta["gold_cypher"])))) as (_, res):
        plus = get_retriever("sage", res, seed_retriever="spark", k_prime=5, policy="+edge").search(q.text, 5)
        minus = get_retriever("sage", res, seed_retriever="spark", k_prime=5, policy="-edge").search(q.text, 5)
    assert len(plus) == 10 and plus.trace["expanded"] and plus.usage["calls"] == 1
    assert len(minus) == 5 and minus.trace["expanded"] is False
    assert traverses_edges("MATCH (a)-[:R]->(b) RETURN b") and not traverses_edges(
        "MATCH (m:Movie) WHERE m.title = 'a->b' RETURN m"
    )


def test_unknown_retriever_params_are_refused_by_name(kb):
    from sagegraph.errors import ConfigError

    with pytest.raises(ConfigError, match="bogus"):
        get_retriever("spark", GraphIndex(kb["graph"]), bogus=1)
    with pytest.raises(ConfigError, match="alpha"):
        get_retriever("hybrid", GraphIndex(kb["graph"]), alpha=2)
    assert np.array_equal(
        GraphIndex(kb["graph"]).rows_for_ids(["movie:0", "nope"]), GraphIndex(kb["graph"]).rows_for_ids(["movie:0"])
    )


def test_spark_queries_become_mlflow_traces_with_token_usage(kb, tmp_path):
    from sagegraph.tracking import SweepTracker

    qs = [q for q in kb["questions"] if q.meta["split"] == "test"][:3]
    with oracle_endpoint(qs) as server:
        res = open_resources(GraphIndex(kb["graph"]), llm_cfg(server, tmp_path))
        cfg = EvalConfig("spark", k=10, prompt="spark-2")
        m = evaluate_one(res, cfg, qs, tmp_path / "run")
        res.close()
    tracker = SweepTracker(f"sqlite:///{tmp_path / 'm.db'}", "kb", tmp_path / "parent.json", "s")
    run_id = tracker.log_child(cfg, m, tmp_path / "run", llm={"model": "test-model"})
    import mlflow

    mlflow.set_tracking_uri(tracker.tracking_uri)
    traces = mlflow.search_traces(locations=[tracker.experiment_id], return_type="list")
    assert len(traces) == 3 and {t.info.request_metadata.get("mlflow.sourceRun") for t in traces} == {run_id}
    spans = traces[0].data.spans
    assert [s.span_type for s in spans] == ["RETRIEVER", "CHAT_MODEL", "TOOL"] and spans[2].inputs["query"].startswith(
        "MATCH"
    )
    assert traces[0].info.token_usage["total_tokens"] > 0
    assert tracker.client.get_run(run_id).data.params["prompt"] == "spark-2"


def test_kb_sweep_with_llm_retrievers_then_a_replay_rerun_pays_nothing(kb, tmp_path):
    """A sweep file with LLM retrievers and their params, on a stated sample, through the CLI (Prefect
    on Dask): costs per query in the summary, MLflow params and traces; then the same sweep with
    `--cache-mode replay` into a new output makes no request and gives the same numbers."""
    import csv

    import yaml
    from mlflow.tracking import MlflowClient

    from tests.fixtures import sagegraph

    qs = [q for q in kb["questions"] if q.meta["split"] == "test"]
    with oracle_endpoint(qs) as server:
        spec = {
            "name": "kb",
            "graph": str(kb["graph"]),
            "questions": str(kb["root"] / "data" / "questions-test.jsonl"),
            "out": str(tmp_path / "live"),
            "sample": {"n": 7, "by": "family"},
            "concurrency": 2,
            "llm": {"base_url": server.base_url, "model": "oracle", "cache_dir": str(tmp_path / "cache")},
            "mlflow": {"experiment": "kb"},
            "plot_totals": [10],
            "grid": [
                {"retriever": ["hybrid", "spark"], "k": [10], "params": {"alpha": [0.6]}},
                {
                    "retriever": ["sage"],
                    "seed_retriever": ["spark"],
                    "policy": ["+edge", "-edge"],
                    "k": [5],
                    "k_prime": [5],
                },
                {"retriever": ["af"], "k": [10], "params": {"alpha": [0.333333, 1.0], "reranker": ["none"]}},
            ],
        }
        (tmp_path / "live.yaml").write_text(yaml.safe_dump(spec))
        live = sagegraph("sweep", str(tmp_path / "live.yaml"), "--flow", "--workers", "1")
        assert live.returncode == 0, live.stderr[-3000:]
        # SPARK's sentence vectors (semantic_text, also SAGE's seeds') were ready before the fan-out, not built
        # inside a question
        assert (
            "prepared 600 nodes, 7 questions, sentence vectors" in live.stderr
            and (kb["graph"] / "passages" / "meta.json").exists()
        )
        sent = len(server.requests)
        assert (
            sent == 7 + 14
        )  # spark and both sage policies share one plan per question; af's 2 calls are shared by both alphas
        spec["out"] = str(tmp_path / "replay")
        (tmp_path / "replay.yaml").write_text(yaml.safe_dump(spec))
        # small enough to run in the CLI's process: the same runs, files and MLflow records as the flow's
        again = sagegraph("sweep", str(tmp_path / "replay.yaml"), "--cache-mode", "replay")
        assert again.returncode == 0, again.stderr[-3000:]
        assert "in this process (42 question-configuration evaluations" in again.stdout
        assert "Prefect API" not in again.stdout and "Prefect API" in live.stdout
        assert len(server.requests) == sent
    rows = {r["config"]: r for r in csv.DictReader((tmp_path / "live" / "summary.csv").open())}
    replay = {r["config"]: r for r in csv.DictReader((tmp_path / "replay" / "summary.csv").open())}
    assert {c: r["recall@10"] for c, r in rows.items()} == {c: r["recall@10"] for c, r in replay.items()} and len(
        rows
    ) == 6
    for out in ("live", "replay"):  # the flow and this process log alike: a parent and a child per configuration
        store = MlflowClient(tracking_uri=f"sqlite:///{tmp_path / out / 'mlflow.db'}")
        runs = store.search_runs([store.get_experiment_by_name("kb").experiment_id])
        assert len(runs) == 7 and (tmp_path / out / "comparison.csv").exists()
    spark = next(r for c, r in rows.items() if c.startswith("spark"))
    assert (
        float(spark["questions"]) == 7
        and float(spark["llm_calls_per_query"]) == 1.0
        and float(spark["rate_plan_parsed"]) == 1.0
    )
    assert len((tmp_path / "live" / "questions.sample.jsonl").read_text().splitlines()) == 7
    client = MlflowClient(tracking_uri=f"sqlite:///{tmp_path / 'live' / 'mlflow.db'}")
    exp = client.get_experiment_by_name("kb")
    child = next(r for r in client.search_runs([exp.experiment_id]) if r.data.params.get("retriever") == "spark")
    assert (
        child.data.params["llm.model"] == "oracle"
        and child.data.params["params.alpha"] == "0.6"
        and child.data.params["prompt"] == PROMPT_VERSION
    )
    assert "llm_calls_per_query" in child.data.metrics
    import mlflow

    mlflow.set_tracking_uri(f"sqlite:///{tmp_path / 'live' / 'mlflow.db'}")
    assert (
        len(mlflow.search_traces(locations=[exp.experiment_id], return_type="list")) == 7 * 5
    )  # spark, sage[spark] x 2, af x 2
    af = [r for c, r in rows.items() if c.startswith("af")]
    assert all(
        float(r["diag_target_type_accuracy"]) == 1.0 and float(r["llm_work_completion_tokens_per_query"]) >= 0
        for r in af
    )
    assert {float(r["llm_calls_per_query"]) for r in af} == {2.0}
    child = next(r for r in client.search_runs([exp.experiment_id]) if r.data.params.get("retriever") == "af")
    assert child.data.params["prompt"] == AF_PROMPT and child.data.params["params.reranker"] == "none"
    assert "diag_grounded_recall" in child.data.metrics and "rate_with_triplet" in child.data.metrics


def test_grounding_turns_a_reversed_relationship_and_says_what_it_did(kb, tmp_path):
    q = next(q for q in kb["questions"] if q.meta["template"] == "movies_directed_by")
    name = q.meta["topic_entities"][0]["name"]
    wrong = f"MATCH (m:Movie)-[:DIRECTED]->(p:Person {{name: '{name}'}}) RETURN DISTINCT m.id AS id"
    with scripted(kb, tmp_path, lambda b: (200, completion(plan(wrong)))) as (server, res):
        paper = get_retriever(
            "spark", res, fill=False, ground=False, card_examples=False, link=False, card_similarity=True
        ).search(q.text, 10)
        grounded = get_retriever("spark", res, fill=False, ground=True, card_examples=True, link=True).search(
            q.text, 10
        )
        prompt = server.requests[-1]["messages"][1]["content"]
    assert paper.trace["counters"]["cypher_empty"] == 1 and paper.trace["counters"]["fallback"] == 1
    c = grounded.trace["counters"]
    assert c["grounded"] == 1 and c["ground_direction"] == 1 and c["cypher_empty"] == 0 and c["fallback"] == 0
    assert grounded.trace["cypher_model"] == [wrong] and grounded.trace["cypher_executed"].startswith(
        "MATCH (m:Movie)<-[:DIRECTED]-(p:Person"
    )
    assert grounded.trace["repairs"][0].startswith("direction:")
    got = {res.graph.source_ids[i] for i in grounded.idx}
    assert got == set(q.gold_sources)
    # the prompt's grounding is read from this KB: a stored instance per pattern, the question's names linked
    assert "(:Person)-[:DIRECTED]->(:Movie)   e.g. (:Person {name: '" in prompt
    assert f"'{name}' is (:Person {{name: '{name}'}})" in prompt


def test_grounding_extends_a_plan_that_returns_its_topic_to_the_target_label(kb, tmp_path):
    q = next(q for q in kb["questions"] if q.meta["template"] == "movies_directed_by")
    name = q.meta["topic_entities"][0]["name"]
    stops = f"MATCH (p:Person {{name: '{name}'}}) RETURN p.id AS id"  # named the topic and stopped
    with scripted(kb, tmp_path, lambda b: (200, completion(plan(stops, target="Movie")))) as (_, res):
        r = get_retriever("spark", res, fill=False, ground=True).search(q.text, 50)
    assert r.trace["counters"]["ground_return_extended"] == 1 and r.trace["counters"]["fallback"] == 0
    assert set(q.gold_sources) <= {
        res.graph.source_ids[i] for i in r.idx
    }  # every film the person is joined to, gold among them


def test_a_query_one_relation_short_walks_the_relation_the_question_adds(kb, tmp_path):
    """The model stops at the studio of 'the country the studio that made X is based in': the
    query runs and finds a studio, and the question's 'based in' names one relation more, read
    off the KB's own patterns, so the country comes back (`lengthen`); off, the studio does."""
    row = first_row(
        kb, "MATCH (m:Movie)-[:PRODUCED_BY]->(:Studio)-[:BASED_IN]->(c:Country) RETURN m.title AS title, c.id AS id"
    )
    title = row["title"].replace("'", "\\'")
    short = f"MATCH (m:Movie {{title: '{title}'}})-[:PRODUCED_BY]->(s:Studio) RETURN DISTINCT s.id AS id"
    question = f"In which country is the studio that produced {row['title']} based?"
    with scripted(kb, tmp_path, lambda b: (200, completion(plan(short, target="Studio")))) as (server, res):
        longer = get_retriever("spark", res, fill=False).search(question, 5)
        as_written = get_retriever("spark", res, fill=False, lengthen=False).search(question, 5)
        calls = len(server.requests)
    assert longer.trace["counters"]["ground_return_lengthened"] == 1 and longer.trace["cypher_model"] == [short]
    assert "[:BASED_IN]->(lengthened_2:Country)" in longer.trace["cypher_executed"]
    assert longer.idx.tolist() == res.graph.rows_for_ids([row["id"]]).tolist() and calls == 1  # no call of its own
    assert as_written.trace["cypher_executed"] == short
    assert as_written.trace["counters"]["ground_return_lengthened"] == 0
    assert {str(res.graph.types[i]) for i in as_written.idx} == {"Studio"}
    # a store that stops the longer query at a bound: the question keeps the studio, and says why
    with scripted(kb, tmp_path, lambda b: (200, completion(plan(short, target="Studio")))) as (server, res):
        read = res.store.read_untrusted

        def stopping(query, **bounds):
            if "lengthened_" in query:
                raise QueryStopped("the query ran past its time bound")
            return read(query, **bounds)

        res.store.read_untrusted = stopping
        stopped = get_retriever("spark", res, fill=False).search(question, 5)
    assert stopped.trace["counters"]["repair_store_errors"] == 1 and stopped.trace["cypher_executed"] == short
    assert "lengthened_2" in stopped.trace["repair_store_errors"][0]["query"]
    assert {str(res.graph.types[i]) for i in stopped.idx} == {"Studio"}


def test_a_grounded_query_that_finds_nothing_runs_once_more_either_way(kb, tmp_path):
    """Movie -[SEQUEL_OF]-> Movie: the labels cannot say which way the model meant. A query that
    asks for the films that are sequels of a film with none finds nothing; run undirected it finds
    the film it continues, counted and in the trace. The paper's SPARK falls back."""
    pair = first_row(
        kb, "MATCH (a:Movie)-[:SEQUEL_OF]->(b:Movie) WHERE NOT (:Movie)-[:SEQUEL_OF]->(a) RETURN a, b LIMIT 1"
    )
    key = "title" if "title" in pair["a"] else "name"
    name = pair["a"][key].replace("'", "\\'")
    wrong = f"MATCH (a:Movie {{{key}: '{name}'}})<-[:SEQUEL_OF]-(b:Movie) RETURN DISTINCT b.id AS id"
    with scripted(kb, tmp_path, lambda b: (200, completion(plan(wrong)))) as (_, res):
        paper = get_retriever("spark", res, fill=False, ground=False).search("Which film is this a sequel of?", 10)
        grounded = get_retriever("spark", res, fill=False, ground=True).search("Which film is this a sequel of?", 10)
    assert paper.trace["counters"]["cypher_empty"] == 1 and paper.trace["counters"]["fallback"] == 1
    c = grounded.trace["counters"]
    assert (
        c["ground_direction_relaxed"] == 1
        and c["ground_direction"] == 0
        and c["cypher_empty"] == 0
        and c["fallback"] == 0
    )
    assert grounded.trace["cypher_executed"] == wrong.replace("<-[:SEQUEL_OF]-", "-[:SEQUEL_OF]-")
    assert int(res.graph.rows_for_ids([pair["b"]["id"]])[0]) in set(grounded.idx.tolist())


def test_the_card_leaves_out_the_builds_similarity_edges_unless_asked(kb, tmp_path):
    """SIMILAR_* edges are the build's (nodes of alike text), not facts of the KB: a planner that
    walks them answers with look-alikes. The paper's card (the store's whole schema) keeps them."""
    q = kb["questions"][0]
    with scripted(kb, tmp_path, lambda b: (200, completion(plan(None)))) as (server, res):
        similar = {r for _, r, _ in res.store.introspect().patterns if r.startswith("SIMILAR_")}
        get_retriever("spark", res, fill=False).search(q.text, 5)
        default = server.requests[-1]["messages"][1]["content"]
        get_retriever("spark", res, fill=False, card_similarity=True).search(q.text, 5)
        paper = server.requests[-1]["messages"][1]["content"]
    assert similar, "the test KB's build adds similarity edges"
    assert "SIMILAR_" not in default and "-[:DIRECTED]->" in default
    assert all(f"-[:{r}]->" in paper for r in similar)


def test_a_copied_name_is_dropped_the_plan_goes_on_to_its_target_and_the_named_film_ranks_last(kb, tmp_path):
    """ "The other films of the studio that made X": the 1.5B model wrote the hop to the studio,
    pinned the studio to a name from nowhere in the question and returned X itself. Grounded, the
    name goes, the query goes on from the studio to its films, and X ranks after them."""
    res = open_resources(GraphIndex(kb["graph"]))
    try:
        row = res.store.read(
            "MATCH (a:Movie)-[:PRODUCED_BY]->(s:Studio)<-[:PRODUCED_BY]-(b:Movie) WHERE a <> b "
            "RETURN a.id AS a, a.title AS title, s.id AS s LIMIT 1",
            max_rows=1,
        )[0]
        films = {
            r["id"]
            for r in res.store.read(
                "MATCH (s:Studio {id: $s})<-[:PRODUCED_BY]-(m:Movie) RETURN m.id AS id", {"s": row["s"]}, max_rows=500
            )
        }
    finally:
        res.close()
    title = row["title"].replace("'", "\\'")
    wrong = (
        f"MATCH (m:Movie {{title: '{title}'}})-[:PRODUCED_BY]->(s:Studio) WHERE s.name = 'Nowhere Pictures' "
        "RETURN DISTINCT m.id AS id"
    )
    question = f"Which other films were made by the studio that produced {row['title']}?"
    with scripted(kb, tmp_path, lambda b: (200, completion(plan(wrong)))) as (_, res):
        r = get_retriever("spark", res, fill=False).search(question, len(films) + 5)
        plain = get_retriever("spark", res, fill=False, named_last=False).search(question, len(films) + 5)
    c = r.trace["counters"]
    assert (
        c["ground_name_dropped"] == 1
        and c["ground_return_path_end"] == 1
        and c["ground_return_to_target"] == 1
        and c["fallback"] == 0
    )
    rows = set(res.graph.rows_for_ids(sorted(films)).tolist())
    got = r.idx.tolist()
    assert set(got) == rows and got[-1] == int(res.graph.rows_for_ids([row["a"]])[0]) and r.trace["named_last"] == 1
    assert set(plain.idx.tolist()) == rows and "named_last" not in plain.trace


def test_a_text_condition_that_matches_nothing_is_relaxed_to_the_named_nodes_films(kb, tmp_path):
    q = next(q for q in kb["questions"] if q.meta["template"] == "movies_directed_by")
    name = q.meta["topic_entities"][0]["name"].replace("'", "\\'")
    words = (
        f"MATCH (p:Person {{name: '{name}'}})-[:DIRECTED]->(m:Movie) WHERE toLower(m.description) CONTAINS "
        "'zqxj nothing says this' RETURN m.id AS id"
    )
    with scripted(kb, tmp_path, lambda b: (200, completion(plan(words)))) as (_, res):
        paper = get_retriever("spark", res, fill=False, ground=False).search(q.text + " involving a zqxj?", 10)
        r = get_retriever("spark", res, fill=False).search(q.text + " involving a zqxj?", 10)
    assert paper.trace["counters"]["fallback"] == 1
    assert r.trace["counters"]["ground_text_relaxed"] == 1 and r.trace["counters"]["fallback"] == 0
    assert {res.graph.source_ids[i] for i in r.idx} == set(q.gold_sources)


def test_only_configurations_that_read_sentence_vectors_prepare_them():
    from sagegraph.retrieve.registry import retriever_class, validate_params

    class Graph:  # what a retriever may prepare reads from the graph
        built = 0

        @property
        def passages(self):
            Graph.built += 1

    g = Graph()
    assert (
        retriever_class("spark").prepare(g, validate_params("spark", {"semantic_text": False})) == []
        and Graph.built == 0
    )
    assert (
        retriever_class("sage").prepare(g, validate_params("sage", {"seed_retriever": "spark"})) == ["sentence vectors"]
        and Graph.built == 1
    )
    assert retriever_class("hybrid").prepare(g, validate_params("hybrid", {})) == [] and Graph.built == 1


def test_a_query_that_finds_nothing_gets_one_repair_told_where_its_walk_stopped(kb, tmp_path):
    q = next(q for q in kb["questions"] if q.meta["template"] == "movies_directed_by")
    name = q.meta["gold_cypher"].split("name: ")[1].split("}")[0]
    wrong = f"MATCH (p:Person {{name: {name}}})-[:WON]->(a:Award) RETURN DISTINCT a.id AS id"
    replies = iter([plan(wrong), plan(q.meta["gold_cypher"])])
    with scripted(kb, tmp_path, lambda b: (200, completion(next(replies)))) as (server, res):
        g = res.graph
        r = get_retriever("spark", res).search(q.text, len(q.gold_sources) + 2)
    c = r.trace["counters"]
    told = server.requests[1]["messages"][-1]["content"]
    assert c["empty_feedback"] == 1 and c["repair_calls"] == 1 and c["fallback"] == 0 and r.usage["calls"] == 2
    assert told.startswith("That Cypher query ran and found nothing.") and "has no -[:WON]->(:Award)" in told
    assert "-[:DIRECTED]->(:Movie)" in told  # what the KB holds at the named director
    assert {g.source_ids[i] for i in r.idx[: len(q.gold_sources)]} == set(q.gold_sources)
    assert r.trace["empty_feedback"] in told


def test_a_repaired_query_that_finds_nothing_again_falls_back_without_a_third_call(kb, tmp_path):
    q = next(q for q in kb["questions"] if q.meta["template"] == "movies_directed_by")
    name = q.meta["gold_cypher"].split("name: ")[1].split("}")[0]
    wrong = plan(f"MATCH (p:Person {{name: {name}}})-[:WON]->(a:Award) RETURN DISTINCT a.id AS id")
    with scripted(kb, tmp_path, lambda b: (200, completion(wrong))) as (server, res):
        r = get_retriever("spark", res).search(q.text, 5)
    c = r.trace["counters"]
    assert len(server.requests) == 2 and c["empty_feedback"] == 1 and c["cypher_empty"] == 1 and c["fallback"] == 1
