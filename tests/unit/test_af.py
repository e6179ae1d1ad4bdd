"""AF-Retriever steps 4-8 on a hand-made KB graph whose answers are known: candidates, typed
directed grounding, the l schedule's rounds, VSS keep and fill, each reranker's parse failures and
pairwise insertion, context-length degradation, and the whole retriever against a loopback
endpoint with scripted replies (unusable ones included). No model: a hashing encoder stands in."""

import json
import re

import numpy as np
import pytest

from sagegraph.config import LLMConfig
from sagegraph.corpus.records import Question
from sagegraph.eval.metrics import stage_diagnostics
from sagegraph.llm import LLMRequestRefused, Reply
from sagegraph.retrieve import get_retriever
from sagegraph.retrieve.af.ground import ground, symbol_candidates
from sagegraph.retrieve.af.parse import parse_cypher
from sagegraph.retrieve.af.retriever import parse_target_type
from sagegraph.retrieve.kb.rerank import (
    Reranker,
    binary_insertion,
    parse_choice,
    parse_order,
    parse_score,
)
from sagegraph.retrieve.kb.view import KBView
from sagegraph.retrieve.resources import open_resources
from sagegraph.retrieve.timeline import Timeline
from tests.fake_openai import FakeOpenAI, completion
from tests.kb_mini import RELS, build_mini


@pytest.fixture(scope="module")
def mini(tmp_path_factory):
    g = build_mini(tmp_path_factory.mktemp("afkb") / "graph")
    return g, KBView(g)


def run_ground(view, cypher, k=20, l_max=10, directed=True, cap=10_000, use_type=True):
    g = view.graph
    p = parse_cypher(cypher, set(g.node_types()), set(view.relation_types))
    cands = {v: symbol_candidates(view, s, l_max, use_type) for v, s in p.symbols.items()}
    out = ground(view, p, cands, k, l_max, "paper", directed, cap)
    return [g.source_ids[i] for i in out.answers], out, cands


def test_view_reads_fields_relations_and_keeps_similarity_edges_out(mini):
    g, v = mini
    assert "SIMILAR_DESCRIPTION" not in v.relation_types and set(v.relation_types) == {
        "ACTED_IN",
        "DIRECTED",
        "PRODUCED_BY",
    }
    assert ("Person", "DIRECTED", "Movie", 4) in v.patterns
    src, _ = v.edges(None)
    assert len(src) == len(RELS)
    row = g.row["nm1"]
    assert "DIRECTED <- Ana Silva (Person)" in v.describe(row) and "year: 1995" in v.describe(row)
    assert "relations" not in v.describe(row, relations=0)
    assert v.example_names("Person", 1) == ["Ben Cho"]  # best connected first


def test_one_hop_grounds_the_first_candidate_first(mini):
    ans, out, cands = run_ground(
        mini[1], "MATCH (p:Person {name: 'Ana Silva'})-[:DIRECTED]->(m:Movie) RETURN m.title", k=2
    )
    assert sorted(ans) == ["m1", "m2"] and out.round_of == [0, 0] and len(out.rounds) == 1
    assert cands["p"].exact == 1 and cands["p"].ranked[0] == mini[0].row["np1"]


def test_rounds_grow_l_until_k_answers_and_append_later_rounds(mini):
    ans, out, _ = run_ground(
        mini[1], "MATCH (p:Person {name: 'Ana Silva'})-[:DIRECTED]->(m:Movie) RETURN m.title", k=20, l_max=4
    )
    assert [r["l"] for r in out.rounds] == [1, 2, 3, 4]
    assert sorted(ans[:2]) == ["m1", "m2"] and set(ans[2:]) == {"m3", "m5"}  # other directors, in later rounds
    assert out.round_of[:2] == [0, 0] and min(out.round_of[2:]) >= 1


def test_intersection_of_two_constants_is_the_one_shared_film(mini):
    ans, _, _ = run_ground(
        mini[1],
        "MATCH (a:Person {name: 'Ana Silva'})-[:DIRECTED]->(m:Movie)<-[:ACTED_IN]-(b:Person {name: 'Ben Cho'}) "
        "RETURN m.title",
        k=1,
    )
    assert ans == ["m1"]


def test_two_hop_through_an_anonymous_node(mini):
    q = "MATCH (s:Studio {name: 'Northlight'})<-[:PRODUCED_BY]-(:Movie)<-[:ACTED_IN]-(p:Person) RETURN p.name"
    ans, _, _ = run_ground(mini[1], q, k=1)
    assert ans == ["p3"]  # Ben Cho acted in both Northlight films; nobody else acted in one


def test_direction_matters_unless_grounding_is_undirected(mini):
    q = "MATCH (m:Movie)-[:DIRECTED]->(p:Person {name: 'Ana Silva'}) RETURN m.title"
    assert run_ground(mini[1], q, k=2)[0] == []
    assert sorted(run_ground(mini[1], q, k=2, directed=False)[0]) == ["m1", "m2"]


def test_filters_numbers_dates_as_years_and_aliases(mini):
    v = mini[1]
    assert run_ground(
        v, "MATCH (p:Person {name: 'Ben Cho'})-[:ACTED_IN]->(m:Movie) WHERE m.year > 1999 RETURN m.title", k=1
    )[0] == ["m3"]
    assert run_ground(
        v, "MATCH (p:Person {name: 'Ben Cho'})-[:ACTED_IN]->(m:Movie) WHERE m.release_date > 1999 RETURN m.title", k=1
    )[0] == ["m3"]
    assert sorted(
        run_ground(
            v,
            "MATCH (p:Person {name: 'Ben Cho'})-[:ACTED_IN]->(m:Movie) WHERE m.release_date <= '1999-12-31' "
            "RETURN m.title",
            k=2,
        )[0]
    ) == ["m1", "m4"]
    ans, _, cands = run_ground(v, "MATCH (p:Person {name: 'a silva'})-[:DIRECTED]->(m:Movie) RETURN m.title", k=2)
    assert sorted(ans) == ["m1", "m2"] and cands["p"].exact == 1  # alias 'A. Silva', normalised
    # a filter matching nothing is dropped, and for a constant joins its search string
    _, _, cands = run_ground(
        v, "MATCH (p:Person {name: 'Ana Silva'})-[:DIRECTED]->(m:Movie) WHERE p.birth_year = 1800 RETURN m.title", k=2
    )
    assert cands["p"].filters_unapplied == ["birth_year = 1800"] and "birth_year 1800" in cands["p"].search
    # a filter-only question grounds its target directly
    assert sorted(run_ground(v, "MATCH (m:Movie) WHERE m.description CONTAINS 'orchard' RETURN m.title", k=5)[0]) == [
        "m5",
        "m6",
    ]


def test_any_relation_never_follows_similarity_edges(mini):
    ans, _, _ = run_ground(
        mini[1], "MATCH (a:Movie {title: 'Red Orchard'})-[]-(m:Movie) RETURN m.title", k=5, directed=False
    )
    assert ans == []  # m5 ~ m6 only by a SIMILAR_DESCRIPTION edge


def test_a_capped_symbol_is_not_expanded_and_an_uninformed_target_is_no_answer(mini):
    q = "MATCH (p:Person {name: 'Ana Silva'})-[:DIRECTED]->(m:Movie) RETURN m.title"
    assert run_ground(mini[1], q, k=2, cap=1)[0] == []  # not "every Movie"
    assert run_ground(mini[1], "MATCH (p:Person)-[:DIRECTED]->(m:Movie) RETURN m.title", k=2)[0] == []


def test_target_type_reply_parsing():
    types = ["Movie", "Person", "Studio"]
    assert parse_target_type("Movie", types) == "Movie"
    assert parse_target_type("person, movie", types) == "Person"  # the first token wins
    assert parse_target_type("<think>maybe Studio</think>The answer is a movie.", types) == "Movie"
    assert parse_target_type("a film", types) is None and parse_target_type("Movie or Person", types) is None


def test_reply_parsers_for_rerankers():
    assert (
        parse_score("0.8") == 0.8
        and parse_score("Score: .25") == 0.25
        and parse_score("8/10") is None
        and parse_score("yes") is None
    )
    assert parse_order("3, 3, 99, 1", [1, 2, 3]) == ([3, 1, 2], 1, 1)
    assert parse_order("I cannot rank these", [1, 2, 3]) == (None, 0, 3)
    assert (
        parse_choice("ID 7", 7, 9) == 7 and parse_choice("7 or 9", 7, 9) is None and parse_choice("none", 7, 9) is None
    )


def test_binary_insertion_is_stable_and_sorts():
    truth = {1: 5, 2: 1, 3: 9, 4: 5, 5: 0}
    calls = []

    def better(x, y):
        calls.append((x, y))
        return truth[x] > truth[y]

    assert binary_insertion([1, 2, 3, 4, 5], better) == [3, 1, 4, 2, 5]  # 1 and 4 tie: input order kept
    assert len(calls) <= sum(int(np.ceil(np.log2(i + 1))) for i in range(1, 5))


class ScriptedLLM:
    """A stand-in LLMClient: `answer(prompt)` gives the reply text or raises."""

    def __init__(self, answer):
        self.answer, self.prompts = answer, []

    def chat(self, messages, **kw):
        prompt = messages[-1]["content"]
        self.prompts.append(prompt)
        return Reply(self.answer(prompt), 10, 2, False, key=f"k{len(self.prompts)}")


def rerank(mini, kind, answer, rows):
    llm, counters = ScriptedLLM(answer), {}
    order = Reranker(kind, llm, mini[1], Timeline(), counters).rerank("Which film is about orchards?", rows)
    return order, counters, llm


def test_pointwise_parse_failures_score_neutral(mini):
    g = mini[0]
    rows = [g.row["nm1"], g.row["nm5"], g.row["nm3"]]
    scores = {"Harbour Lights": "0.1", "Red Orchard": "0.95", "Night Train": "it depends"}
    order, c, _ = rerank(mini, "pointwise", lambda p: next(v for k, v in scores.items() if f"title: {k}" in p), rows)
    assert (
        order == [g.row["nm5"], g.row["nm3"], g.row["nm1"]]
        and c["rerank_parse_failures"] == 1
        and c["rerank_calls"] == 3
    )


def test_listwise_drops_invented_appends_missing_and_keeps_order_when_unusable(mini):
    g = mini[0]
    rows = [g.row["nm1"], g.row["nm5"], g.row["nm3"]]
    order, c, llm = rerank(mini, "listwise", lambda p: f"{rows[1]}, 999, {rows[1]}", rows)
    assert order == [rows[1], rows[0], rows[2]] and c["rerank_invented_ids"] == 1 and c["rerank_missing_ids"] == 2
    assert f"ID {rows[0]}:" in llm.prompts[0]
    order, c, _ = rerank(mini, "listwise", lambda p: "sorry", rows)
    assert order == rows and c["rerank_parse_failures"] == 1


def test_pairwise_shows_the_placed_item_first_and_ties_keep_order(mini):
    g = mini[0]
    rows = [g.row["nm1"], g.row["nm3"], g.row["nm5"]]

    def prefer_orchard(prompt):
        ids = [int(x) for x in re.findall(r"^ID (\d+):", prompt, re.MULTILINE)]
        return str(next((i for i in ids if g.title(i).endswith("Orchard")), ids[0]))

    order, c, llm = rerank(mini, "pairwise", prefer_orchard, rows)
    assert order[0] == g.row["nm5"] and order[1:] == [g.row["nm1"], g.row["nm3"]]
    first_shown = [int(re.findall(r"^ID (\d+):", p, re.MULTILINE)[0]) for p in llm.prompts]
    assert first_shown[0] == rows[0]  # the already-placed (higher-ranked) item is shown first
    order, c, _ = rerank(mini, "pairwise", lambda p: "both are fine", rows)
    assert order == rows and c["rerank_ties"] == c["rerank_calls"] > 0


def test_context_errors_thin_the_documents_then_skip(mini):
    g = mini[0]
    rows = [g.row["nm1"], g.row["np1"], g.row["nm3"]]  # Ana Silva directed m1: a relation among candidates

    def refuses_relations(prompt):
        if "relations:" in prompt:
            raise LLMRequestRefused("context length exceeded")
        return f"{rows[2]}, {rows[1]}, {rows[0]}"

    order, c, _ = rerank(mini, "listwise", refuses_relations, rows)
    assert order == rows[::-1] and c["rerank_degraded"] == 2 and c["rerank_skipped"] == 0

    def always(prompt):
        raise LLMRequestRefused("context length exceeded")

    order, c, _ = rerank(mini, "listwise", always, rows)
    assert order == rows and c["rerank_degraded"] == 3 and c["rerank_skipped"] == 1


def _llm(server, tmp_path):
    return LLMConfig(base_url=server.base_url, model="test-model", max_retries=1, cache_dir=tmp_path / "cache")


def _last_user(body):
    return body["messages"][-1]["content"]


def test_af_end_to_end_with_scripted_replies_and_diagnostics(mini, tmp_path):
    g = mini[0]

    def responder(body):
        prompt = _last_user(body)
        if "Which type are the nodes" in prompt:
            return 200, completion("Movie")
        if "Write one Cypher query" in prompt:
            return 200, completion(
                "```cypher\nMATCH (p:Person {name: 'Ana Silva'})-[:DIRECTED]->(m:Movie) RETURN m.title\n```"
            )
        return 200, completion("0.5")

    with FakeOpenAI(responder) as server:
        res = open_resources(g, _llm(server, tmp_path))
        r = get_retriever("af", res, reranker="none", alpha=0.5).search("Which films did Ana Silva direct?", 4)
    ids = [g.source_ids[i] for i in r.idx]
    assert sorted(ids[:2]) == ["m1", "m2"] and r.found_by[:2] == ["grounded", "grounded"] and len(ids) == 4
    assert all(g.types[i] == "Movie" for i in r.idx) and r.found_by[2:] == ["vss", "vss"]
    s = r.trace["steps"]
    assert (
        s["target_type"] == "Movie"
        and s["parsed"]["triplets"] == [["p", "DIRECTED", "m"]]
        and s["candidates"]["p"]["exact"] == 1
    )
    assert r.usage["calls"] == 2 and [e["name"] for e in r.trace["events"]] == ["target type", "derive cypher"]
    # the name's nodes ranked through its fp32 vector (bf16 ones move with the batch)
    assert any(k[0] == "exact" and "Ana Silva" in k[1] for k in g._memo)
    q = Question("q1", "Which films did Ana Silva direct?", ["m1", "m2"], meta={"target_type": "Movie"})
    d = stage_diagnostics(r.trace, set(q.gold_sources), q.meta)
    assert d["kept_recall"] == 1.0 and d["target_type_accuracy"] == 1.0 and d["grounded_precision"] <= 1.0


def test_a_question_that_names_no_node_is_ranked_by_its_motifs_unless_a_value_filter_narrows_it(mini, tmp_path):
    g = mini[0]
    cypher = {
        "Which films are about "
        "orchards?": "MATCH (s:Studio {name: 'Orchard'})<-[:PRODUCED_BY]-(m:Movie) RETURN m.title",
        "Which film, trains or orchards?": "MATCH (m:Movie) WHERE m.description CONTAINS 'orchards' RETURN m.title",
        "Which films are about orchard "
        "life?": "MATCH (p:Person {name: 'Ana Silva'})-[:DIRECTED]->(m:Movie) RETURN m.title",
        "Which films came out after 2005?": "MATCH (m:Movie) WHERE m.year > 2005 RETURN m.title",
    }

    def responder(body):
        prompt = _last_user(body)
        if "Which type are the nodes" in prompt:
            return 200, completion("Movie")
        return 200, completion(next(c for q, c in cypher.items() if q in prompt))

    def af(question, **kw):
        return get_retriever("af", res, reranker="none", **kw).search(question, 3)

    with FakeOpenAI(responder) as server:
        res = open_resources(g, _llm(server, tmp_path))
        named = af("Which films are about orchards?")
        hybrid = af("Which films are about orchards?", unnamed="hybrid")
        paper = af("Which films are about orchards?", unnamed="resolve")
        vague = af("Which film, trains or orchards?")  # what the model wrote says which; its CONTAINS applies
        copied = af("Which films are about orchard life?")  # a KB name the question does not hold: a copy, not a motif
        filtered = af("Which films came out after 2005?", alpha=1.0)
    ids = lambda r, n=2: {g.source_ids[i] for i in r.idx[:n]}  # noqa: E731
    assert (
        named.trace["counters"]["unnamed"] == 1
        and named.trace["counters"]["unnamed_motifs"] == 1
        and set(named.found_by) == {"motifs"}
    )
    assert named.trace["steps"]["unnamed"] == {"ranked_by": "motifs", "motifs": ["Orchard"]}
    assert ids(named) == {"m5", "m6"} and all(g.types[i] == "Movie" for i in named.idx)
    assert (
        hybrid.trace["counters"]["unnamed_motifs"] == 0
        and set(hybrid.found_by) == {"hybrid"}
        and ids(hybrid) == {"m5", "m6"}
    )
    assert paper.trace["counters"]["unnamed"] == 0 and paper.trace["steps"]["candidates"]["s"]["top"] == ["Northlight"]
    assert vague.trace["counters"]["unnamed_motifs"] == 1 and vague.trace["steps"]["unnamed"]["motifs"] == ["orchards"]
    assert ids(vague) == {"m5", "m6"}
    assert copied.trace["counters"]["unnamed"] == 1 and copied.trace["counters"]["unnamed_motifs"] == 0
    assert set(copied.found_by) == {"hybrid"} and ids(copied) == {"m5", "m6"}  # not Ana Silva's films
    assert filtered.trace["counters"]["unnamed"] == 0 and filtered.found_by[:3] == ["grounded"] * 3
    assert {g.source_ids[i] for i in filtered.idx} == {"m3", "m5", "m6"}


def test_unusable_replies_still_return_k_results_by_vector_fill(mini, tmp_path):
    with FakeOpenAI(lambda body: (200, completion("I am not sure what you mean."))) as server:
        res = open_resources(mini[0], _llm(server, tmp_path))
        r = get_retriever("af", res, reranker="listwise").search("Which orchard film, red orchard or blue orchard?", 5)
        unnamed = get_retriever("af", res, reranker="none").search("Which film is about orchards?", 5)
    c = r.trace["counters"]
    # a question that names nothing, with nothing usable written: hybrid ranks it, counted, k results
    assert unnamed.trace["counters"]["unnamed"] == 1 and unnamed.trace["counters"]["unnamed_motifs"] == 0
    assert (
        unnamed.trace["steps"]["unnamed"] == {"ranked_by": "hybrid"}
        and set(unnamed.found_by) == {"hybrid"}
        and len(unnamed.idx) == 5
    )
    assert len(r.idx) == 5 and set(r.found_by) == {"vss"}
    assert (
        c["type_invalid"] == 1
        and c["parse_no_single_return"] == 1
        and c["vss_only"] == 1
        and c["rerank_parse_failures"] == 1
    )
    assert mini[0].source_ids[r.idx[0]] in {"m5", "m6"}  # vector fill over every type still finds the orchard films


def test_af_params_are_validated_and_alpha_is_not_the_hybrid_axis():
    from sagegraph.errors import ConfigError
    from sagegraph.eval.sweep import GridBlock, expand

    with pytest.raises(ConfigError, match="reranker"):
        get_retriever("af", None, reranker="bubble")
    # a block's `alpha` (the hybrid fusion weight) is not AF's alpha (its share of k)
    (af, hybrid) = sorted(expand(GridBlock(retriever=["af", "hybrid"], k=[20], alpha=[0.5])), key=lambda c: c.retriever)
    assert af.params == {} and hybrid.params == {"alpha": 0.5}


def test_trace_is_json(mini, tmp_path):
    def responder(body):
        prompt = _last_user(body)
        return 200, completion(
            "Movie" if "Which type" in prompt else "MATCH (m:Movie) WHERE m.year >= 2015 RETURN m.title"
        )

    with FakeOpenAI(responder) as server:
        r = get_retriever("af", open_resources(mini[0], _llm(server, tmp_path)), reranker="none").search(
            "Which films came out from 2015 on?", 3
        )
    assert [mini[0].source_ids[i] for i in r.idx[:2]] in (["m5", "m6"], ["m6", "m5"])
    json.dumps(r.trace)


def test_the_oracle_recognises_every_af_prompt():
    from sagegraph.retrieve.af.retriever import DERIVE_CYPHER, TARGET_TYPE
    from sagegraph.retrieve.af.retriever import ORACLE_CYPHER_MARK as AF_CYPHER_PROMPT
    from sagegraph.retrieve.af.retriever import ORACLE_RERANK_MARK as AF_RERANK_MARK
    from sagegraph.retrieve.af.retriever import ORACLE_TYPE_MARK as AF_TYPE_PROMPT
    from sagegraph.retrieve.kb.rerank import LISTWISE, PAIRWISE, POINTWISE

    assert AF_TYPE_PROMPT in TARGET_TYPE and AF_CYPHER_PROMPT in DERIVE_CYPHER
    assert all(AF_RERANK_MARK in p for p in (LISTWISE, PAIRWISE, POINTWISE))


def test_a_reply_of_one_endless_word_is_parsed_in_one_pass():
    """A hostile endpoint's 200,000-character reply with no Cypher in it: the condition patterns
    once started a match at every character of a long word (quadratic: minutes), which held the
    question's thread past its timeout (benchmarks/hostile_replies.py found it). Now each match
    starts only at a word's start; the reply reads as no query."""
    from sagegraph.retrieve.af.parse import parse_cypher

    parsed = parse_cypher("x" * 200_000 + ".y = 'z'", {"Person"}, {"DIRECTED"})
    assert parsed.target is None and parsed.counters["no_single_return"] == 1


def test_a_theme_written_on_the_answer_name_ranks_the_named_nodes_answers_by_their_text(mini, tmp_path):
    """`semantic_text`: the model writes the question's theme as a title (`m.title CONTAINS
    'orchards'`, no film is called so) beside a named person; read as text, it no longer pins the
    answer, and the person's films rank by their sentences against it (Red Orchard first). Off (the
    paper's way) the theme is searched as a name, and as the rounds grow both constants another
    person's films come first."""
    from sagegraph.retrieve.af.ground import theme_conditions

    g, view = mini
    question = "Which films with Cara Diaz are about orchards?"
    cypher = (
        "MATCH (p:Person {name: 'Cara Diaz'})-[:DIRECTED]->(m:Movie) WHERE m.title CONTAINS 'orchards' RETURN m.title"
    )

    def responder(body):
        return 200, completion(
            "Movie" if "Which type are the nodes" in _last_user(body) else f"```cypher\n{cypher}\n```"
        )

    with FakeOpenAI(responder) as server:
        res = open_resources(g, _llm(server, tmp_path))
        on = get_retriever("af", res, reranker="none", type_mode="node_types", ground=False).search(
            question, 3
        )  # the default since af-8
        off = get_retriever(
            "af", res, reranker="none", type_mode="node_types", ground=False, semantic_text=False
        ).search(question, 3)
    assert on.trace["counters"]["text_ranked"] == 1 and on.trace["steps"]["text_words"] == ["orchards"]
    assert [g.source_ids[i] for i in on.idx[:2]] == ["m5", "m2"] and on.found_by[:2] == ["grounded", "grounded"]
    assert off.trace["counters"]["text_ranked"] == 0 and g.source_ids[off.idx[0]] != "m5"

    def themes(q):
        p = parse_cypher(q, set(g.node_types()), set(view.relation_types))
        return [(c.prop, c.value) for c in theme_conditions(view, p, True)]

    named = "MATCH (p:Person {name: 'Cara Diaz'})-[:DIRECTED]->(m:Movie) WHERE "
    # a question that names no node keeps its motifs, the theme among them (the synthetic test
    # sample's descriptive questions, where the model pinned a KB name the question does not hold)
    copied = (
        "MATCH (s:Studio {name: 'Northlight'})<-[:PRODUCED_BY]-(m:Movie) WHERE m.title CONTAINS 'orchards' "
        "RETURN m.title"
    )
    with FakeOpenAI(
        lambda body: (200, completion("Movie" if "Which type are the nodes" in _last_user(body) else copied))
    ) as server:
        res = open_resources(g, _llm(server, tmp_path / "unnamed"))
        unnamed = get_retriever("af", res, reranker="none").search("Which films are about orchards?", 3)
    assert unnamed.trace["counters"]["unnamed_motifs"] == 1 and unnamed.trace["steps"]["unnamed"]["motifs"] == [
        "orchards"
    ]
    assert unnamed.trace["counters"]["text_ranked"] == 0 and "text_words" not in unnamed.trace["steps"]
    assert {g.source_ids[i] for i in unnamed.idx[:2]} == {"m5", "m6"}
    assert themes(named + "m.title CONTAINS 'orchards' RETURN m.title") == [("title", "orchards")]
    assert themes(named + "m.title CONTAINS 'Orchard' RETURN m.title") == []  # a title holds it: a name
    assert themes(named + "m.description CONTAINS 'orchards' RETURN m.title") == []  # a description holds it: a filter
    assert themes(named + "m.description CONTAINS 'spaceships' RETURN m.title") == [("description", "spaceships")]
    assert themes("MATCH (m:Movie) WHERE m.title CONTAINS 'orchards' RETURN m.title") == []  # nothing else named
    assert (
        themes(
            "MATCH (p:Person {name: 'Cara Dias'})-[:DIRECTED]->(m:Movie) WHERE m.title CONTAINS 'orchards' "
            "RETURN m.title"
        )
        == []
    )
