"""GraphRAFT on the hand-made film KB: entity naming and resolution, template enumeration (and its
agreement with aggregate Cypher in the embedded store), constrained selection that never runs an
ungrounded query whatever the model replies, retrieval order, and the training labels with their
export. The model is a loopback endpoint with scripted replies."""

import json

import numpy as np
import pytest

from sagegraph.config import LLMConfig
from sagegraph.corpus.records import Question
from sagegraph.eval.evaluate import evaluate_one
from sagegraph.eval.runner import EvalConfig
from sagegraph.model import Node
from sagegraph.retrieve import get_retriever
from sagegraph.retrieve.graphraft.labels import (
    export_labels,
    label_questions,
    label_stats,
    read_labels,
    selection_accuracy,
)
from sagegraph.retrieve.graphraft.select import entity_lines, prior_order
from sagegraph.retrieve.graphraft.templates import enumerate_templates, run_in_store, store_counts
from sagegraph.retrieve.kb.entities import entity_slots, gazetteer_entities, read_entities, resolve
from sagegraph.retrieve.kb.unnamed import names_a_node, word_motifs, written_motifs
from sagegraph.retrieve.kb.view import kb_view
from sagegraph.retrieve.resources import open_resources
from sagegraph.store import open_store
from tests.fake_openai import FakeOpenAI, completion
from tests.kb_mini import build_mini, generations_records, mini_records


@pytest.fixture(scope="module")
def g(tmp_path_factory):
    return build_mini(tmp_path_factory.mktemp("graftkb") / "graph")


def row(g, sid):
    return int(g.row[f"n{sid}"])


def ids(g, rows):
    return {g.source_ids[r] for r in np.asarray(rows).tolist()}


def _llm(server, tmp_path):
    return LLMConfig(base_url=server.base_url, model="test-model", max_retries=1, cache_dir=tmp_path / "cache")


# -- entities -------------------------------------------------------------------------------------
def test_entities_are_read_typed_and_resolved_exactly_by_alias_or_by_name_vector(g):
    view = kb_view(g)
    types = g.node_types()
    got = read_entities(
        '{"entities": [{"name": " Ana Silva ", "type": "person"}, {"name": "Northlight", "type": "Planet"}, '
        '"Ben Cho", {"name": ""}]}',
        types,
    )
    assert got == [("Ana Silva", "Person"), ("Northlight", None), ("Ben Cho", None)]  # unknown type dropped, name kept
    with pytest.raises(ValueError):
        read_entities("no json here", types)
    assert gazetteer_entities(view, "Which films did Ana Silva direct for Northlight?") == [
        ("Ana Silva", "Person"),
        ("Northlight", "Studio"),
    ]
    assert gazetteer_entities(view, "Which films are about orchards?") == []
    e = resolve(view, "A. Silva", "Person")
    assert (e.row, e.match) == (row(g, "p1"), "exact")  # alias
    e = resolve(view, "Northlite", "Studio")
    assert (e.row, e.match) == (row(g, "s1"), "vector") and e.score <= 1.0  # typed pool: the one studio
    # the prompt's $e-numbering is the enumeration's: a miss and a second name for one node take no slot
    ents = [
        resolve(view, n, t)
        for n, t in [("Ana Silva", "Person"), ("Zzyzx Qwv", "Award"), ("A. Silva", "Person"), ("Northlight", "Studio")]
    ]
    ents[1].row, ents[1].rows, ents[1].match = None, [], "miss"
    assert entity_lines(ents, view).splitlines() == ['$e0 = Person "Ana Silva"', '$e1 = Studio "Northlight"']
    assert [e.rows for e in entity_slots(ents)] == [[row(g, "p1")], [row(g, "s1")]]


def test_a_written_name_resolves_by_its_fp32_reading_whatever_the_stored_vectors_rounded_to(g, monkeypatch):
    """The stored name vectors carry the build's numerics (bf16 on some CPUs); a name resolved by
    them alone could go to another node on another machine, and the prompt built on it with it."""
    view = kb_view(g)
    everyone = np.arange(len(g))
    vectors = g.exact_vectors(["Ana Silvia", *view.names])
    cosines = vectors[1:] @ vectors[0]
    fp32_order = np.lexsort((everyone, -cosines))[:3].tolist()
    scrambled = np.random.default_rng(0).normal(size=g.name_vectors.shape).astype(np.float32)
    monkeypatch.setattr(type(g), "name_vectors", property(lambda self: scrambled))
    rows, got = view.nearest_names("Ana Silvia", everyone, 3)
    assert len(g) <= 3 + 32 and rows.tolist() == fp32_order  # the whole pool is shortlisted here
    assert np.allclose(got, cosines[fp32_order]) and rows[0] == row(g, "p1")
    assert resolve(view, "Ana Silvia", "Person").row == row(g, "p1")


# -- templates ------------------------------------------------------------------------------------
def test_templates_around_entities_are_typed_directed_and_counted(g):
    view = kb_view(g)
    p1, s1 = row(g, "p1"), row(g, "s1")
    ts = {t.cypher(): t for t in enumerate_templates(view, [p1, s1])}
    one = ts["MATCH (e0:Person)-[:DIRECTED]->(x:Movie) WHERE e0.id IN $e0 RETURN DISTINCT x.id AS id"]
    assert ids(g, one.rows) == {"m1", "m2"} and one.kind == "1hop"
    two = ts[
        "MATCH (e0:Person)-[:DIRECTED]->(:Movie)<-[:ACTED_IN]-(x:Person) WHERE e0.id IN $e0 AND NOT x.id IN $e0 "
        "RETURN DISTINCT x.id AS id"
    ]
    assert ids(g, two.rows) == {"p3", "p4"}
    path = ts[
        "MATCH (e0:Person)-[:DIRECTED]->(x:Movie)-[:PRODUCED_BY]->(e1:Studio) WHERE e0.id IN $e0 AND e1.id IN "
        "$e1 AND NOT x.id IN $e0 AND NOT x.id IN $e1 RETURN DISTINCT x.id AS id"
    ]
    assert ids(g, path.rows) == {"m1"} and path.kind == "path"
    back = ts[
        "MATCH (e1:Studio)<-[:PRODUCED_BY]-(:Movie)<-[:DIRECTED]-(x:Person) WHERE e1.id IN $e1 AND NOT x.id IN "
        "$e1 RETURN DISTINCT x.id AS id"
    ]
    assert ids(g, back.rows) == {"p1"}
    assert all(t.count > 0 for t in ts.values()) and not any(
        "SIMILAR" in c for c in ts
    )  # the build's edges are not KB relations
    assert all("Ana" not in c and "Northlight" not in c for c in ts)  # ids as parameters, never names
    assert not [t for t in enumerate_templates(view, [p1], two_hop=False) if t.kind != "1hop"]
    # a hub cap drops 2-hop middles with more KB edges than allowed
    assert not [t for t in enumerate_templates(view, [p1], max_mid_degree=1) if t.kind == "2hop"]
    order = prior_order(list(ts.values()))
    assert list(ts.values())[order[0]].kind == "path"


def test_a_walk_budget_bounds_the_longer_templates_and_keeps_every_one_hop_and_path(g):
    """`WalkBudget`: a step that would examine more relations than the budget allows is not
    taken, and the budget says so; every 1-hop template and every path between two entities is
    still made, in the enumeration's own order. Unbounded, the same walk is not capped."""
    from sagegraph.retrieve.kb.metapaths import WalkBudget

    view = kb_view(g)
    p1, s1 = row(g, "p1"), row(g, "s1")
    whole, unbounded = enumerate_templates(view, [p1, s1], three_hop=True), WalkBudget()
    assert [t.cypher() for t in enumerate_templates(view, [p1, s1], three_hop=True, budget=unbounded)] == [
        t.cypher() for t in whole
    ]
    assert not unbounded.capped and {t.kind for t in whole} >= {"1hop", "2hop", "3hop", "path"}
    tight = WalkBudget(max_work=1)
    bounded = enumerate_templates(view, [p1, s1], three_hop=True, budget=tight)
    assert tight.capped and not [t for t in bounded if t.kind in ("2hop", "3hop")]
    assert [t.cypher() for t in bounded] == [t.cypher() for t in whole if t.kind in ("1hop", "path")]
    few = WalkBudget(max_chains=len([t for t in whole if t.kind == "1hop"]) + 1)
    assert len(enumerate_templates(view, [p1, s1], three_hop=True, budget=few)) < len(whole) and few.capped


def test_in_memory_enumeration_agrees_with_aggregate_cypher_in_the_store(g, tmp_path):
    view = kb_view(g)
    nodes, edges = mini_records()
    # an entity may stand for several nodes (all of one name): here Ana Silva and Ana Silvas as one
    ents = [[row(g, "p1"), row(g, "p2")], row(g, "s1"), row(g, "p3")]
    directed = [t for t in enumerate_templates(view, ents[:1]) if t.kind == "1hop" and t.hops[0].rel == "DIRECTED"]
    assert ids(g, directed[0].rows) == {"m1", "m2", "m3"}
    with open_store("falkordb", tmp_path / "store", graph="graft") as store:
        store.load_nodes(nodes)
        store.load_edges(edges)
        templates = enumerate_templates(view, ents)
        assert {t.key: t.count for t in templates} == store_counts(store, view, ents)
        for t in templates:  # each template's own Cypher returns exactly its rows
            assert run_in_store(store, view, t, ents).tolist() == sorted(t.rows.tolist()), t.cypher()


# -- selection and retrieval -----------------------------------------------------------------------
BAD = "MATCH (n) DETACH DELETE n"


def test_a_model_that_wants_an_ungrounded_query_only_ever_gets_a_grounded_one(g, tmp_path):
    """The scripted endpoint ignores the grammar and insists on a query that is not a candidate
    (a write, even): it is never run; the picks come from the no-model order, counted."""
    with FakeOpenAI(lambda body: (200, completion(json.dumps({"query": BAD})))) as server:
        res = open_resources(g, _llm(server, tmp_path))
        r = get_retriever("graphraft", res, ner="gazetteer", selector="grammar", m=2).search(
            "Which films did Ana Silva direct for Northlight?", 5
        )
        sent = server.requests
    assert len(sent) == 1  # the first unusable reply ends asking
    enum = sent[0]["response_format"]["schema"]["properties"]["query"]["enum"]
    assert BAD not in enum and all(c.startswith("MATCH (e") for c in enum)  # the grammar holds only the candidates
    assert "Candidates" not in json.dumps(sent[0]["messages"])  # as in the paper, the model is not shown the list
    sel = r.trace["selection"]
    assert sel["ungrounded"] == 1 and sel["from_prior"] == 2 and r.trace["counters"]["ungrounded_replies"] == 1
    assert all(c["cypher"] in enum for c in sel["chosen"]) and BAD not in json.dumps(sel["chosen"])
    assert sel["chosen"][0]["kind"] == "path" and g.source_ids[r.idx[0]] == "m1"


def test_grammar_selection_asks_again_without_earlier_picks_and_stops_once_k_is_filled(g, tmp_path):
    one = "MATCH (e0:Person)-[:DIRECTED]->(x:Movie) WHERE e0.id IN $e0 RETURN DISTINCT x.id AS id"
    two = (
        "MATCH (e0:Person)-[:DIRECTED]->(:Movie)<-[:ACTED_IN]-(x:Person) WHERE e0.id IN $e0 AND NOT x.id IN "
        "$e0 RETURN DISTINCT x.id AS id"
    )

    def responder(body):
        enum = body["response_format"]["schema"]["properties"]["query"]["enum"]
        return 200, completion(json.dumps({"query": one if one in enum else two}))

    with FakeOpenAI(responder) as server:
        res = open_resources(g, _llm(server, tmp_path))
        r = get_retriever("graphraft", res, ner="gazetteer", selector="grammar", m=5, fill=False).search(
            "Who acted in films by Ana Silva?", 3
        )
        enums = [b["response_format"]["schema"]["properties"]["query"]["enum"] for b in server.requests]
    assert len(enums) == 2 and one in enums[0] and one not in enums[1] and len(enums[1]) == len(enums[0]) - 1
    assert [c["cypher"] for c in r.trace["selection"]["chosen"]] == [one, two]  # 2 + 2 nodes >= k: no third call
    assert ids(g, r.idx[:2]) == {"m1", "m2"} and len(r.idx) == 3 and set(r.found_by) == {"template1", "template2"}
    assert r.usage["calls"] == 2 and r.trace["counters"]["select_calls"] == 2


def test_listed_selection_and_llm_entities_and_the_store_path_give_the_same_rows(g, tmp_path):
    def responder(body):
        if "choices" in json.dumps(body["response_format"]):
            return 200, completion(json.dumps({"choices": [0, 99, 0]}))
        return 200, completion(json.dumps({"entities": [{"name": "Ana Silva", "type": "Person"}]}))

    nodes, edges = mini_records()
    with FakeOpenAI(responder) as server, open_store("falkordb", tmp_path / "store", graph="graft2") as store:
        store.load_nodes(nodes)
        store.load_edges(edges)
        res = open_resources(g, _llm(server, tmp_path))
        res._store_factory = lambda: store  # noqa: SLF001 - the test's store
        kw = {"selector": "listed", "m": 1, "fill": False}
        mem = get_retriever("graphraft", res, **kw).search("Which films did Ana Silva direct?", 5)
        sto = get_retriever("graphraft", res, execute="store", **kw).search("Which films did Ana Silva direct?", 5)
        listed = [b for b in server.requests if "choices" in json.dumps(b["response_format"])][0]
    assert "Candidates:\n[0] MATCH" in listed["messages"][1]["content"]  # the zero-shot variant shows the menu
    assert mem.trace["selection"]["ungrounded"] == 1 and mem.trace["entities"][0]["match"] == "exact"
    assert list(mem.idx) == list(sto.idx) and len(mem.idx) > 0
    assert any(e["kind"] == "cypher" for e in sto.trace["events"])


def test_no_entity_means_no_template_and_the_vector_index_answers(g):
    r = get_retriever("graphraft", g, ner="gazetteer", selector="prior", unnamed="resolve").search(
        "Which films are about orchards?", 3
    )
    assert r.trace["counters"]["no_templates"] == 1 and set(r.found_by) == {"dense"} and len(r.idx) == 3


def test_a_question_that_names_no_node_is_ranked_by_the_motifs_the_model_names(g, tmp_path):
    view = kb_view(g)
    assert not names_a_node(view, "Which films are about orchards?")
    assert names_a_node(view, "Which films did Ana Silva direct?")
    assert names_a_node(view, "which films did northlight produce?")  # one lower-case word
    assert written_motifs(
        view,
        ["Orchards", "ORCHARDS", "Ana Silva", "Night Train", "fruit  trees ", "Northlight"],
        "Which Northlight films are about orchards?",
    ) == [
        "Orchards",
        "fruit trees",
        "Northlight",
    ]  # each once; a KB name the question does not hold is a copy; a paraphrase stays
    # a model that writes keyword searches: their words, less copied names, the rarer weighing more
    w = word_motifs(view, ["film  orchards", "Ana Silva", "Northlight orchards"], "Which films are about orchards?")
    assert list(w) == ["film", "orchards"] and w["orchards"] > w["film"] > 0  # every film's text says 'film'
    motif = completion(json.dumps({"entities": [{"name": "Orchard", "type": "Studio"}]}))
    with FakeOpenAI(lambda body: (200, motif)) as server:
        res = open_resources(g, LLMConfig(base_url=server.base_url, model="m", max_retries=1, cache_dir=tmp_path / "c"))
        r = get_retriever("graphraft", res, selector="prior").search("Which films are about orchards?", 3)
        hybrid = get_retriever("graphraft", res, selector="prior", unnamed="hybrid").search(
            "Which films are about orchards?", 3
        )
        paper = get_retriever("graphraft", res, selector="prior", unnamed="resolve").search(
            "Which films are about orchards?", 3
        )
    assert (
        r.trace["counters"]["unnamed"] == 1
        and r.trace["counters"]["unnamed_motifs"] == 1
        and set(r.found_by) == {"motifs"}
    )
    assert r.trace["unnamed"] == {"ranked_by": "motifs", "motifs": ["Orchard"]} and {
        g.source_ids[i] for i in r.idx[:2]
    } == {"m5", "m6"}
    assert hybrid.trace["counters"]["unnamed_motifs"] == 0 and set(hybrid.found_by) == {"hybrid"}
    assert {g.source_ids[i] for i in hybrid.idx[:2]} == {"m5", "m6"}
    assert (
        paper.trace["counters"]["unnamed"] == 0 and paper.trace["counters"]["resolved_vector"] == 1
    )  # 'Orchard' -> the studio


# -- labels -----------------------------------------------------------------------------------------
def test_labels_pick_the_best_template_keep_by_the_papers_rule_and_export_chat_records(g, tmp_path):
    qs = [
        Question("q1", "Which films did Ana Silva direct?", ["m1", "m2"], meta={"family": "one_hop"}),
        Question("q2", "Which films did Ana Silva direct for Northlight?", ["m1"], meta={"family": "intersection"}),
        Question("q3", "Which films are about orchards?", ["m5", "m6"], meta={"family": "textual"}),
        Question("q4", "Which of Ana Silva's films star Ben Cho?", ["m1", "m9"]),
    ]
    r = get_retriever("graphraft", g, ner="gazetteer", selector="prior")
    rows = label_questions(r, qs, tmp_path / "labels.jsonl")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["labels.jsonl"]  # renamed into place, nothing left beside it
    assert [json.loads(x)["qid"] for x in (tmp_path / "labels.jsonl").read_text().splitlines()] == [
        "q1",
        "q2",
        "q3",
        "q4",
    ]
    by = {x["qid"]: x for x in rows}
    assert (
        by["q1"]["best"] == "MATCH (e0:Person)-[:DIRECTED]->(x:Movie) WHERE e0.id IN $e0 RETURN DISTINCT x.id AS id"
        and by["q1"]["kept"]
    )
    assert by["q2"]["kind"] == "path" and by["q2"]["precision"] == 1.0 and by["q2"]["kept"]
    assert by["q3"]["best"] is None and not by["q3"]["kept"]  # no entity, no template
    assert by["q4"]["recall"] == 0.5 and not by["q4"]["kept"]  # recall below 1: not a training example
    stats = label_stats(rows)
    assert (
        stats["kept"] == 2
        and stats["with_templates"] == 3
        and stats["oracle_recall@20"] == pytest.approx((1 + 1 + 0 + 0.5) / 4)
    )
    n = export_labels(tmp_path / "labels.jsonl", tmp_path / "sft.jsonl")
    recs = [json.loads(x) for x in (tmp_path / "sft.jsonl").read_text().splitlines()]
    assert n == 2 and recs[0]["messages"][-1] == {
        "role": "assistant",
        "content": json.dumps({"query": by["q1"]["best"]}),
    }
    assert "m1" not in json.dumps(recs[0]["messages"])  # the record teaches the query, not the answers
    # selection accuracy of a run against these labels (the no-model order picks the path for q2)
    run = evaluate_one(
        r.res,
        EvalConfig(retriever="graphraft", k=5, params={"ner": "gazetteer", "selector": "prior"}),
        qs,
        tmp_path / "run",
    )
    acc = selection_accuracy(tmp_path / "run", read_labels(tmp_path / "labels.jsonl"))
    assert acc["questions"] == 3 and acc["kept_questions"] == 2 and acc["accuracy_kept"] == 1.0
    assert run["questions"] == 4 and "diag_chosen_recall" in run


def test_second_stage_reorders_the_retrieved_nodes_by_content_or_one_listwise_call(g, tmp_path):
    q = "Which films did Ana Silva direct?"
    base = get_retriever("graphraft", g, ner="gazetteer", selector="prior", m=1).search(q, 4)
    dense = get_retriever("graphraft", g, ner="gazetteer", selector="prior", m=1, second_stage="dense").search(q, 4)
    assert set(dense.idx) == set(base.idx) and dict(zip(dense.idx, dense.found_by)) == dict(
        zip(base.idx, base.found_by)
    )
    want = list(reversed(base.idx.tolist()))
    with FakeOpenAI(lambda body: (200, completion(", ".join(str(r) for r in want)))) as server:
        res = open_resources(g, _llm(server, tmp_path))
        lw = get_retriever("graphraft", res, ner="gazetteer", selector="prior", m=1, second_stage="listwise").search(
            q, 4
        )
    assert lw.idx.tolist() == want and lw.trace["counters"]["rerank_calls"] == 1


class _FakeScorer:
    """Log-probability by a rule: the 2-hop template is what this 'model' likes best per token."""

    def __init__(self):
        self.calls = 0

    def score(self, messages, replies):
        self.calls += 1
        return [(-10.0 if "ACTED_IN" in r else -30.0, 10 if "ACTED_IN" in r else 20) for r in replies], 50


def test_score_selection_is_the_exact_top_m_by_log_probability_cached_and_counted(g, tmp_path, monkeypatch):
    import sagegraph.retrieve.graphraft.retriever as graphraft

    fake = _FakeScorer()
    monkeypatch.setattr(graphraft, "sequence_scorer", lambda model: fake)
    with FakeOpenAI(lambda body: (500, completion("unused"))) as server:
        res = open_resources(g, _llm(server, tmp_path))
        r = get_retriever("graphraft", res, ner="gazetteer", selector="score", m=2, scorer_model="fake.gguf").search(
            "Who acted in films by Ana Silva?", 5
        )
        again = get_retriever(
            "graphraft", res, ner="gazetteer", selector="score", m=2, scorer_model="fake.gguf"
        ).search("Who acted in films by Ana Silva?", 5)
        summed = get_retriever(
            "graphraft", res, ner="gazetteer", selector="score", m=1, length_norm=False, scorer_model="fake.gguf"
        ).search("Who acted in films by Ana Silva?", 5)
    chosen = r.trace["selection"]["chosen"]
    assert "ACTED_IN" in chosen[0]["cypher"] and len(chosen) == 2 and r.trace["selection"]["from_prior"] == 0
    assert (
        fake.calls == 1 and again.usage["cached"] == 1 and list(again.idx) == list(r.idx)
    )  # one scoring pass, then the cache
    assert r.usage["calls"] == 1 and r.usage["work_completion_tokens"] > 0
    assert "ACTED_IN" in summed.trace["selection"]["chosen"][0]["cypher"]  # -10 beats -30 summed too


def test_the_local_model_scores_a_likely_reply_above_an_unlikely_one():
    from sagegraph.local_model import default_model_path, sequence_scorer

    pytest.importorskip("llama_cpp")
    if not default_model_path().exists():
        pytest.skip("the local model is not fetched here (`sagegraph llm fetch-model`)")
    s = sequence_scorer()
    msgs = [{"role": "user", "content": "What is the capital of France? Answer with the city only."}]
    (good, ng), (bad, nb) = s.score(msgs, ["Paris", "Toaster"])[0]
    assert good > bad and ng >= 2 and nb >= 2  # the end-of-turn marker is scored too
    assert s.score(msgs, ["Paris"])[0][0][0] == pytest.approx(good, abs=1e-3)  # deterministic


def test_a_refused_selection_falls_back_to_the_no_model_order_counted(g, tmp_path):
    err = {"error": {"message": "This model's maximum context length is 8192 tokens", "type": "invalid_request_error"}}
    with FakeOpenAI(lambda body: (400, err)) as server:
        res = open_resources(g, _llm(server, tmp_path))
        r = get_retriever("graphraft", res, ner="gazetteer", selector="listed", m=2).search(
            "Which films did Ana Silva direct for Northlight?", 5
        )
    c = r.trace["counters"]
    assert c["llm_refused"] == 1 and c["picks_from_prior"] == 2 and g.source_ids[r.idx[0]] == "m1"


def test_a_hop_whose_every_neighbour_is_the_topic_itself_gives_no_template_not_an_error(tmp_path):
    """The shape that crashed GraphRAFT on a real KB: the second hop from a node leads only back
    to the entity (X -R-> Y, and Y has no other neighbour), so the excluded set leaves nothing."""
    from sagegraph.model import Edge, Node

    nodes = [
        Node("nx", "entity", "Film", "name: X", "x", "X", 0, {"fields": {"name": "X"}}),
        Node("ny", "entity", "Person", "name: Y", "y", "Y", 0, {"fields": {"name": "Y"}}),
    ]
    g = build_mini(tmp_path / "graph", (nodes, [Edge("nx", "ny", "starred_actors")]))
    view = kb_view(g)
    templates = enumerate_templates(view, [g.rows_for_ids(["x"])])
    assert [(t.kind, t.hops[0].rel, t.target_type) for t in templates] == [("1hop", "starred_actors", "Person")]


# -- three hops and the phrase selector (not the paper's) -------------------------------------------
def test_three_hop_chains_are_enumerated_on_request_read_as_phrases_and_run_the_same_in_the_store(tmp_path):
    """On the genealogy KB (lower-case relations stored child -> parent): Ingrid's parent's other
    child's birthplace is a 3-hop chain through an inverse hop; its Cypher returns its rows."""
    from tests.kb_mini import family_records

    nodes, edges = family_records()
    g = build_mini(tmp_path / "graph", (nodes, edges))
    view = kb_view(g)
    ingrid = [row(g, "h2")]
    assert not [t for t in enumerate_templates(view, [ingrid]) if t.kind == "3hop"]  # the paper's two hops by default
    chains = {t.cypher(): t for t in enumerate_templates(view, [ingrid], three_hop=True) if t.kind == "3hop"}
    t = chains[
        "MATCH (e0:Human)-[:child_of]->(:Human)<-[:child_of]-(:Human)-[:born_in]->(x:Town) WHERE e0.id IN $e0 "
        "AND NOT x.id IN $e0 RETURN DISTINCT x.id AS id"
    ]
    assert ids(g, t.rows) == {"c2"} and t.mids == ("Human", "Human")
    assert (
        t.phrase() == "born in (Town) of child of (Human) of child of (Human)"
    )  # read from the target back, as questions read
    assert (
        prior_order([t, *[x for x in enumerate_templates(view, [ingrid]) if x.kind == "1hop"]])[-1] == 0
    )  # longest last without a model
    # a chain walks on through the start, as its Cypher matches: Håkon is the only one born in his
    # town, so the town's people are Håkon alone (no 2-hop template ends there, the start left out),
    # and their guild is his
    hakon = [row(g, "h1")]
    from_hakon = {t.cypher(): t for t in enumerate_templates(view, [hakon], three_hop=True)}
    through = (
        "MATCH (e0:Human)-[:born_in]->(:Town)<-[:born_in]-(:Human)-[:member_of]->(x:Guild) WHERE e0.id IN $e0 "
        "AND NOT x.id IN $e0 RETURN DISTINCT x.id AS id"
    )
    assert ids(g, from_hakon[through].rows) == {"r1"}
    assert not [c for c, x in from_hakon.items() if x.kind == "2hop" and "<-[:born_in]-(x:Human)" in c]
    with open_store("falkordb", tmp_path / "store", graph="family") as store:
        store.load_nodes(nodes)
        store.load_edges(edges)
        for c in chains.values():
            assert run_in_store(store, view, c, [ingrid]).tolist() == sorted(c.rows.tolist()), c.cypher()
        for c in from_hakon.values():
            assert run_in_store(store, view, c, [hakon]).tolist() == sorted(c.rows.tolist()), c.cypher()


def test_similar_selection_ranks_by_phrase_with_the_no_model_order_breaking_ties(g):
    from sagegraph.retrieve.graphraft.select import select

    view = kb_view(g)
    ts = enumerate_templates(view, [row(g, "p1")])
    want = next(i for i, t in enumerate(ts) if t.kind == "1hop" and t.hops[0].rel == "DIRECTED")
    sel = select("similar", None, "q", "", ts, 3, similarity=lambda tt: [1.0 if t is ts[want] else 0.5 for t in tt])
    assert sel.order[0] == want and sel.calls == 0 and len(sel.order) == 3
    assert sel.order[1:] == [i for i in prior_order(ts) if i != want][:2]  # equal scores: the no-model order


def test_of_two_templates_that_read_alike_the_one_walked_the_stored_way_goes_first(tmp_path):
    """From the middle generation, `child_of` walked its stored way (to the parent) and walked
    back (to the child) read as one phrase: the stored way, as the relation's name reads, first."""
    from sagegraph.retrieve.graphraft.select import select

    family = build_mini(tmp_path / "graph", generations_records())
    ts = enumerate_templates(kb_view(family), [int(family.row["ng1"])])
    one_hop = [t for t in ts if t.kind == "1hop"]
    assert len(one_hop) == 2 and one_hop[0].phrase() == one_hop[1].phrase()
    sel = select("similar", None, "q", "", ts, 2, similarity=lambda tt: [1.0 if t.kind == "1hop" else 0.5 for t in tt])
    first, second = (ts[i] for i in sel.order)
    assert first.hops[0].out and not second.hops[0].out
    assert ids(family, first.rows) == {"g0"} and ids(family, second.rows) == {"g2"}


def test_the_similar_selector_reads_the_question_without_entity_names_and_weights_unsure_entities(g, tmp_path):
    """No model for selection: "directed" in the question picks the DIRECTED template (the test
    encoder matches words). A relation
    word the entity step called a name (resolved by name vector, score < 1) starts templates that
    are down-weighted by that score, so the sure entity's template still wins."""
    r = get_retriever("graphraft", g, ner="gazetteer", selector="similar", m=1, fill=False).search(
        "Which movie was directed by Ana Silva?", 5
    )
    assert ids(g, r.idx) == {"m1", "m2"} and r.trace["selection"]["calls"] == 0
    assert r.trace["selection"]["replies"][0].endswith("directed (Movie)")

    def responder(body):  # the entity step names the relation word too
        return 200, completion(
            json.dumps({"entities": [{"name": "Ana Silva", "type": "Person"}, {"name": "movie", "type": "Movie"}]})
        )

    with FakeOpenAI(responder) as server:
        res = open_resources(g, _llm(server, tmp_path))
        r = get_retriever("graphraft", res, selector="similar", three_hop=True, m=1, fill=False).search(
            "Which movie was directed by Ana Silva?", 5
        )
    ents = {e["name"]: e for e in r.trace["entities"]}
    assert ents["movie"]["match"] == "vector" and ents["movie"]["score"] < 1
    assert ids(g, r.idx) == {"m1", "m2"} and len(server.requests) == 1  # one call: the entities; selection took none


def test_masked_question_takes_out_each_name_whatever_its_case():
    from sagegraph.retrieve.kb.chains import masked_question

    assert (
        masked_question("Which films did ana SILVA direct for Northlight?", ["Ana Silva", "Northlight"])
        == "Which films did   direct for  ?"
    )


def test_batches_for_in_batch_negatives_never_repeat_a_question_or_a_positive_and_keep_every_triplet():
    from sagegraph.retrieve.kb.chain_encoder import _batches_without_repeats

    triplets = [(f"q{i % 5}", f"p{i % 3}", f"n{i % 4}") for i in range(40)]
    batches = list(_batches_without_repeats(triplets, 8))
    assert sorted(t for b in batches for t in b) == sorted(triplets)
    for b in batches:
        texts = [x for t in b for x in t]
        assert len(texts) == len(set(texts))


def test_a_labelled_relation_path_beats_a_shortcut_that_holds_the_same_answer(tmp_path):
    """Ingrid's sibling was born where she was: by the paper's rule (most gold, then fewest
    results) the label is her own birthplace, a template that ignores two hops; where the
    questions file gives the relation path, the label is the chain that walks it, and the
    shortcut becomes one of its negatives."""
    from tests.kb_mini import family_records

    g = build_mini(tmp_path / "graph", family_records())
    r = get_retriever("graphraft", g, ner="gazetteer", selector="prior", three_hop=True)
    q = Question("q1", "Where was Ingrid Ørsted's sibling born?", ["c2"])
    plain = label_questions(r, [q], tmp_path / "a.jsonl")[0]
    assert plain["label_by"] == "hits" and plain["phrase"] == "born in (Town)"
    q.meta["relation_paths"] = [["child_of", "child_of", "born_in"]]
    walked = label_questions(r, [q], tmp_path / "b.jsonl")[0]
    assert (
        walked["label_by"] == "relation_path"
        and walked["phrase"] == "born in (Town) of child of (Human) of child of (Human)"
    )
    assert (
        walked["kept"] and "born in (Town)" in walked["negatives"] and walked["masked"] == "Where was  's sibling born?"
    )


def test_a_possessive_name_is_found_without_its_s(g):
    assert gazetteer_entities(kb_view(g), "Which of Ana Silva's films star Ben Cho?") == [
        ("Ana Silva", "Person"),
        ("Ben Cho", "Person"),
    ]
    assert gazetteer_entities(kb_view(g), "Which of Ana Silva’s films?") == [("Ana Silva", "Person")]


def test_names_link_whatever_their_case_and_length(tmp_path):
    """A lower-case question links its one-word names (not its opening word), and a name longer
    than any fixed window links whole."""
    long_name = "Alexander Ferdinand Third Prince Of Thurn And Taxis"
    nodes, edges = mini_records()
    nodes = [
        *nodes,
        Node("nlong", "entity", "Person", f"name: {long_name}", "long", long_name, 0, {"fields": {"name": long_name}}),
        Node("nname", "entity", "Word", "name: Name", "name", "Name", 0, {"fields": {"name": "Name"}}),
    ]
    view = kb_view(build_mini(tmp_path / "graph", (nodes, edges)))
    assert gazetteer_entities(view, "which films did northlight produce?") == [("northlight", "Studio")]
    assert gazetteer_entities(view, "name the films of ana silva") == [("ana silva", "Person")]
    assert gazetteer_entities(view, f"who is {long_name.lower()} 's kid ?") == [(long_name.lower(), "Person")]
    assert gazetteer_entities(view, f"who is the {long_name.lower()} 's kid ?") == [(long_name.lower(), "Person")]


def test_a_label_whose_relation_path_no_template_walks_is_not_taught_to_the_encoder(tmp_path):
    from sagegraph.retrieve.kb.chain_encoder import training_triplets
    from tests.kb_mini import family_records

    g = build_mini(tmp_path / "graph", family_records())
    r = get_retriever("graphraft", g, ner="gazetteer", selector="prior", three_hop=True)
    walks = Question(
        "q1",
        "Where was Ingrid Ørsted's sibling born?",
        ["c2"],
        meta={"relation_paths": [["child_of", "child_of", "born_in"]]},
    )
    loops = Question(
        "q2", "Where was Ingrid Ørsted's sibling born?", ["c2"], meta={"relation_paths": [["born_in", "located_in"]]}
    )
    rows = label_questions(r, [walks, loops], tmp_path / "l.jsonl")
    assert [x["label_by"] for x in rows] == ["relation_path", "hits_unwalked"] and rows[1][
        "kept"
    ]  # still the paper's label
    assert {t[1] for t in training_triplets(rows, negatives=50)} == {rows[0]["phrase"]}


def test_a_second_round_keeps_the_negatives_the_first_encoder_reads_closest():
    from sagegraph.retrieve.kb.chain_encoder import hardest_negatives

    class Words:  # cosine by shared words: "of parents" reads close to a question about parents
        def vectors(self, texts):
            vocab = sorted({w for t in texts for w in t.split()})
            v = np.array([[float(w in t.split()) for w in vocab] for t in texts])
            return v / np.linalg.norm(v, axis=1, keepdims=True)

    x = {
        "masked": "the gender of  's parents",
        "phrase": "gender (Gender) of parents (Person)",
        "kept": True,
        "negatives": ["spouse (Person)", "gender (Gender)", "gender (Gender) of parents (Person) of parents (Person)"],
    }
    out = hardest_negatives([x, {"qid": "no label"}], Words(), keep=2)
    assert out[0]["negatives"] == ["gender (Gender) of parents (Person) of parents (Person)", "gender (Gender)"]
    assert out[1] == {"qid": "no label"} and x["negatives"][0] == "spouse (Person)"  # the input is not changed


def test_a_trained_encoder_appears_whole_or_not_at_all(tmp_path):
    """What a killed or concurrent `train-selector` leaves: the previous encoder or the new one,
    never a mix; a killed run's folder is cleared by the next run; a second run into the same
    `--out` is refused while the first holds it; a folder holding something else is refused
    before any training is paid for."""
    import subprocess
    import sys

    from sagegraph.errors import ConfigError
    from sagegraph.retrieve.kb.chain_encoder import publish_folder, train_selector_encoder
    from sagegraph.runlock import DirectoryLocked

    out = tmp_path / "enc"

    def weights(tag):
        def write(folder):
            (folder / "modules.json").write_text(tag)
            (folder / "model.bin").write_text(tag)

        return write

    publish_folder(out, weights("one"))
    assert (out / "model.bin").read_text() == "one"

    def killed(folder):
        (folder / "modules.json").write_text("two")
        raise KeyboardInterrupt  # killed while saving

    with pytest.raises(KeyboardInterrupt):
        publish_folder(out, killed)
    assert (out / "model.bin").read_text() == "one" and (out / "modules.json").read_text() == "one"
    assert (tmp_path / ".enc.new").exists()  # the killed run's folder
    publish_folder(out, weights("three"))
    assert (out / "model.bin").read_text() == "three" and sorted(p.name for p in tmp_path.iterdir()) == ["enc"]
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys, time; from sagegraph.runlock import hold\n"
            f"with hold({str(out)!r}, 'train-selector', owned=False):\n    print('held', flush=True); time.sleep(60)",
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout.readline().strip() == "held"
        with pytest.raises(DirectoryLocked, match="another train-selector is writing here"):
            train_selector_encoder([], out)
    finally:
        holder.kill()
        holder.wait()
    assert (out / "model.bin").read_text() == "three"
    (tmp_path / "notes").mkdir()
    (tmp_path / "notes" / "mine.txt").write_text("keep")
    with pytest.raises(ConfigError, match="not a selector encoder"):
        train_selector_encoder([], tmp_path / "notes")
    assert (tmp_path / "notes" / "mine.txt").read_text() == "keep"


def test_chains_walk_on_through_their_start_and_end_without_it(tmp_path):
    """DGR's chains and `sagegraph adapt`'s drawn walks (`chains_from`) read a chain as the
    templates do: Håkon's town's people are Håkon alone, so that chain is not yielded (its end
    would be the start), but walked on it reaches his guild."""
    from sagegraph.retrieve.kb.metapaths import chains_from
    from tests.kb_mini import family_records

    g = build_mini(tmp_path / "graph", family_records())
    view = kb_view(g)
    named = {
        tuple((view.relation_types[c], out) for c, out, _ in hops): ids(g, ends)
        for hops, ends in chains_from(view, row(g, "h1"), 3)
    }
    assert named[(("born_in", True), ("born_in", False), ("member_of", True))] == {"r1"}
    assert (("born_in", True), ("born_in", False)) not in named
    assert all("h1" not in ends for ends in named.values())
    drawn = [  # as `sagegraph adapt` draws: the start left out at every step
        tuple((view.relation_types[c], out) for c, out, _ in hops)
        for hops, _ in chains_from(view, row(g, "h1"), 3, through_start=False)
    ]
    assert (("born_in", True), ("born_in", False), ("member_of", True)) not in drawn
    assert set(drawn) < set(named)
