"""What an adversary tried (README, "Reliability"): model replies that would hold the store, out
folders that are the user's, rebuilds under a running reader, crafted reply archives, and inputs
no one had tried. Each test names the probe it answers."""

from __future__ import annotations

import gzip
import json
import threading
import time
from pathlib import Path

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from sagegraph.construct import generations
from sagegraph.errors import ConfigError, GraphMissing, InputError, ReadOnlyViolation, SageGraphError, StoreError
from sagegraph.ownership import MARKER, NotOurs, claim
from sagegraph.runlock import GenerationGone, ReaderLease, hold
from sagegraph.store.readonly import MAX_HOPS, MAX_NESTING, MAX_QUERY_CHARS, guard_untrusted

# ---- 1, 5, 6, 12: what a model's Cypher may ask of the store ------------------------------------


@pytest.mark.parametrize("open_, close", [("(", ")"), ("[", "]"), ("{a:", "}")])
def test_brackets_nested_past_the_bound_are_refused_before_the_engine(open_, close):
    ok = "RETURN " + open_ * MAX_NESTING + "1" + close * MAX_NESTING + " AS x"
    assert guard_untrusted(ok, 10).startswith("RETURN")
    deep = "RETURN " + open_ * 30 + "1" + close * 30 + " AS x"
    with pytest.raises(ReadOnlyViolation, match="nested deeper"):
        guard_untrusted(deep, 10)


def test_a_query_past_the_length_bound_is_refused_without_reading_it():
    with pytest.raises(ReadOnlyViolation, match="characters"):
        guard_untrusted("RETURN 1 AS x " + " " * MAX_QUERY_CHARS, 10)


@pytest.mark.parametrize(
    "query,hops",
    [
        ("MATCH (a)-[:R]->(b) RETURN b", 1),
        ("MATCH (a)--(b)-->(c)<-[:X]-(d) RETURN d", 3),
        ("MATCH (a)-[r:T*1..3]->(b) RETURN b", 3),
        ("MATCH (a)-[*2]-(b) RETURN b", 2),
        ("MATCH (a)-[:R*..4 {w: 1}]-(b) RETURN b", 4),
        ("MATCH (a)-[:R]->(b) MATCH (b)-[:S]->(c) RETURN c", 2),
    ],
)
def test_the_hops_a_query_walks_are_counted_at_their_upper_bound(query, hops):
    from sagegraph.store.readonly import _code, bounded_hops, tokenize

    assert bounded_hops([t for _, t in _code(tokenize(query))]) == hops
    guard_untrusted(query, 10)


@pytest.mark.parametrize(
    "query",
    [
        "MATCH (a)-[*]->(b) RETURN b",
        "MATCH (a)-[:R*2..]->(b) RETURN b",
        "MATCH " + "()-[]-" * (MAX_HOPS + 1) + "() RETURN 1",  # 12 undirected hops took 103 s through SPARK
        "MATCH (a)-[*1..20]-(b) RETURN b",
    ],
)
def test_unbounded_or_long_walks_are_refused(query):
    with pytest.raises(ReadOnlyViolation):
        guard_untrusted(query, 10)


def test_a_procedure_call_without_return_cannot_escape_the_row_cap():
    with pytest.raises(ReadOnlyViolation, match="RETURN"):
        guard_untrusted("CALL db.labels()", 10)
    assert guard_untrusted("CALL db.labels() YIELD label RETURN label", 10).endswith("LIMIT 10")


@pytest.fixture(scope="module")
def hostile_store(tmp_path_factory):
    from sagegraph.store import open_store

    store = open_store("falkordb", tmp_path_factory.mktemp("hostile") / "store", graph="hostile")
    # 2,000 nodes and ~16,000 relationships: six undirected hops from every node run to the time limit
    store.write("UNWIND range(1, 2000) AS i CREATE (:Node {id: toString(i)})")
    store.write("MATCH (a:Node), (b:Node) WHERE (a.id + b.id) ENDS WITH '7' AND rand() < 0.04 CREATE (a)-[:R]->(b)")
    yield store
    store.close()


def _timed(store, query: str, timeout_ms: int) -> float:
    t0 = time.monotonic()
    try:
        store.read_untrusted(query, timeout_ms=timeout_ms, max_rows=50)
    except (ReadOnlyViolation, StoreError):
        pass
    return time.monotonic() - t0


@st.composite
def hostile_queries(draw) -> str:
    """Nested brackets up to 200 deep, long chains, and queries up to 1 MB."""
    kind = draw(st.sampled_from(["nested", "chain", "long", "wide"]))
    if kind == "nested":
        depth = draw(st.integers(1, 200))
        open_, close = draw(st.sampled_from([("(", ")"), ("[", "]"), ("{a:", "}"), ("[(", ")]")]))
        return "RETURN " + open_ * depth + "1" + close * depth + " AS x"
    if kind == "chain":
        hops = draw(st.integers(1, 30))
        arrow = draw(st.sampled_from(["-[]-", "-->", "<--", "--"]))
        return "MATCH (a)" + "".join(f"{arrow}(n{i})" for i in range(hops)) + " RETURN a.id AS id"
    if kind == "long":
        size = draw(st.integers(1_000, 1_000_000))
        return "RETURN '" + "x" * size + "' AS x"
    terms = draw(st.integers(10, 100_000))
    return "RETURN " + "+".join(["1"] * terms) + " AS x"


@settings(
    max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow]
)
@given(query=hostile_queries())
@example(
    query="MATCH (a)" + "".join(f"-[]-(n{i})" for i in range(MAX_HOPS)) + " RETURN count(*) AS c"
)  # the longest walk allowed
@example(
    query="RETURN " + "[(" * (MAX_NESTING // 2) + "1" + ")]" * (MAX_NESTING // 2) + " AS x"
)  # the deepest nesting allowed
def test_no_generated_query_holds_the_store_past_its_limit_and_another_reader_answers(hostile_store, query):
    limit_ms = 1000
    other: list[float] = []

    def ordinary():
        t0 = time.monotonic()
        rows = hostile_store.read("MATCH (n:Node) RETURN count(n) AS c")
        assert rows[0]["c"] == 2000
        other.append(time.monotonic() - t0)

    reader = threading.Thread(target=ordinary)
    reader.start()
    took = _timed(hostile_store, query, limit_ms)
    reader.join(10)
    assert took < limit_ms / 1000 + 1.0, (query[:80], took)
    assert other and other[0] < limit_ms / 1000 + 1.0


def test_a_huge_result_value_stays_within_the_time_limit(hostile_store):
    took = _timed(hostile_store, "RETURN range(1, 10000000) AS x", 1000)
    assert took < 2.0


# ---- 1: an embedded server never outlives the process that started it ---------------------------


# ---- 2: out folders ----------------------------------------------------------------------------


def test_a_users_folder_is_refused_as_out_and_left_untouched(tmp_path):
    thesis = tmp_path / "graphs" / "my_thesis"
    thesis.mkdir(parents=True)
    (thesis / "chapter1.txt").write_text("mine")
    with pytest.raises(NotOurs, match="did not write"):
        claim(tmp_path)
    with pytest.raises(NotOurs), hold(tmp_path, "build"):
        pass
    assert sorted(p.name for p in tmp_path.iterdir()) == ["graphs"] and (thesis / "chapter1.txt").read_text() == "mine"


def test_a_folder_that_only_reuses_sagegraphs_names_is_still_the_users(tmp_path):
    (tmp_path / "graph").mkdir()
    (tmp_path / "graph" / "notes.txt").write_text("mine")
    with pytest.raises(NotOurs):
        claim(tmp_path)


@pytest.mark.parametrize("where", ["/", "~", "home-parent"])
def test_the_root_and_the_home_folder_are_refused(where):
    path = Path.home().parent if where == "home-parent" else Path(where)
    with pytest.raises(NotOurs, match="root|home"):
        claim(path)


def test_new_empty_and_earlier_sagegraph_folders_are_marked(tmp_path):
    with hold(tmp_path / "new", "build"):
        assert not (tmp_path / "new").exists()  # nothing made before it is needed (a bad input leaves no folder)
        (tmp_path / "new").mkdir()
    assert (tmp_path / "new" / MARKER).is_file()
    (tmp_path / "empty").mkdir()
    assert (claim(tmp_path / "empty") / MARKER).is_file()
    old = tmp_path / "old"
    (old / "graphs").mkdir(parents=True)
    (old / "graphs" / "published.json").write_text("{}")  # a build made before markers existed
    assert (claim(old) / MARKER).is_file()


def test_publication_deletes_only_generations_it_wrote(tmp_path):
    out = tmp_path / "out"
    gens = []
    for name in ("aaaa", "bbbb", "cccc"):
        g = out / "graphs" / name
        g.mkdir(parents=True)
        (g / "manifest.json").write_text("{}")
        (g / "nodes.parquet").write_text("")
        gens.append(g)
    mine = out / "graphs" / "my_thesis"
    mine.mkdir()
    (mine / "chapter1.txt").write_text("mine")
    for g in gens:
        generations.publish(out, g)
    assert [d.name for d in generations.retired(out)] == ["aaaa"]
    generations.drop(generations.retired(out))
    assert (mine / "chapter1.txt").read_text() == "mine" and not gens[0].exists()


def test_a_plain_graph_folder_sagegraph_did_not_write_is_never_moved(tmp_path):
    out = tmp_path / "out"
    (out / "graph").mkdir(parents=True)
    (out / "graph" / "notes.txt").write_text("mine")
    g = out / "graphs" / "aaaa"
    g.mkdir(parents=True)
    (g / "manifest.json").write_text("{}")
    with pytest.raises(ConfigError, match="did not write"):
        generations.publish(out, g)
    assert (out / "graph" / "notes.txt").read_text() == "mine"


def test_the_record_offers_no_rollback_to_a_generation_deleted_by_hand(tmp_path):
    out = tmp_path / "out"
    a, b = out / "graphs" / "aaaa", out / "graphs" / "bbbb"
    for g in (a, b):
        g.mkdir(parents=True)
        (g / "manifest.json").write_text("{}")
    generations.publish(out, a)
    import shutil

    shutil.rmtree(a)
    assert generations.publish(out, b)["previous"] is None


# ---- 3: a rebuild under a running reader ---------------------------------------------------------


def test_a_generation_a_reader_holds_is_kept_until_it_is_released(tmp_path):
    from sagegraph.runlock import retiring

    gen = tmp_path / "graphs" / "aaaa"
    gen.mkdir(parents=True)
    (gen / "nodes.parquet").write_text("")
    lease = ReaderLease(gen)
    with retiring(gen) as free:
        assert not free  # a publication keeps it
    lease.release()
    with retiring(gen) as free:
        assert free
        generations.drop([gen])
    assert not gen.exists()
    with pytest.raises(GenerationGone):
        ReaderLease(gen)


def test_a_lease_taken_while_a_generation_is_deleted_sees_it_gone(tmp_path):
    from sagegraph.runlock import retiring

    gen = tmp_path / "g"
    gen.mkdir()
    (gen / "nodes.parquet").write_text("")
    got: list[BaseException | ReaderLease] = []
    with retiring(gen) as free:
        assert free
        waiter = threading.Thread(target=lambda: got.append(_lease_or_error(gen)))
        waiter.start()
        time.sleep(0.2)
        (gen / "nodes.parquet").unlink()  # what `drop` does first
    waiter.join(5)
    assert isinstance(got[0], GenerationGone)


def _lease_or_error(gen: Path):
    try:
        return ReaderLease(gen)
    except GenerationGone as exc:
        return exc


def test_a_missing_store_graph_is_an_error_not_an_empty_result(tmp_path):
    from sagegraph.store import open_store

    with open_store("falkordb", tmp_path / "store", graph="never-loaded") as store:
        assert store.count_nodes() == 0  # a load starting on it reads it as empty
        with pytest.raises(GraphMissing, match="never loaded, or deleted"):
            store.read_untrusted("MATCH (n) RETURN n.id AS id")


# ---- 4: reply archives ----------------------------------------------------------------------------


def _client(tmp_path):
    from sagegraph.config import LLMConfig
    from sagegraph.llm import LLMClient

    return LLMClient(
        LLMConfig(model="m", base_url="http://127.0.0.1:9/v1", cache_mode="replay"), tmp_path / "llm.sqlite"
    )


def _row(client, question: str, text: str = "answer", **over):
    from sagegraph.llm import request_key

    request = client.request(
        [{"role": "user", "content": question}], {"temperature": 0.0, "max_tokens": client.cfg.max_tokens}
    )
    return {
        "key": request_key(request),
        "text": text,
        "prompt_tokens": 10,
        "completion_tokens": 2,
        "created": 1.0,
        "extra": {"seconds": 0.1, "tool_calls": []},
        "request": request,
        **over,
    }


def _archive(path: Path, rows) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


def test_an_imported_reply_answers_only_the_request_it_recorded(tmp_path):
    from sagegraph.eval.replies import import_replies

    client = _client(tmp_path)
    good = _row(client, "what is x?")
    forged = {**_row(client, "what is y?"), "key": _row(client, "a question not yet asked")["key"]}
    with pytest.raises(InputError, match="request.*does not hash"):
        import_replies(_archive(tmp_path / "a.jsonl", [good, forged]), tmp_path / "c.sqlite")
    assert import_replies(_archive(tmp_path / "b.jsonl", [good]), tmp_path / "c.sqlite") == (1, 0)
    bare = {k: v for k, v in _row(client, "what is z?").items() if k != "request"}
    with pytest.raises(InputError, match="--unbound"):
        import_replies(_archive(tmp_path / "c.jsonl", [bare]), tmp_path / "c.sqlite")
    assert import_replies(tmp_path / "c.jsonl", tmp_path / "c.sqlite", unbound=True) == (1, 0)


@pytest.mark.parametrize(
    "change,field",
    [
        ({"prompt_tokens": -1_000_000}, "prompt_tokens"),
        ({"completion_tokens": 10**12}, "completion_tokens"),
        ({"extra": [1]}, "extra"),
        ({"extra": {"seconds": -5}}, "extra.seconds"),
        ({"extra": {"steer": 1}}, "extra.steer"),
        ({"created": "yesterday"}, "created"),
        ({"text": None}, "text"),
    ],
)
def test_every_line_is_checked_before_any_is_written(tmp_path, change, field):
    from sagegraph.eval.replies import import_replies
    from sagegraph.llm import ReplyCache

    client = _client(tmp_path)
    rows = [_row(client, "first"), {**_row(client, "second"), **change}]
    with pytest.raises(InputError) as err:
        import_replies(_archive(tmp_path / "a.jsonl", rows), tmp_path / "c.sqlite")
    assert err.value.line == 2 and err.value.field == field
    assert list(ReplyCache(tmp_path / "c.sqlite").rows()) == []  # not even the good first line


def test_a_corrected_archive_replaces_with_replace_and_usage_says_imported(tmp_path):
    from sagegraph.eval.replies import import_replies

    client = _client(tmp_path)
    import_replies(_archive(tmp_path / "bad.jsonl", [_row(client, "q", text="wrong")]), client.cache.path)
    assert import_replies(_archive(tmp_path / "fixed.jsonl", [_row(client, "q", text="right")]), client.cache.path) == (
        0,
        1,
    )
    assert client.chat([{"role": "user", "content": "q"}]).text == "wrong"  # kept without --replace
    assert import_replies(tmp_path / "fixed.jsonl", client.cache.path, replace=True) == (1, 0)
    assert client.chat([{"role": "user", "content": "q"}]).text == "right"
    assert client.usage.imported == 2 and client.usage.prompt_tokens == 0  # served, never counted as paid here


def test_an_archive_that_expands_past_the_bound_is_refused(tmp_path, monkeypatch):
    from sagegraph.eval import replies

    monkeypatch.setattr(replies, "MAX_ARCHIVE_BYTES", 1_000_000)
    path = tmp_path / "bomb.jsonl.gz"
    with gzip.open(path, "wb") as fh:
        fh.write(b" " * 5_000_000)
    assert path.stat().st_size < 20_000
    with pytest.raises(InputError, match="expands past"):
        replies.import_replies(path, tmp_path / "c.sqlite")


def test_exported_replies_carry_their_request_and_import_bound(tmp_path):
    from sagegraph.eval.replies import checked_row
    from sagegraph.llm import Reply

    client = _client(tmp_path)
    row = _row(client, "q")
    client.cache.put(row["key"], Reply("a", 1, 1, False), row["request"])
    exported = next(client.cache.rows([row["key"]]))
    assert exported["request"] == row["request"]
    checked_row(exported, tmp_path / "x.jsonl", 1, unbound=False)


def test_replies_imported_from_one_archive_export_into_one_that_imports(tmp_path, monkeypatch):
    """A study's replies are often partly another study's, imported: its export must not carry this
    cache's mark of where they came from, which an import refuses as a field it is not given."""
    from sagegraph.eval.replies import export_replies, import_replies

    client = _client(tmp_path)
    row = _row(client, "q")
    import_replies(_archive(tmp_path / "first.jsonl", [row]), client.cache.path)
    run = tmp_path / "run"
    run.mkdir()
    (run / "config.json").write_text(json.dumps({"llm": {"cache": str(client.cache.path)}}))
    (run / "traces.jsonl").write_text(json.dumps({"qid": "1", "events": [{"kind": "llm", "key": row["key"]}]}) + "\n")
    assert export_replies(run, tmp_path / "second.jsonl.gz") == 1
    assert import_replies(tmp_path / "second.jsonl.gz", tmp_path / "other.sqlite") == (1, 0)


def test_every_committed_reply_archive_imports(tmp_path):
    """`make replies` imports each of them into a fresh machine's caches, stopping at the first it refuses."""
    from sagegraph.eval.replies import import_replies

    archives = sorted((Path(__file__).resolve().parents[2] / "benchmarks" / "replies").glob("*/*.jsonl.gz"))
    assert len(archives) >= 20
    for archive in archives:
        written, kept = import_replies(archive, tmp_path / f"{archive.parent.name}.sqlite", unbound=True)
        assert written + kept > 0, archive


# ---- 8-11: inputs ---------------------------------------------------------------------------------


def _kb(tmp_path: Path, nodes: list, edges: list | None = None) -> Path:
    (tmp_path / "nodes.jsonl").write_text(
        "".join((n if isinstance(n, str) else json.dumps(n)) + "\n" for n in nodes), encoding="utf-8"
    )
    (tmp_path / "edges.jsonl").write_text("".join(json.dumps(e) + "\n" for e in edges or []), encoding="utf-8")
    return tmp_path


@pytest.mark.parametrize(
    "line,field",
    [
        ('{"id": "a", "type": "T", "fields": {"name": "bad\\u0000name"}}', "fields.name"),
        ('{"id": "a", "type": "T", "fields": {"name": "half \\ud800 a pair"}}', "fields.name"),
        ('{"id": "a", "type": "T", "fields": {"na\\u0000me": "x"}}', "fields.na\x00me"),
    ],
)
def test_text_no_store_can_hold_is_refused_with_its_line_and_field(tmp_path, line, field):
    from sagegraph.corpus.jsonl import ErrorPolicy
    from sagegraph.corpus.kb import load_kb

    root = _kb(tmp_path, [{"id": "ok", "type": "T", "fields": {"name": "fine"}}, line])
    with pytest.raises(InputError) as err:
        load_kb(root, ErrorPolicy())
    assert err.value.line == 2 and err.value.field == field


@pytest.mark.parametrize(
    "nodes,edges,where,field",
    [
        (
            [{"id": "a", "type": "T", "fields": {"na me": "x"}}, {"id": "b", "type": "T", "fields": {"na_me": "y"}}],
            [],
            "nodes.jsonl",
            "fields.na_me",
        ),
        (
            [
                {"id": "a", "type": "T", "fields": {"name": "x", "na-me": "y"}},
                {"id": "b", "type": "T", "fields": {"na_me": "y"}},
            ],
            [],
            "nodes.jsonl",
            "fields.na_me",
        ),
        (
            [
                {"id": "a", "type": "Film-Star", "fields": {"name": "x"}},
                {"id": "b", "type": "Film Star", "fields": {"name": "y"}},
            ],
            [],
            "nodes.jsonl",
            "type",
        ),
        (
            [{"id": "a", "type": "T", "fields": {"name": "x"}}, {"id": "b", "type": "T", "fields": {"name": "y"}}],
            [{"src": "a", "dst": "b", "type": "depends-on"}, {"src": "b", "dst": "a", "type": "depends on"}],
            "edges.jsonl",
            "type",
        ),
    ],
)
def test_names_the_store_would_merge_are_an_error(tmp_path, nodes, edges, where, field):
    from sagegraph.corpus.jsonl import ErrorPolicy
    from sagegraph.corpus.kb import load_kb

    with pytest.raises(InputError, match="would merge") as err:
        load_kb(_kb(tmp_path, nodes, edges), ErrorPolicy())
    assert err.value.path.endswith(where) and err.value.line == 2 and err.value.field == field


def test_a_field_named_like_the_nodes_own_text_does_not_overwrite_it():
    from sagegraph.model import ENTITY, Node
    from sagegraph.store.mapping import node_row

    node = Node(
        "e1", ENTITY, "T", "name: x\ntext: y", "a", "x", 0, {"fields": {"name": "x", "text": "y", "topic": "z"}}
    )
    props = node_row(node, None)["props"]
    assert props["text"] == "name: x\ntext: y" and props["field_text"] == "y" and props["field_topic"] == "z"


def test_a_question_past_the_length_bound_is_refused_with_its_line(tmp_path, monkeypatch):
    from sagegraph.corpus.questions import load_questions

    path = tmp_path / "q.jsonl"
    path.write_text(
        json.dumps({"id": "1", "question": "short?", "answer_ids": ["a"]})
        + "\n"
        + json.dumps({"id": "2", "question": "x" * 5000, "answer_ids": ["a"]})
        + "\n",
        encoding="utf-8",
    )
    with pytest.raises(InputError) as err:
        load_questions(path)
    assert (err.value.line, err.value.field) == (2, "question")
    monkeypatch.setenv("SAGEGRAPH_MAX_QUESTION_CHARS", "10000")
    assert len(load_questions(path)) == 2


def test_a_long_name_is_never_a_schema_card_example():
    from sagegraph.retrieve.kb.schema_card import pattern_examples

    class Store:
        def read(self, query, max_rows, timeout_ms):
            return [{"x": {"name": "n" * 100_000}, "y": {"name": "short"}}, {"x": {"name": "Ann"}, "y": {"name": "Bo"}}]

    shown = pattern_examples(Store(), [("P", "KNOWS", "P")])  # type: ignore[arg-type]
    assert shown == {("P", "KNOWS", "P"): "(:P {name: 'Ann'})-[:KNOWS]->(:P {name: 'Bo'})"}


# ---- 7: bounded graph work on a hub ----------------------------------------------------------------


def _view_with_hub(hub_edges: int):
    """A KB view of 2,001 nodes in which node 0 has `hub_edges` relations (20 types), beside 5,000
    sparse ones: the probe's hub KB, held in memory."""
    import types

    import numpy as np

    from sagegraph.retrieve.kb.view import KBView

    rng = np.random.default_rng(0)
    n = 2001
    view = KBView.__new__(KBView)
    view.graph, view.n, view._columns = (
        types.SimpleNamespace(types=np.array(["Hub"] + ["Item"] * 1000 + ["Person"] * 1000, dtype=object)),
        n,
        {},
    )
    src = np.concatenate([np.zeros(hub_edges, dtype=np.int64), rng.integers(1, n, 5000)])
    dst = np.concatenate([rng.integers(1, n, hub_edges), rng.integers(1, n, 5000)])
    rel = np.concatenate([rng.integers(0, 20, hub_edges), rng.integers(20, 25, 5000)])
    view.__dict__["_edges"] = (src, dst, rel, [f"R{i}" for i in range(25)])
    return view


def test_chains_from_a_hub_stop_at_their_bound_and_say_so():
    from sagegraph.retrieve.kb.metapaths import WalkBudget, chains_from

    view = _view_with_hub(200_000)
    for start in (0, 5):  # the hub itself, and a node one relation from it
        budget = WalkBudget()
        chains = list(chains_from(view, start, 3, budget=budget))
        assert budget.capped and len(chains) <= budget.max_chains and budget.work <= budget.max_work + 200_000 * 2
        assert [len(h) for h, _ in chains] == sorted(
            len(h) for h, _ in chains
        )  # shortest first: what is kept is the nearest


def test_a_walk_within_its_bound_is_the_unbounded_walk():
    from sagegraph.retrieve.kb.metapaths import WalkBudget, chains_from

    view = _view_with_hub(0)
    budget = WalkBudget()
    bounded = [(h, e.tolist()) for h, e in chains_from(view, 5, 3, budget=budget)]
    unbounded = [
        (h, e.tolist()) for h, e in chains_from(view, 5, 3, budget=WalkBudget(max_work=10**12, max_chains=10**9))
    ]
    assert not budget.capped and bounded == unbounded


# ---- 10, 12: one line, not a traceback ---------------------------------------------------------------


def test_a_folder_where_a_jsonl_file_belongs_is_one_line(tmp_path):
    from sagegraph.corpus.jsonl import ErrorPolicy
    from sagegraph.corpus.kb import load_kb

    (tmp_path / "nodes.jsonl").mkdir()
    with pytest.raises(InputError, match="is a folder"):
        load_kb(tmp_path, ErrorPolicy())


@pytest.mark.parametrize("base", ["extends: [1, 2]\n", "extends: base.yaml\n"])
def test_extends_naming_a_non_mapping_or_bad_yaml_is_one_line(tmp_path, base):
    from sagegraph.config import load_config

    (tmp_path / "base.yaml").write_text("- a list\n- not a mapping\n" if "base.yaml" in base else "x: 1\n")
    (tmp_path / "c.yaml").write_text(base + "name: x\n")
    with pytest.raises(ConfigError, match="extends|mapping"):
        load_config(tmp_path / "c.yaml")
    (tmp_path / "base.yaml").write_text("corpus: {kind: kb\n")  # unclosed
    (tmp_path / "c.yaml").write_text("extends: base.yaml\n")
    with pytest.raises(ConfigError, match="base.yaml:.*not valid YAML"):
        load_config(tmp_path / "c.yaml")


def test_a_sweep_that_expands_past_its_bound_is_refused_before_any_work(tmp_path):
    import yaml

    from sagegraph.eval.sweep import load_sweep

    sweep = {
        "name": "big",
        "graph": str(tmp_path / "graph"),
        "questions": str(tmp_path / "q.jsonl"),
        "out": str(tmp_path / "out"),
        "grid": [{"retriever": ["sage"], "k": list(range(1, 101)), "params": {"k_prime": list(range(1, 101))}}],
    }
    (tmp_path / "s.yaml").write_text(yaml.safe_dump(sweep))
    with pytest.raises(ConfigError, match="more than 500 configurations"):
        load_sweep(tmp_path / "s.yaml")
    assert not (tmp_path / "out").exists()


def test_export_from_another_folder_names_the_missing_cache_and_makes_none(tmp_path, monkeypatch):
    from sagegraph.eval.replies import export_replies

    run = tmp_path / "run"
    run.mkdir()
    (run / "config.json").write_text(json.dumps({"graph": "work/kb/graph"}))
    (run / "traces.jsonl").write_text(json.dumps({"qid": "1", "events": [{"kind": "llm", "key": "a" * 64}]}) + "\n")
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SageGraphError, match="does not exist here"):
        export_replies(run, tmp_path / "out.jsonl")
    assert not (tmp_path / "work").exists()


def test_an_unreachable_prefect_server_is_one_line_before_any_worker_starts(tmp_path, monkeypatch):
    from sagegraph.errors import InfraError
    from sagegraph.flows.runtime import prefect_api

    monkeypatch.setenv("PREFECT_API_URL", "http://127.0.0.1:9/api")
    started = []
    with pytest.raises(InfraError, match="does not answer"), prefect_api(tmp_path / "out", on_url=started.append):
        pass
    assert started == []


def test_a_long_name_is_cut_where_a_reranker_reads_a_candidates_relations():
    import types

    import numpy as np

    from sagegraph.retrieve.kb.view import KBView

    view = KBView.__new__(KBView)
    view.graph, view.n, view._columns = (
        types.SimpleNamespace(types=np.array(["A", "B"], dtype=object), title=lambda i: ""),
        2,
        {},
    )
    view.__dict__["_edges"] = (np.array([0]), np.array([1]), np.array([0]), ["KNOWS"])
    view.__dict__["fields"] = [{"name": "short"}, {"name": "n" * 100_000}]
    view.__dict__["names"] = ["short", "n" * 100_000]
    described = view.describe(0, text_chars=240)
    assert len(described) < 400 and "KNOWS -> " + "n" * 240 + "..." in described


def test_replies_imported_before_the_build_leave_its_folder_sagegraphs_own(tmp_path):
    """`make replies` runs before any build: the build folder it makes to hold the cache is then
    sagegraph's, so the build that follows may use it; a user's folder it only wrote into is not."""
    from sagegraph.eval.replies import import_replies
    from sagegraph.ownership import NotOurs, claim

    client = _client(tmp_path)
    archive = _archive(tmp_path / "a.jsonl", [_row(client, "what is x?")])
    assert import_replies(archive, tmp_path / "work" / "kb" / "cache" / "llm.sqlite") == (1, 0)
    assert claim(tmp_path / "work" / "kb") == tmp_path / "work" / "kb"
    theirs = tmp_path / "theirs"
    (theirs / "notes").mkdir(parents=True)
    import_replies(archive, theirs / "cache" / "llm.sqlite")
    with pytest.raises(NotOurs):
        claim(theirs)
