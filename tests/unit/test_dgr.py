"""DGR on the hand-made film KB: each tool's output, reading actions (JSON mode, tool-call text,
native calls) and their errors, the loop's stop conditions, vote fusion, distinct samples per
agent, and whole trajectories against a loopback endpoint with scripted replies, replayed from
the cache to the same answer. No model: the replies are written here."""

import json

import numpy as np
import pytest

from sagegraph.config import LLMConfig
from sagegraph.corpus.records import Question
from sagegraph.errors import ConfigError
from sagegraph.eval.runner import EvalConfig, run_eval
from sagegraph.llm import LLMClient
from sagegraph.model import Node
from sagegraph.retrieve import get_retriever
from sagegraph.retrieve.base import param_values
from sagegraph.retrieve.dgr.agent import ActionError, TokenBudget, fuse_votes, read_text_actions, run_agent, whole_calls
from sagegraph.retrieve.dgr.params import AgentParams, ToolParams
from sagegraph.retrieve.dgr.retriever import detect_mode
from sagegraph.retrieve.dgr.tools import GraphTools, ToolError, action_schema
from sagegraph.retrieve.dgr.trajectories import export_trajectories, format_trace
from sagegraph.retrieve.flat import HybridRetriever
from sagegraph.retrieve.graph_index import GraphIndex
from sagegraph.retrieve.registry import validate_params
from sagegraph.retrieve.resources import open_resources
from sagegraph.runfiles import find_trace
from tests.fake_openai import FakeOpenAI, completion
from tests.kb_mini import HashEncoder, build_mini, generations_records, mini_records


@pytest.fixture(scope="module")
def g(tmp_path_factory):
    return build_mini(tmp_path_factory.mktemp("dgrkb") / "graph")


def paper_tools(graph, **settings):
    """DGR's tools with the paper's observations (no relaxed filters, no relation kinds) unless told."""
    return GraphTools(graph, ToolParams(**{"relax_filters": False, "relation_kinds": False, **settings}))


def row(g, sid):
    return int(g.row[f"n{sid}"])


# The paper's tools (dgr-4's defaults): what a test of one forgiving tool compares against.
PAPER = dict(
    link=False, relation_kinds=False, relax_filters=False, read_before_finish=False, fallback="last", unnamed="resolve"
)


# -- tools ------------------------------------------------------------------------------------------
def test_global_search_ranks_names_and_summaries_by_bm25(g):
    out = paper_tools(g).search_in_graph("Ana Silva", 3)
    assert out.shown[0] == row(g, "p1") and len(out.shown) <= 3
    assert out.text.splitlines()[1].startswith(f"[{row(g, 'p1')}] Person: Ana Silva | birth_year: 1960")
    assert paper_tools(g).search_in_graph("orchards", 30).shown[:2] == [row(g, "m5"), row(g, "m6")] or set(
        paper_tools(g).search_in_graph("orchards", 30).shown[:2]
    ) == {row(g, "m5"), row(g, "m6")}
    assert len(paper_tools(g, max_search_size=2).search_in_graph("film", 50).shown) == 2  # size capped
    assert "no node matches" in paper_tools(g).search_in_graph("zzzz").text
    with pytest.raises(ToolError, match="query"):
        paper_tools(g).search_in_graph("  ")


class _SynonymEncoder(HashEncoder):
    """Stands in for a sentence model: 'apple groves' means 'orchards' (no word in common)."""

    def encode(self, texts):
        return super().encode([t.replace("apple groves", "orchards") for t in texts])


def test_hybrid_search_finds_nodes_described_in_other_words_and_says_so(g):
    meaning = GraphIndex(g.dir, encoder=_SynonymEncoder())
    assert "no node matches" in paper_tools(meaning).search_in_graph("apple groves", 5).text  # BM25 shares no word
    hybrid = paper_tools(meaning, global_search="hybrid")
    out = hybrid.search_in_graph("apple groves", 2)
    assert set(out.shown) == {row(g, "m5"), row(g, "m6")}
    # the same ranking as the flat hybrid retriever (the baseline the sweeps compare with)
    assert (
        paper_tools(g, global_search="hybrid").search_in_graph("Ana Silva films", 4).shown
        == HybridRetriever.over(g).search("Ana Silva films", 4).idx.tolist()
    )
    # neighbours ranked the same way, by meaning as well as words
    cara = paper_tools(meaning, neighbour_ranking="hybrid").search_in_neighborhood(row(g, "p4"), query="apple groves")
    assert cara.shown[0] == row(g, "m5") and 'ranked by "apple groves"' in cara.text
    # the agent is told what the search does; the paper's wording stays for bm25
    schema = {t["function"]["name"]: t["function"]["description"] for t in hybrid.schemas()}
    assert schema["search_in_graph"].startswith("Search by keywords and meaning")
    assert {t["function"]["name"]: t["function"]["description"] for t in paper_tools(g).schemas()}[
        "search_in_graph"
    ].startswith("Keyword (BM25) search")


def test_the_system_prompt_describes_the_searches_it_offers(g, tmp_path):
    res = open_resources(
        g, LLMConfig(base_url="http://127.0.0.1:9/v1", model="test-model", max_retries=1, cache_dir=tmp_path / "cache")
    )
    bm25 = get_retriever("dgr", res, mode="json").system_prompt("json")
    assert (
        "search_in_graph(query, size): keyword (BM25) search over" in bm25
        and "ranked by keyword match to query" in bm25
    )
    hybrid = get_retriever("dgr", res, mode="json", global_search="hybrid", neighbour_ranking="hybrid").system_prompt(
        "json"
    )
    assert "search_in_graph(query, size): search by keywords and meaning (BM25 fused with embeddings) over" in hybrid
    assert "ranked by keyword and meaning match to query" in hybrid


def test_relation_kinds_say_which_edge_type_leads_on_from_each_neighbour(g):
    studio = row(g, "s1")
    plain = paper_tools(g).search_in_neighborhood(studio, node_type="Movie")
    kinds = paper_tools(g, relation_kinds=True).search_in_neighborhood(studio, node_type="Movie")
    assert kinds.shown == plain.shown and "its relations" not in plain.text
    # each film shown names its own relation types (read from the KB's edges, the build's similarity edges left out)
    line = next(x for x in kinds.text.splitlines() if x.startswith(f"[{row(g, 'm1')}]"))
    assert "(its relations: ACTED_IN, DIRECTED, PRODUCED_BY)" in line and "SIMILAR" not in kinds.text


def test_neighbourhood_is_typed_directed_and_ranked_not_filtered(g):
    t = paper_tools(g)
    ben = row(g, "p3")
    out = t.search_in_neighborhood(ben, query="Paper Moon")
    assert out.shown[0] == row(g, "m4") and len(out.shown) == 3  # ranked first, the others kept
    assert "-[ACTED_IN]->" in out.text and "arrows read from node" in out.text
    studio = t.search_in_neighborhood(row(g, "s1"), node_type="movie")
    assert set(studio.shown) == {row(g, "m1"), row(g, "m4")} and "<-[PRODUCED_BY]-" in studio.text
    ana = t.search_in_neighborhood(row(g, "p1"), edge_type="DIRECTED", node_type="Movie")
    assert set(ana.shown) == {row(g, "m1"), row(g, "m2")}
    # a filter that matches none says what the neighbours are, so the agent can correct it
    copied = t.search_in_neighborhood(row(g, "m1"), node_type="Movie", edge_type="DIRECTED")
    assert not copied.shown and "none match" in copied.text
    assert f"read from node {row(g, 'm1')}:" in copied.text and "1 Person <-[DIRECTED]-" in copied.text
    # similarity edges are the build's, not the KB's: Red Orchard's only KB edge is its director
    assert t.search_in_neighborhood(row(g, "m5")).shown == [row(g, "p4")]
    # the public code's substring filter drops non-matching neighbours; 'none' keeps edge order
    assert paper_tools(g, neighbour_ranking="substring").search_in_neighborhood(ben, query="Paper Moon").shown == [
        row(g, "m4")
    ]
    assert len(paper_tools(g, neighbour_ranking="none").search_in_neighborhood(ben, query="Paper Moon").shown) == 3
    assert len(paper_tools(g, neighbour_k=1).search_in_neighborhood(ben).shown) == 1
    # without type filters (the paper's 'w/o F' ablation) a filter is ignored
    assert len(paper_tools(g, type_filters=False).search_in_neighborhood(row(g, "s1"), node_type="Person").shown) == 2
    with pytest.raises(ToolError, match="node types: Movie, Person, Studio"):
        t.search_in_neighborhood(ben, node_type="Planet")
    with pytest.raises(ToolError, match="relation types"):
        t.search_in_neighborhood(ben, edge_type="LOVES")
    with pytest.raises(ToolError, match="not a node"):
        t.search_in_neighborhood(999)
    assert t.search_in_neighborhood(f"[{ben}]").shown  # "[12]" as written in results is read as 12


def test_add_to_answer_validates_ids_and_calls_check_arguments(g):
    t = paper_tools(g)
    out = t.add_to_answer(
        [{"node_index": row(g, "m1"), "reasoning": "directed by Ana Silva"}, {"node_index": 9999}, row(g, "m2")]
    )
    assert out.added == [row(g, "m1"), row(g, "m2")] and out.reasons == {row(g, "m1"): "directed by Ana Silva"}
    assert "ignored): [9999]" in out.text
    with pytest.raises(ToolError, match="non-empty list"):
        t.add_to_answer([])
    with pytest.raises(ToolError, match="unknown tool 'fly'"):
        t.call("fly", {})
    with pytest.raises(ToolError, match="unknown argument"):
        t.call("search_in_graph", {"query": "x", "limit": 3})
    assert t.call("finish", {}).finish
    with pytest.raises(ToolError, match="unknown tool"):
        paper_tools(g, neighbourhood=False).call("search_in_neighborhood", {"node_index": 1})


def test_action_schema_lists_known_tools_types_and_at_least_one_call(g):
    t = paper_tools(g)
    s = action_schema(g.node_types(), t.view.relation_types)
    calls = s["properties"]["calls"]
    assert calls["minItems"] == 1 and [c["properties"]["tool"]["const"] for c in calls["items"]["anyOf"]] == [
        "search_in_graph",
        "search_in_neighborhood",
        "add_to_answer",
        "finish",
    ]
    nb = calls["items"]["anyOf"][1]["properties"]["args"]["properties"]
    assert nb["node_type"]["enum"] == ["Movie", "Person", "Studio"] and "DIRECTED" in nb["edge_type"]["enum"]
    assert len(action_schema(g.node_types(), [], neighbourhood=False)["properties"]["calls"]["items"]["anyOf"]) == 3


# -- reading actions ---------------------------------------------------------------------------------
def test_json_actions_and_tool_call_text_are_read():
    a = read_text_actions(
        '{"calls": [{"tool": "search_in_graph", "args": {"query": "x"}}, {"tool": "finish", "args": {}}]}'
    )
    assert [(x.tool, x.args) for x in a] == [("search_in_graph", {"query": "x"}), ("finish", {})]
    # a bare call, fenced, with arguments as a JSON string
    a = read_text_actions('```json\n{"name": "search_in_neighborhood", "arguments": "{\\"node_index\\": 3}"}\n```')
    assert a[0].tool == "search_in_neighborhood" and a[0].args == {"node_index": 3}
    # Qwen-style <tool_call> blocks, one with a template's doubled braces leaking through
    text = (
        '<tool_call>\n{"name": "search_in_graph", "arguments": {"query": '
        '"a"}}\n</tool_call>\n<tool_call>\n{{"name": "finish", "arguments": {}}}\n</tool_call>'
    )
    assert [x.tool for x in read_text_actions(text)] == ["search_in_graph", "finish"]
    # arguments written beside the name; one object per line
    assert read_text_actions('{"tool": "search_in_graph", "query": "q"}')[0].args == {"query": "q"}
    assert len(read_text_actions('{"tool": "finish"}\n{"tool": "finish"}')) == 2


@pytest.mark.parametrize(
    "text, message",
    [
        ("I will search the graph now.", "no JSON object"),
        ('{"calls": []}', "lists no tool call"),
        ('{"calls": [{"args": {}}]}', 'needs a "tool"'),
        ('{"tool": "search_in_graph", "args": "{not json"}', "not valid JSON"),
        ('{"tool": "search_in_graph", "args": [1, 2]}', "must be a JSON object"),
    ],
)
def test_unreadable_actions_say_why(text, message):
    with pytest.raises(ActionError, match=message):
        read_text_actions(text)


# -- fusion -------------------------------------------------------------------------------------------
def test_votes_then_earliest_position_then_earlier_agent():
    fused = fuse_votes([[1, 2, 3], [3, 4, 1], [5, 3]])
    assert [r for r, _, _ in fused] == [3, 1, 5, 2, 4]  # 3: 3 votes; 1: 2 votes; then by position
    assert fused[0] == (3, 3, 0) and fused[1] == (1, 2, 0)
    assert [r for r, _, _ in fuse_votes([[7, 8], [8, 7]])] == [7, 8]  # tie on votes and position: agent 0 first
    assert fuse_votes([[1, 1, 2]]) == [(1, 1, 0), (2, 1, 1)]  # duplicates inside a list count once
    assert fuse_votes([[], []]) == []


# -- the loop, scripted ------------------------------------------------------------------------------
def _llm(server, tmp_path, **kw):
    return LLMConfig(base_url=server.base_url, model="test-model", max_retries=1, cache_dir=tmp_path / "cache", **kw)


def _step(body):
    return sum(1 for m in body["messages"] if m["role"] == "assistant")


def _calls(*calls):
    return completion(json.dumps({"calls": [{"tool": t, "args": a} for t, a in calls]}))


def director_script(g):
    """search Ana Silva -> her films -> add both -> finish; the question restated each turn."""
    ana = row(g, "p1")
    steps = [
        _calls(("search_in_graph", {"query": "Ana Silva"})),
        _calls(("search_in_neighborhood", {"node_index": ana, "node_type": "Movie", "edge_type": "DIRECTED"})),
        _calls(
            (
                "add_to_answer",
                {
                    "answer_nodes": [
                        {"node_index": row(g, "m2"), "reasoning": "she directed it"},
                        {"node_index": row(g, "m1"), "reasoning": "she directed it"},
                    ]
                },
            )
        ),
        _calls(("finish", {})),
    ]
    return lambda body: (200, steps[min(_step(body), len(steps) - 1)])


def test_a_scripted_trajectory_ends_on_finish_with_the_answer_order(g, tmp_path):
    with FakeOpenAI(director_script(g)) as server:
        res = open_resources(g, _llm(server, tmp_path))
        r = get_retriever("dgr", res, n_agents=1, mode="json").search("Which films did Ana Silva direct?", 5)
        bodies = server.requests
    assert [g.source_ids[i] for i in r.idx] == ["m2", "m1"] and r.found_by == ["agents", "agents"]
    a = r.trace["agents"][0]
    assert (
        a["stop"] == "finish"
        and a["steps"] == 4
        and a["tools"] == {"search_in_graph": 1, "search_in_neighborhood": 1, "add_to_answer": 1, "finish": 1}
    )
    assert a["reasons"][str(row(g, "m2"))] == "she directed it" and not a["fallback"]
    c = r.trace["counters"]
    assert (
        c["global_calls"] == 1
        and c["neighbour_calls"] == 1
        and c["stop_finish"] == 1
        and c["parse_errors"] == 0
        and c["steps"] == 4
    )
    # JSON mode: no tools field, the action schema as response format, sampled at 0.7 with a seed
    assert "tools" not in bodies[0] and bodies[0]["response_format"]["schema"]["required"] == ["calls"]
    assert bodies[0]["temperature"] == 0.7 and bodies[0]["seed"] == 1
    # observations come back as a user message with the question restated under them
    assert bodies[1]["messages"][-1]["role"] == "user" and bodies[1]["messages"][-1]["content"].endswith(
        "Question: Which films did Ana Silva direct?\nNext tool calls?"
    )
    # the history is resent, so prompt tokens are recorded per step; a span per LLM and tool call
    assert len(a["prompt_tokens"]) == 4 and {e["group"] for e in r.trace["events"]} == {"agent 0"}
    assert [e["kind"] for e in r.trace["events"]].count("tool") == 4 and r.usage["calls"] == 4
    q = Question("q", "Which films did Ana Silva direct?", ["m1", "m2"])
    from sagegraph.eval.metrics import stage_diagnostics

    d = stage_diagnostics(r.trace, set(q.gold_sources), q.meta)
    assert d["seen_recall"] == 1.0 and d["answered_recall"] == 1.0


def test_t_max_stops_and_an_agent_that_adds_nothing_answers_with_its_last_results(g, tmp_path):
    with FakeOpenAI(lambda body: (200, _calls(("search_in_graph", {"query": "orchards", "size": 2})))) as server:
        res = open_resources(g, _llm(server, tmp_path))
        r = get_retriever("dgr", res, n_agents=1, t_max=3, mode="json", stop_repeats=0, unnamed="resolve").search(
            "Which films are about orchards?", 5
        )
    a = r.trace["agents"][0]
    assert a["stop"] == "t_max" and a["steps"] == 3 and a["fallback"] and a["repeated_calls"] == 2
    assert set(g.source_ids[i] for i in r.idx) == {"m5", "m6"} and set(r.found_by) == {"fallback"}
    assert r.trace["counters"]["fallback_answers"] == 1 and r.trace["counters"]["stop_t_max"] == 1
    assert "The same call as at step 1" in a["messages"][-1]["content"]


def test_link_shows_the_named_nodes_with_their_edges_and_lets_the_agent_start_from_them(g, tmp_path):
    """`link`: the nodes the question names are under it before the first step, with what their
    neighbours are (read from this KB), and count as shown, so the agent's first call may explore
    one without searching for it; a question that names no node opens as before."""
    ana = row(g, "p1")
    bodies = []

    def reply(body):
        bodies.append(body)
        if _step(body) == 0:
            return 200, _calls(("search_in_neighborhood", {"node_index": ana, "edge_type": "DIRECTED"}))
        return 200, _calls(("finish", {}))

    with FakeOpenAI(reply) as server:
        res = open_resources(g, _llm(server, tmp_path))
        r = get_retriever("dgr", res, n_agents=1, t_max=3, mode="json", link=True).search(
            "Which films did Ana Silva direct?", 5
        )
        plain = get_retriever("dgr", res, n_agents=1, t_max=3, mode="json", **PAPER).search(
            "Which films did Ana Silva direct?", 5
        )
    opening = bodies[0]["messages"][1]["content"]
    assert opening.startswith("Question: Which films did Ana Silva direct?\n\nNodes the question names")
    assert f"[{ana}] Person: Ana Silva" in opening and "Movie -[DIRECTED]->" in opening
    a = r.trace["agents"][0]
    assert a["linked"] == 1 and r.trace["counters"]["linked_nodes"] == 1 and a["tools"]["search_in_neighborhood"] == 1
    assert set(r.idx) == {row(g, "m1"), row(g, "m2")}  # the films it was shown (fallback: it added none)
    # without link the same first call is refused: the agent has not been shown node p1
    p = plain.trace["agents"][0]
    assert p["linked"] == 0 and "has not appeared in your results" in p["messages"][3]["content"]
    assert paper_tools(g).linked("Which films are about orchards?").text == ""


def test_read_before_finish_refuses_a_finish_written_beside_a_search(g, tmp_path):
    """A small model writes its whole plan, search to finish, in one reply; with
    `read_before_finish` that finish is refused (counted, said) and the agent goes on to read the
    results and answer; without it the run ends at step 1 on its last search's results."""
    m5, m6 = row(g, "m5"), row(g, "m6")

    def reply(body):
        if _step(body) == 0:
            return 200, _calls(("search_in_graph", {"query": "orchards", "size": 2}), ("finish", {}))
        return 200, _calls(
            ("add_to_answer", {"answer_nodes": [{"node_index": m6, "reasoning": "about orchards"}]}), ("finish", {})
        )

    with FakeOpenAI(reply) as server:
        res = open_resources(g, _llm(server, tmp_path))
        r = get_retriever("dgr", res, n_agents=1, t_max=3, mode="json", read_before_finish=True).search(
            "Which films are about orchards?", 5
        )
        plain = get_retriever("dgr", res, n_agents=1, t_max=3, mode="json", **PAPER).search(
            "Which films are about orchards?", 5
        )
    a, p = r.trace["agents"][0], plain.trace["agents"][0]
    assert (
        a["early_finishes"] == 1
        and r.trace["counters"]["early_finishes"] == 1
        and "Not finished" in a["messages"][3]["content"]
    )
    assert a["steps"] == 2 and a["stop"] == "finish" and list(r.idx) == [m6] and not a["fallback"]
    assert (
        p["steps"] == 1
        and p["stop"] == "finish"
        and p["fallback"]
        and set(plain.idx) == {m5, m6}
        and p["early_finishes"] == 0
    )


def test_fallback_first_answers_with_the_first_neighbourhood_the_agent_was_shown(g, tmp_path):
    """An agent shown Ana Silva's films that explores on and never answers: `fallback: last` (the
    default) answers with its last results, `first` with the films; the same trajectory (replies)."""
    ana, m1, m2 = row(g, "p1"), row(g, "m1"), row(g, "m2")
    steps = [
        _calls(("search_in_neighborhood", {"node_index": ana, "edge_type": "DIRECTED"})),
        _calls(("search_in_graph", {"query": "orchards", "size": 2})),
        _calls(("search_in_graph", {"query": "Ben Cho", "size": 1})),
    ]
    with FakeOpenAI(lambda body: (200, steps[min(_step(body), 2)])) as server:
        res = open_resources(g, _llm(server, tmp_path))
        last = get_retriever("dgr", res, n_agents=1, t_max=3, mode="json", link=True, fallback="last").search(
            "Which films did Ana Silva direct?", 5
        )
        first = get_retriever("dgr", res, n_agents=1, t_max=3, mode="json", link=True, fallback="first").search(
            "Which films did Ana Silva direct?", 5
        )
    assert list(last.idx) == [row(g, "p3")] and set(first.idx) == {m1, m2}
    assert first.trace["agents"][0]["fallback"] and set(first.found_by) == {"fallback"}
    assert [m["content"] for m in first.trace["agents"][0]["messages"]] == [
        m["content"] for m in last.trace["agents"][0]["messages"]
    ]


def _studio_script(g):
    """The question and the agent's replies of the studio walk: Ana Silva -DIRECTED-> her films
    -PRODUCED_BY-> the studio, then a search for Ben Cho and his films; no answer added."""
    ana, ben, m1 = row(g, "p1"), row(g, "p3"), row(g, "m1")
    steps = [
        _calls(("search_in_neighborhood", {"node_index": ana, "edge_type": "DIRECTED"})),
        _calls(("search_in_neighborhood", {"node_index": m1, "edge_type": "PRODUCED_BY"})),
        _calls(("search_in_graph", {"query": "Ben Cho", "size": 1})),
        _calls(("search_in_neighborhood", {"node_index": ben, "edge_type": "ACTED_IN"})),
    ]
    return "Which studio produced the films Ana Silva directed?", steps


def _studio_walk(g, tmp_path, fallbacks: tuple[str, ...], **variants: dict):
    """The studio walk (`_studio_script`) answered by each fallback (keyed by its name) and each
    named variant's parameters. The walk's own chains only (`chain_reach: 0`): the chains beyond
    it have their own test."""
    q, steps = _studio_script(g)
    with FakeOpenAI(lambda body: (200, steps[min(_step(body), 3)])) as server:
        res = open_resources(g, _llm(server, tmp_path))
        configs = {f: {"fallback": f} for f in fallbacks} | variants
        return q, {
            name: get_retriever("dgr", res, n_agents=1, t_max=4, mode="json", chain_reach=0, **p).search(q, 5)
            for name, p in configs.items()
        }


def test_gold_rank_says_where_the_fallback_ranked_the_gold_answer_from_the_replies_alone(g, tmp_path):
    """`sagegraph dgr gold-rank`: the walk above, replayed from its replies (0 calls: the endpoint
    is gone), its whole chain ranking read for the gold answer's position."""
    from sagegraph.retrieve.dgr.gold_rank import gold_ranks

    q, steps = _studio_script(g)
    params = {"n_agents": 1, "t_max": 4, "mode": "json", "chain_reach": 0}
    with FakeOpenAI(lambda body: (200, steps[min(_step(body), 3)])) as server:
        llm = _llm(server, tmp_path)
        ranked = [int(r) for r in get_retriever("dgr", open_resources(g, llm), **params).search(q, 5).idx]
        asked = len(server.requests)
        questions = [Question(id="q", text=q, gold_sources=["s1"]), Question(id="q2", text=q, gold_sources=["m2"])]
        found = gold_ranks(g, questions, validate_params("dgr", params), llm)
        assert len(server.requests) == asked  # replayed
    assert found["positions"] == {"q": ranked.index(row(g, "s1")), "q2": ranked.index(row(g, "m2"))}
    assert found["first"] == 1 and found["questions"] == 2


def test_fallback_deepest_answers_with_the_search_that_first_reached_the_walks_farthest_nodes(g, tmp_path):
    """An agent walks Ana Silva -DIRECTED-> her films -PRODUCED_BY-> the studio, then searches for
    another name and explores it, and never answers: `deepest` answers the studio (two relations
    from the named node: the chain's end), `first` her films, `last` the other name's films (one
    relation from a searched node: no farther); the same replies, so the same trajectory."""
    m1, studio = row(g, "m1"), row(g, "s1")
    q, got = _studio_walk(g, tmp_path, ("last", "first", "deepest"))
    assert list(got["deepest"].idx) == [studio] and got["deepest"].trace["agents"][0]["deepest_reach"] == 2
    assert set(got["first"].idx) == {m1, row(g, "m2")}
    assert studio not in got["last"].idx and m1 in got["last"].idx  # Ben's films: Harbour Lights among them
    assert all(r.trace["agents"][0]["fallback"] for r in got.values())
    assert [got[f].trace["agents"][0]["fallback_from"] for f in ("last", "first", "deepest")] == [
        "last",
        "first",
        "deepest",
    ]
    assert "fallback: the search that first reached its walk's farthest nodes, 2 relation(s) out" in format_trace(
        {"qid": "q", "question": q, **got["deepest"].trace}
    )
    assert "fallback: its last search results" in format_trace({"qid": "q", "question": q, **got["last"].trace})
    assert len({json.dumps([m["content"] for m in r.trace["agents"][0]["messages"]]) for r in got.values()}) == 1


def test_fallback_chain_ranks_what_the_walk_reached_by_how_its_relation_chain_reads(g, tmp_path):
    """The walk of the test above: each node a neighbourhood search showed keeps the chain that
    first reached it, from its start (the named node, or a searched one); `chain` ranks them by
    how that chain reads against the question with the start's name taken out. The studio, at the
    end of 'produced by (Studio) of directed (Movie)', reads closest to 'which studio produced
    the films directed'; no start node is an answer; the replies are the same."""
    from sagegraph.retrieve.dgr.agent import AgentRun, _walked

    ana, ben, m1, studio = row(g, "p1"), row(g, "p3"), row(g, "m1"), row(g, "s1")
    q, runs = _studio_walk(g, tmp_path, ("chain", "deepest"))
    got, deepest = runs["chain"], runs["deepest"]
    agent = got.trace["agents"][0]
    assert agent["fallback_from"] == "chain" and got.idx[0] == studio and ana not in got.idx and ben not in got.idx
    assert set(got.idx) == {studio, m1, row(g, "m2"), row(g, "m3"), row(g, "m4")}
    assert [m["content"] for m in agent["messages"]] == [m["content"] for m in deepest.trace["agents"][0]["messages"]]
    assert "fallback: the nodes its walk reached, by how their relation chains read" in format_trace(
        {"qid": "q", "question": q, **got.trace}
    )
    # the chains themselves: one relation per hop, from where the walk started
    t, run = paper_tools(g), AgentRun(agent=0, sample=1)
    run.depth[ana] = 0
    _walked(run, "search_in_neighborhood", t.search_in_neighborhood(ana, edge_type="DIRECTED"))
    _walked(run, "search_in_neighborhood", t.search_in_neighborhood(m1, edge_type="PRODUCED_BY"))
    assert run.chains[m1] == (ana, (("DIRECTED", m1),)) and run.chains[studio] == (
        ana,
        (("DIRECTED", m1), ("PRODUCED_BY", studio)),
    )


def test_chain_reach_ranks_chains_beyond_the_walk(g, tmp_path):
    """An agent walks one relation (Ana Silva -DIRECTED-> her films) and finishes without adding:
    the walk's chains end at her films, so `chain` answers a film; with `chain_reach: 2` the
    chains of two relations from the walk's start are read too, and the studio at the end of
    'produced by (Studio) of directed (Movie)' answers. The replies are the same."""
    from sagegraph.retrieve.dgr.retriever import DGRRetriever, added_margin
    from sagegraph.retrieve.kb.metapaths import chains_from

    ana, m1, studio = row(g, "p1"), row(g, "m1"), row(g, "s1")
    steps = [_calls(("search_in_neighborhood", {"node_index": ana, "edge_type": "DIRECTED"})), _calls(("finish", {}))]
    q = "Which studio produced the films Ana Silva directed?"
    with FakeOpenAI(lambda body: (200, steps[min(_step(body), 1)])) as server:
        res = open_resources(g, _llm(server, tmp_path))
        walked = get_retriever("dgr", res, n_agents=1, t_max=3, mode="json", chain_reach=0).search(q, 5)
        reached = get_retriever("dgr", res, n_agents=1, t_max=3, mode="json", chain_reach=2).search(q, 5)
        # a chain is kept only while each relation it adds reads closer: asked for the films, the
        # chains on to their studio and their actors read farther than the films' own, so neither is read
        films = get_retriever("dgr", res, n_agents=1, t_max=3, mode="json", chain_reach=2).search(
            "Which movie was directed by Ana Silva?", 5
        )
        # `reach_margin`: a relation added must read closer by more than the margin (no cosine gains 1)
        cut = get_retriever("dgr", res, n_agents=1, t_max=3, mode="json", chain_reach=2, reach_margin=1.0).search(q, 5)
        # `margin_upto: 2`: a chain's second relation still needs the margin
        upto = get_retriever(
            "dgr", res, n_agents=1, t_max=3, mode="json", chain_reach=2, reach_margin=1.0, margin_upto=2
        ).search(q, 5)
    assert studio not in cut.idx and set(cut.idx) >= {m1, row(g, "m2")}
    assert list(upto.idx) == list(cut.idx)
    assert added_margin(2, 0.02, 2) == 0.02 and added_margin(3, 0.02, 2) == 0.0 and added_margin(3, 0.02, None) == 0.02
    assert DGRRetriever.Params().answer.margin_upto == 2  # None: the margin on every relation
    assert set(films.idx) == {m1, row(g, "m2")} and films.trace["counters"]["answers_beyond_walk"] == 0
    # an agent that walked from another node than the one the question names (Cara Diaz's films,
    # none made by the studio): with `reach_named` the chains from the named node (`link`) are read too
    cara = row(g, "p4")
    astray = [_calls(("search_in_neighborhood", {"node_index": cara, "edge_type": "ACTED_IN"})), _calls(("finish", {}))]
    with FakeOpenAI(lambda body: (200, astray[min(_step(body), 1)])) as server:
        res = open_resources(g, _llm(server, tmp_path / "astray"))
        kw = dict(n_agents=1, t_max=3, mode="json", chain_reach=2, shown_only=False)
        walked_only = get_retriever("dgr", res, reach_named=False, **kw).search(q, 5)
        named = get_retriever("dgr", res, reach_named=True, **kw).search(q, 5)
    assert named.idx[0] == studio and studio not in walked_only.idx
    assert set(walked.idx) == {m1, row(g, "m2")} and studio not in walked.idx
    assert (
        reached.idx[0] == studio and ana not in reached.idx and reached.trace["agents"][0]["fallback_from"] == "chain"
    )
    assert (
        reached.trace["counters"]["answers_beyond_walk"] == 1 and walked.trace["counters"]["answers_beyond_walk"] == 0
    )
    assert "its first on a chain beyond its walk" in format_trace({"qid": "q", "question": q, **reached.trace})
    assert [m["content"] for m in walked.trace["agents"][0]["messages"]] == [
        m["content"] for m in reached.trace["agents"][0]["messages"]
    ]
    # the chains themselves: typed, both directions, the start left out, shortest first
    view = paper_tools(g).view
    chains = [
        ([(view.relation_types[c], out, t) for c, out, t in hops], sorted(ends.tolist()))
        for hops, ends in chains_from(view, ana, 2)
    ]
    assert ([("DIRECTED", True, "Movie")], sorted([m1, row(g, "m2")])) in chains
    assert ([("DIRECTED", True, "Movie"), ("PRODUCED_BY", True, "Studio")], [studio]) in chains
    assert all(ana not in ends for _, ends in chains) and [len(h) for h, _ in chains] == sorted(
        len(h) for h, _ in chains
    )
    capped = [[view.relation_types[c] for c, _, _ in hops] for hops, _ in chains_from(view, ana, 2, max_frontier=1)]
    assert ["DIRECTED"] in capped and not any(
        h[0] == "DIRECTED" and len(h) == 2 for h in capped
    )  # two films: not walked on


def test_no_agent_answers_by_the_chain_fallback_from_the_named_nodes_without_a_model_call(g, tmp_path):
    """`n_agents: 0`: the chains from the node the question names, ranked as the fallback ranks an
    agent's, and no request reaches the endpoint; settings under which it could answer nothing are
    refused."""
    from pydantic import ValidationError

    from sagegraph.retrieve.dgr.retriever import DGRRetriever

    studio = row(g, "s1")
    q = "Which studio produced the films Ana Silva directed?"
    requests = []
    with FakeOpenAI(lambda body: (requests.append(body), (200, _calls(("finish", {}))))[1]) as server:
        res = open_resources(g, _llm(server, tmp_path))
        alone = get_retriever("dgr", res, n_agents=0, chain_reach=2).search(q, 5)
    assert requests == [] and alone.idx[0] == studio and alone.usage["calls"] == 0
    chains_only = get_retriever("dgr", open_resources(g, None), n_agents=0, chain_reach=2)
    chains_only._make_system_prompt = lambda mode: pytest.fail("no agent runs: no agents' instructions are made")
    without_model = chains_only.search(q, 5)
    assert list(without_model.idx) == list(alone.idx)
    assert not DGRRetriever.needs_llm(DGRRetriever.Params(n_agents=0)) and DGRRetriever.needs_llm(DGRRetriever.Params())
    assert alone.trace["agents"][0]["fallback_from"] == "chain" and set(alone.found_by) == {"fallback"}
    for bad in ({"chain_reach": 0}, {"reach_named": False}, {"fallback": "last"}, {"link": False}):
        with pytest.raises(ValidationError, match="n_agents 0"):
            DGRRetriever.Params(n_agents=0, **bad)


def test_the_agents_instructions_are_made_once_per_action_mode(g, monkeypatch):
    """They hold nothing of the question (the KB's schema and a worked example read from its
    edges, a scan of millions of relations on a large KB), so a retriever makes them once."""
    dgr = get_retriever("dgr", open_resources(g, None), mode="json")
    made = []
    make = dgr._make_system_prompt
    monkeypatch.setattr(dgr, "_make_system_prompt", lambda mode: made.append(mode) or make(mode))
    first = dgr.system_prompt("json")
    assert dgr.system_prompt("json") == first and dgr.system_prompt("native") != first
    assert made == ["json", "native"]


def test_one_hop_groups_a_set_of_rows_neighbours_by_relation_direction_and_type(g):
    """`hop_groups` against the grouping spelled out edge by edge."""
    from sagegraph.retrieve.kb.metapaths import hop_groups

    view = paper_tools(g).view
    indptr, other, codes, out = view._incident
    rows = np.array([row(g, "p1"), row(g, "m1"), row(g, "s1")], dtype=np.int64)
    exclude = np.array([row(g, "m2")], dtype=np.int64)
    expected: dict[tuple[int, bool, str], set[int]] = {}
    for r in rows:
        for j in range(indptr[r], indptr[r + 1]):
            if other[j] not in exclude:
                key = (int(codes[j]), bool(out[j]), str(g.types[other[j]]))
                expected.setdefault(key, set()).add(int(other[j]))
    grouped = hop_groups(view, rows, exclude=exclude)
    assert {key: ends.tolist() for key, ends in grouped.items()} == {key: sorted(v) for key, v in expected.items()}
    assert len(expected) > 2


def test_chain_order_costs_a_chain_whose_relations_read_better_in_another_order(g, tmp_path, monkeypatch):
    """With `chain_order`, a chain of two relations from the named start loses how much better the
    same relations read in the other order laid outward from the name: 'the films directed by Ana
    Silva' then 'acted in' is the question's order for Ana's actors' chain (directed, then acted
    in), so it loses nothing; asked 'who directed the films Ana Silva acted in', the same chain
    reads better reversed and loses. At 0 (dgr-10's, off): no extra, nothing more read; 0.25 is the
    default since dgr-11."""
    import sagegraph.retrieve.dgr.retriever as dgr_module
    from sagegraph.retrieve.dgr.retriever import DGRRetriever

    ana, ben = row(g, "p1"), row(g, "p3")
    steps = [_calls(("search_in_neighborhood", {"node_index": ana, "edge_type": "DIRECTED"})), _calls(("finish", {}))]
    seen: dict[tuple[str, float], dict[str, float]] = {}
    rank = dgr_module.rank_by_similarity
    with FakeOpenAI(lambda body: (200, steps[min(_step(body), 1)])) as server:
        res = open_resources(g, _llm(server, tmp_path))
        for q in ("Who acted in the films directed by Ana Silva?", "Who directed the films Ana Silva acted in?"):
            for w in (0.0, 1.0):

                def spy(entries, vectors, extra=None, key=(q, w)):
                    seen[key] = (
                        {p: min(seen.get(key, {}).get(p, 0.0), x) for (_, p, _), x in zip(entries, extra)}
                        if extra
                        else {}
                    )
                    return rank(entries, vectors, extra)

                monkeypatch.setattr(dgr_module, "rank_by_similarity", spy)
                got = get_retriever(
                    "dgr", res, n_agents=1, t_max=3, mode="json", chain_reach=2, shown_only=False, chain_order=w
                ).search(q, 5)
                assert got.trace["agents"][0]["fallback_from"] == "chain" and ben in got.idx
    actors = "acted in (Person) of directed (Movie)"  # Ana -DIRECTED-> film <-ACTED_IN- actor
    asked_in_order, asked_reversed = (
        seen[(q, 1.0)]
        for q in ("Who acted in the films directed by Ana Silva?", "Who directed the films Ana Silva acted in?")
    )
    assert asked_in_order[actors] == 0.0 and asked_reversed[actors] < 0.0
    assert asked_in_order["directed (Movie)"] == 0.0  # one relation: no other order
    assert (
        all(x <= 0.0 for x in asked_in_order.values())
        and seen[("Who acted in the films directed by Ana Silva?", 0.0)] == {}
    )
    assert DGRRetriever.Params().answer.chain_order == 0.25


def test_order_gap_compares_a_chains_order_with_the_best_order_of_its_relations():
    from sagegraph.retrieve.kb.chains import distance_bands, name_distances, order_gap

    words = name_distances("what is the nation of pearl starr 's parent ?", "Pearl Starr")
    assert words == [("what", 5), ("is", 4), ("the", 3), ("nation", 2), ("of", 1), ("'s", 1), ("parent", 2), ("?", 3)]
    bands = distance_bands(words)
    assert (
        bands[(1, 3)] == "nation of 's parent" and bands[(3, 6)] == "what is the ?" and set(bands.values()) >= {"of 's"}
    )
    assert name_distances("Which films did Ana direct?", "Cara") == [] and distance_bands([]) == {}
    # a long question: words past `farthest` count as that far, so its bands stay bounded
    long = " ".join(f"w{i}" for i in range(60)) + " X ?"
    capped = name_distances(long, "X", farthest=24)
    assert (
        max(d for _, d in capped) == 24
        and [d for _, d in capped][:37] == [24] * 37
        and len(distance_bands(capped)) == 300
    )
    assert len(distance_bands(name_distances(long, "X"))) == 60 * 61 // 2
    # fit: a relation reads 1 against a band holding its word, else 0
    fit = lambda rel, band: float(rel in bands[band].split())  # noqa: E731
    assert order_gap(["parent", "nation"], fit, 5) == 0.0  # parent nearest the name: the question's order
    assert order_gap(["nation", "parent"], fit, 5) == 0.0  # both at distance 2: no order reads better
    near = distance_bands(name_distances("nation of the parent of X", "X"))
    fit_near = lambda rel, band: float(rel in near[band].split())  # noqa: E731
    assert (
        order_gap(["parent", "nation"], fit_near, 5) == 0.0 and order_gap(["nation", "parent"], fit_near, 5) == -0.5
    )  # best cut: parent read, nation not
    assert (
        order_gap(["parent"], fit_near, 5) == 0.0 and order_gap(["parent", "nation", "x"], fit_near, 2) == 0.0
    )  # too few words for three bands


def test_chain_encoder_reads_the_walks_chains_and_joins_the_run_key(g, tmp_path, monkeypatch):
    """With `chain_encoder` (a tuned encoder's folder), `fallback: chain` reads the walk's chains
    through it instead of the graph's encoder: here one that reads every chain through a studio
    far from the question puts the studio last, where the graph's encoder puts it first. The
    trajectory is the same (replies unchanged); the encoder's training record joins the run key."""
    from sagegraph.retrieve.dgr.retriever import DGRParams, DGRRetriever
    from sagegraph.retrieve.kb.chain_encoder import SelectorEncoder

    enc = tmp_path / "enc"
    enc.mkdir()
    (enc / "modules.json").write_text("[]")
    (enc / "selector_training.json").write_text('{"seconds": 1}')
    read: list[str] = []

    def vectors(self, texts):
        read.extend(texts)
        return np.array([[0.0, 1.0] if "Studio" in t else [1.0, 0.0] for t in texts])

    monkeypatch.setattr(SelectorEncoder, "vectors", vectors)
    studio = row(g, "s1")
    q, runs = _studio_walk(g, tmp_path, ("chain",), tuned={"chain_encoder": str(enc)})
    tuned = runs["tuned"]
    assert runs["chain"].idx[0] == studio and tuned.idx[-1] == studio and set(tuned.idx) == set(runs["chain"].idx)
    assert "produced by (Studio) of directed (Movie)" in read and "Which studio produced the films   directed?" in read
    assert [m["content"] for m in tuned.trace["agents"][0]["messages"]] == [
        m["content"] for m in runs["chain"].trace["agents"][0]["messages"]
    ]
    key = DGRRetriever.prompt_for(DGRParams(chain_encoder=str(enc)))
    assert (
        key.startswith(DGRRetriever.prompt_version + "+encoder-")
        and DGRRetriever.prompt_for(DGRParams()) == DGRRetriever.prompt_version
    )
    (enc / "selector_training.json").write_text('{"seconds": 2}')  # retrained in place: another run key
    assert DGRRetriever.prompt_for(DGRParams(chain_encoder=str(enc))) != key
    with pytest.raises(Exception, match="not a sentence-transformers directory"):
        get_retriever("dgr", g, chain_encoder=str(tmp_path))


def test_unnamed_question_an_agent_that_adds_nothing_answers_by_the_motifs_its_searches_asked_for(g, tmp_path):
    """A question that names no node: the agent's keyword hit (the two films) is no start for their kind,
    and the walk from it reaches its director, which `fallback: chain` answers. With `unnamed:
    motifs` the agent that added nothing answers with the nodes ranked by what its global searches
    asked for (both orchard films first), counted and in the trace; the replies are the same. A
    question that names a node keeps the fallback, and so does `unnamed: resolve` (the paper's)."""
    m5 = row(g, "m5")
    steps = [
        _calls(("search_in_graph", {"query": "orchards", "size": 2})),
        _calls(("search_in_neighborhood", {"node_index": m5, "node_type": "Person"})),
    ]
    q = "Which films are about orchards?"
    with FakeOpenAI(lambda body: (200, steps[min(_step(body), 1)])) as server:
        res = open_resources(g, _llm(server, tmp_path))
        kw = dict(n_agents=1, t_max=3, mode="json")
        paper = get_retriever("dgr", res, unnamed="resolve", **kw).search(q, 5)
        motifs = get_retriever("dgr", res, **kw).search(q, 5)  # the default since dgr-7
        hybrid = get_retriever("dgr", res, unnamed="hybrid", **kw).search(q, 5)
        named = get_retriever("dgr", res, unnamed="motifs", **kw).search(
            "Which films about orchards did Cara Diaz direct?", 5
        )
    assert (
        paper.trace["agents"][0]["searches"] == ["orchards"]
        and paper.trace["counters"]["unnamed"] == 0
        and "unnamed" not in paper.trace
    )
    assert g.source_ids[paper.idx[0]] == "p4" and paper.trace["agents"][0]["fallback_from"] == "chain"
    assert {g.source_ids[i] for i in motifs.idx[:2]} == {"m5", "m6"} and set(motifs.found_by) == {"fallback"}
    assert motifs.trace["counters"]["unnamed"] == 1 and motifs.trace["counters"]["unnamed_motifs"] == 1
    assert motifs.trace["unnamed"] == {"ranked_by": "motifs", "motifs": ["orchards"]}  # the search's words
    assert {g.source_ids[i] for i in hybrid.idx[:2]} == {"m5", "m6"} and hybrid.trace["unnamed"] == {
        "ranked_by": "hybrid"
    }
    assert hybrid.trace["counters"]["unnamed_motifs"] == 0
    assert [m["content"] for m in motifs.trace["agents"][0]["messages"]] == [
        m["content"] for m in paper.trace["agents"][0]["messages"]
    ]
    assert (
        named.trace["counters"]["unnamed"] == 0
        and named.trace["agents"][0]["fallback"]
        and "unnamed" not in named.trace
    )
    # a lower-case one-word name is a name
    with FakeOpenAI(
        lambda body: (200, _calls(("search_in_graph", {"query": "northlight's films", "size": 2})))
    ) as server:
        res = open_resources(g, _llm(server, tmp_path / "lower"))
        lower = get_retriever("dgr", res, unnamed="motifs", **kw).search("which films did northlight produce?", 5)
    assert (
        lower.trace["counters"]["unnamed"] == 0 and lower.trace["agents"][0]["searches"] == ["northlight's films"] * 3
    )
    # a name of more words than any fixed window is linked whole
    nodes, edges = mini_records()
    long_name = "william cavendish bentinck 7th duke of portland"
    nodes.append(
        Node("nlong", "entity", "Person", f"name: {long_name}", "long", long_name, 0, {"fields": {"name": long_name}})
    )
    g_long = build_mini(tmp_path / "long" / "graph", (nodes, edges))
    q_long = f"what is the gender of {long_name} 's kid ?"
    with FakeOpenAI(
        lambda body: (200, _calls(("search_in_graph", {"query": f"{long_name} 's kid", "size": 2})))
    ) as server:
        res = open_resources(g_long, _llm(server, tmp_path / "long"))
        long = get_retriever("dgr", res, unnamed="motifs", **kw).search(q_long, 5)
    assert long.trace["counters"]["unnamed"] == 0 and long.trace["counters"]["linked_nodes"] == 1


def test_rank_by_similarity_orders_by_best_cosine_and_keeps_first_appearance_on_ties():
    from sagegraph.retrieve.dgr.retriever import rank_by_similarity

    vec = {"q": [1.0, 0.0], "a": [0.6, 0.8], "b": [1.0, 0.0], "c": [0.6, 0.8], "d": [0.0, 1.0]}
    seen: list[list[str]] = []

    def vectors(texts):
        seen.append(texts)
        return np.array([vec[t] for t in texts])

    entries = [(7, "a", "q"), (8, "b", "q"), (9, "c", "q"), (9, "d", "q"), (10, "d", "q"), (10, "b", "q")]
    assert rank_by_similarity(entries, vectors) == [8, 10, 7, 9]  # a row scores by its best chain
    assert seen == [["a", "q", "b", "c", "d"]]  # each text encoded once
    assert rank_by_similarity([], vectors) == []
    # `extra` per entry (DGR's `chain_order`): 7 and 9 tie at 0.6; 9's first entry gains 0.1, so 9 first of the two
    assert rank_by_similarity(entries, vectors, extra=[0.0, 0.0, 0.1, 0.0, 0.0, 0.0]) == [8, 10, 9, 7]


def test_whole_calls_are_read_from_a_reply_cut_off_at_the_token_limit():
    assert whole_calls(
        '{"calls": [{"tool": "a", "args": {}}, {"tool": "b", "args": {"q": "x"}}, {"tool": "c", "ar'
    ) == [{"tool": "a", "args": {}}, {"tool": "b", "args": {"q": "x"}}]
    assert whole_calls('{"calls": [{"tool": "a", "ar') == [] and whole_calls("nothing") == [] and whole_calls("") == []


def test_salvage_cut_runs_the_whole_calls_of_a_cut_reply_and_keeps_the_loop_out_of_the_history(g, tmp_path):
    """The local model's failure on the synthetic test sample (session 25): under the grammar it
    repeated one search and one answer until max_tokens; the cut reply read as no JSON, went back
    whole into the history, and every later step copied the loop."""
    ana = row(g, "p1")
    pair = [
        {"tool": "search_in_graph", "args": {"query": "Ana Silva"}},
        {"tool": "search_in_neighborhood", "args": {"node_index": ana, "edge_type": "DIRECTED"}},
    ]
    looped = json.dumps({"calls": pair * 6})[:-40]  # cut inside the twelfth call
    cut = completion(looped, completion_tokens=768)
    cut["choices"][0]["finish_reason"] = "length"

    def reply(body):
        return 200, (cut if _step(body) == 0 else _calls(("finish", {})))

    for salvage in (False, True):
        with FakeOpenAI(reply) as server:
            res = open_resources(g, _llm(server, tmp_path / str(salvage)))
            r = get_retriever(
                "dgr", res, n_agents=1, mode="json", t_max=3, max_calls_per_step=3, salvage_cut=salvage, stop_repeats=0
            ).search("Which films did Ana Silva direct?", 5)
            second = server.requests[1]["messages"]
        a = r.trace["agents"][0]
        if not salvage:  # unreadable: counted, the cut text sent back whole
            assert a["parse_errors"] == 1 and a["cut_salvaged"] == 0 and second[-2]["content"] == looped
            assert r.trace["counters"]["cut_replies_salvaged"] == 0
            continue
        # the first three whole calls ran (max_calls_per_step); the history holds them, not the loop
        assert a["parse_errors"] == 0 and a["cut_salvaged"] == 1 and r.trace["counters"]["cut_replies_salvaged"] == 1
        assert json.loads(second[-2]["content"]) == {"calls": pair + pair[:1]}
        assert "cut off at the token limit; its first 3 whole calls ran" in second[-1]["content"]
        assert a["tools"]["search_in_neighborhood"] == 1 and a["tools"]["search_in_graph"] == 2
        assert f"[{row(g, 'm1')}] Movie: Harbour Lights" in second[-1]["content"]  # her films, shown


def test_unreadable_replies_and_bad_calls_go_back_to_the_agent_counted(g, tmp_path):
    replies = [
        completion("Let me think about this."),
        _calls(("search_in_neighborhood", {"node_index": 999})),
        _calls(("fly", {})),
        _calls(("finish", {})),
    ]
    with FakeOpenAI(lambda body: (200, replies[min(_step(body), 3)])) as server:
        res = open_resources(g, _llm(server, tmp_path))
        r = get_retriever("dgr", res, n_agents=1, mode="json", chain_reach=0).search(
            "Which films did Ana Silva direct?", 5
        )
    a = r.trace["agents"][0]
    msgs = a["messages"]
    assert a["parse_errors"] == 1 and "could not be read as tool calls: no JSON object" in msgs[3]["content"]
    assert (
        a["tool_errors"] == 2
        and "Error: node_index 999 is not a node" in msgs[5]["content"]
        and "unknown tool 'fly'" in msgs[7]["content"]
    )
    assert (
        a["stop"] == "finish" and r.trace["counters"]["invalid_calls"] == 2 and len(r.idx) == 0
    )  # nothing seen, nothing to fall back on


def test_native_function_calling_answers_by_call_id(g, tmp_path):
    ana = row(g, "p1")
    steps = [
        completion("", tool_calls=[{"id": "c1", "name": "search_in_graph", "arguments": '{"query": "Ana Silva"}'}]),
        completion(
            "",
            tool_calls=[
                {
                    "id": "c2",
                    "name": "add_to_answer",
                    "arguments": json.dumps({"answer_nodes": [{"node_index": ana, "reasoning": "named"}]}),
                },
                {"id": "c3", "name": "finish", "arguments": "{}"},
            ],
        ),
    ]
    with FakeOpenAI(lambda body: (200, steps[min(_step(body), 1)])) as server:
        res = open_resources(g, _llm(server, tmp_path))
        r = get_retriever("dgr", res, n_agents=1, mode="native").search("Who is Ana Silva?", 5)
        bodies = server.requests
    assert (
        bodies[0]["tool_choice"] == "required"
        and [t["function"]["name"] for t in bodies[0]["tools"]]
        == ["search_in_graph", "search_in_neighborhood", "add_to_answer", "finish"]
        and "response_format" not in bodies[0]
    )
    msgs = r.trace["agents"][0]["messages"]
    assert msgs[2]["tool_calls"][0]["id"] == "c1" and msgs[3] == {
        "role": "tool",
        "tool_call_id": "c1",
        "content": msgs[3]["content"],
    }
    assert [m.get("tool_call_id") for m in msgs[5:]] == ["c2", "c3"] and list(r.idx) == [ana]
    assert r.trace["tool_schemas"][0]["function"]["name"] == "search_in_graph"


def test_auto_mode_probes_once_for_structured_tool_calls(g, tmp_path):
    with FakeOpenAI(
        lambda body: (200, completion("", tool_calls=[{"name": "ping", "arguments": '{"x": 1}'}]))
    ) as server:
        llm = LLMClient(_llm(server, tmp_path), tmp_path / "a.sqlite")
        assert detect_mode(llm) == "native" and detect_mode(llm) == "native" and len(server.requests) == 1
    with FakeOpenAI(
        lambda body: (200, completion('<tool_call>{"name": "ping", "arguments": {"x": 1}}</tool_call>'))
    ) as server:
        assert detect_mode(LLMClient(_llm(server, tmp_path), tmp_path / "b.sqlite")) == "json"
    with FakeOpenAI(lambda body: (400, {"error": {"message": "tools are not supported"}})) as server:
        assert detect_mode(LLMClient(_llm(server, tmp_path), tmp_path / "c.sqlite")) == "json"
    # a replay of a run whose live probe was refused (never recorded): the JSON mode, no request sent
    with FakeOpenAI(lambda body: (500, {})) as server:
        assert detect_mode(LLMClient(_llm(server, tmp_path, cache_mode="replay"), tmp_path / "d.sqlite")) == "json"
        assert server.requests == []


def test_token_budget_and_a_refused_history_stop_agents_cleanly(g, tmp_path):
    with FakeOpenAI(director_script(g)) as server:
        res = open_resources(
            g, _llm(server, tmp_path, concurrency=1)
        )  # agents in turn: the second finds the budget spent
        r = get_retriever("dgr", res, n_agents=2, mode="json", token_budget=120).search(
            "Which films did Ana Silva direct?", 5
        )
    c = r.trace["counters"]
    assert (
        c["stop_budget"] == 2 and c["steps"] == 1 and r.trace["budget_spent"] == 150
    )  # one step of 100 + 50, then no more
    with FakeOpenAI(lambda body: (400, {"error": {"message": "maximum context length exceeded"}})) as server:
        res = open_resources(g, _llm(server, tmp_path / "x"))
        r = get_retriever("dgr", res, n_agents=1, mode="json", chain_reach=0).search(
            "Which films did Ana Silva direct?", 5
        )
    assert r.trace["counters"]["stop_refused"] == 1 and len(r.idx) == 0


def test_a_refused_step_is_exported_with_the_run_so_its_replay_elsewhere_stops_there_too(g, tmp_path):
    """The endpoint refuses an agent's second request (its history outgrew the context): the
    refusal is recorded in the reply cache like a reply, so the run's exported replies must carry
    it, or a replay on another machine misses there and the whole row fails (seen: the synthetic
    sweep's DGR rows on a clean clone, session 35)."""
    from sagegraph.eval.replies import export_replies, import_replies

    ana = row(g, "p1")
    first = _calls(("search_in_neighborhood", {"node_index": ana, "edge_type": "DIRECTED"}))
    qs = [Question("q1", "Which films did Ana Silva direct?", ["m1", "m2"])]
    with FakeOpenAI(
        lambda body: (
            (200, first) if _step(body) == 0 else (400, {"error": {"message": "maximum context length exceeded"}})
        )
    ) as server:
        res = open_resources(g, _llm(server, tmp_path))
        ret = get_retriever("dgr", res, n_agents=1, mode="json")
        live = run_eval(g, qs, EvalConfig(retriever="dgr", k=5), lambda q: ret.search(q.text, 5), tmp_path / "live")
        res.close()
        assert live["count_stop_refused"] == 1 and live["hit@1"] == 1.0  # the films by the fallback, after the refusal
        assert (
            export_replies(tmp_path / "live", tmp_path / "replies.jsonl.gz", cache=tmp_path / "cache" / "llm.sqlite")
            == 2
        )  # the reply and the refusal
        assert import_replies(tmp_path / "replies.jsonl.gz", tmp_path / "elsewhere" / "llm.sqlite") == (2, 0)
        sent = len(server.requests)
        res = open_resources(
            g,
            _llm(server, tmp_path / "elsewhere-", cache_mode="replay").model_copy(
                update={"cache_dir": tmp_path / "elsewhere"}
            ),
        )
        ret = get_retriever("dgr", res, n_agents=1, mode="json")
        again = run_eval(g, qs, EvalConfig(retriever="dgr", k=5), lambda q: ret.search(q.text, 5), tmp_path / "replay")
        res.close()
    assert len(server.requests) == sent and again["errors"] == 0 and again["count_stop_refused"] == 1
    assert {k: v for k, v in again.items() if k.startswith(("hit", "recall", "mrr"))} == {
        k: v for k, v in live.items() if k.startswith(("hit", "recall", "mrr"))
    }


def test_n_agents_are_distinct_samples_fused_by_votes_and_replay_exactly(g, tmp_path):
    m1, m2, m3 = row(g, "m1"), row(g, "m2"), row(g, "m3")
    answers = {1: [m1, m2], 2: [m2, m3], 3: [m3, m2]}  # per sample: m2 gets 3 votes, m3 2, m1 1

    def responder(body):
        if _step(body) == 0:
            nodes = [{"node_index": r, "reasoning": "r"} for r in answers[body["seed"]]]
            return 200, _calls(("add_to_answer", {"answer_nodes": nodes}), ("finish", {}))
        raise AssertionError("finished agents make no further calls")

    q = "Which films are there?"
    kw = {"mode": "json", "shown_only": False}  # these scripted agents answer without searching first
    with FakeOpenAI(responder) as server:
        res = open_resources(g, _llm(server, tmp_path, concurrency=3))
        r = get_retriever("dgr", res, n_agents=3, **kw).search(q, 5)
        assert len(server.requests) == 3 and sorted(b["seed"] for b in server.requests) == [1, 2, 3]
        url = server.base_url
    keys = [e["key"] for e in r.trace["events"] if e["kind"] == "llm"]
    assert r.usage["calls"] == 3 and r.usage["cached"] == 0  # the agents' threads count into the question's usage
    assert len(set(keys)) == 3  # same messages, three cache entries: the sample index is in the key
    assert list(r.idx) == [m2, m3, m1] and list(r.scores) == sorted(r.scores, reverse=True)
    assert {e["group"] for e in r.trace["events"]} == {"agent 0", "agent 1", "agent 2"}
    # replay: the same trajectories and answer from the cache, the endpoint gone
    res = open_resources(
        g, LLMConfig(base_url=url, model="test-model", cache_dir=tmp_path / "cache", cache_mode="replay")
    )
    again = get_retriever("dgr", res, n_agents=3, **kw).search(q, 5)
    assert list(again.idx) == list(r.idx) and again.usage["cached"] == 3
    # n = 1 is the first of these agents: its reply is already paid for
    one = get_retriever("dgr", res, n_agents=1, **kw).search(q, 5)
    assert list(one.idx) == [m1, m2]


def test_an_agent_that_loops_is_stopped_and_unseen_indices_are_refused(g, tmp_path):
    """The local 1.5B model's failure seen in the sweep: in one reply it searches and explores an
    index it has not been shown, then resends that reply; both are caught and counted."""
    m5 = row(g, "m5")
    reply = _calls(
        ("search_in_graph", {"query": "orchards", "size": 2}),
        ("search_in_neighborhood", {"node_index": m5}),
        (
            "add_to_answer",
            {
                "answer_nodes": [
                    {"node_index": m5, "reasoning": "guess"},
                    {"node_index": row(g, "m6"), "reasoning": "seen"},
                ]
            },
        ),
    )
    with FakeOpenAI(lambda body: (200, reply)) as server:
        res = open_resources(g, _llm(server, tmp_path))
        r = get_retriever("dgr", res, n_agents=1, t_max=10, mode="json").search("Which films are about orchards?", 5)
    a = r.trace["agents"][0]
    first = a["messages"][3]["content"]
    # the search shows m5 and m6, so within the same reply m5 may now be explored and both added
    assert "Neighbours of" in first and "Added 2 node(s)" in first
    assert a["stop"] == "repeats" and a["steps"] == 3 and r.trace["counters"]["stop_repeats"] == 1
    assert a["repeated_calls"] == 4 and not a["fallback"]
    reply2 = _calls(
        ("search_in_neighborhood", {"node_index": m5}),
        ("add_to_answer", {"answer_nodes": [{"node_index": row(g, "p1"), "reasoning": "guess"}]}),
        ("finish", {}),
    )
    with FakeOpenAI(lambda body: (200, reply2)) as server:
        res = open_resources(g, _llm(server, tmp_path / "b"))
        r = get_retriever("dgr", res, n_agents=1, mode="json", **PAPER).search("Which films are about orchards?", 5)
    a = r.trace["agents"][0]
    obs = a["messages"][3]["content"]
    assert (
        f"node_index {m5} has not appeared in your results yet" in obs
        and "Not in any result you were shown (ignored)" in obs
    )
    assert a["tool_errors"] == 1 and a["answer"] == [] and a["stop"] == "finish"


def test_run_agent_alone_and_the_budget_counter(g, tmp_path):
    b = TokenBudget(10)
    b.spend(4)
    assert not b.exhausted
    b.spend(6)
    assert b.exhausted and TokenBudget(None).exhausted is False
    with FakeOpenAI(director_script(g)) as server:
        llm = LLMClient(_llm(server, tmp_path), tmp_path / "r.sqlite")
        run = run_agent(
            llm,
            paper_tools(g),
            "system",
            "Which films did Ana Silva direct?",
            mode="json",
            settings=AgentParams(t_max=2),
        )
    assert run.stop == "t_max" and run.steps == 2 and run.fallback and run.answer == run.last_results


def test_params_are_validated():
    with pytest.raises(ConfigError, match="t_max"):
        validate_params("dgr", {"t_max": 0})
    with pytest.raises(ConfigError, match="its parameters: t_max, n_agents"):
        validate_params("dgr", {"agents": 3})
    defaults = param_values(validate_params("dgr", {}))
    assert defaults["n_agents"] == 3
    # the defaults are the forgiving tools, `fallback: chain` and `unnamed: motifs`; the paper's are one
    # parameter set away
    assert {k: v for k, v in defaults.items() if k in PAPER} == {
        **{k: True for k in PAPER},
        "fallback": "chain",
        "unnamed": "motifs",
    }
    assert defaults["chain_reach"] == 3 and defaults["reach_named"] and defaults["reach_margin"] == 0.02
    assert param_values(validate_params("dgr", PAPER), exclude_defaults=True) == PAPER
    # a group given whole is the same setting as its parameters given by name
    assert validate_params("dgr", {"agent": {"t_max": 4}, "chain_reach": 2}) == validate_params(
        "dgr", {"t_max": 4, "chain_reach": 2}
    )


def test_run_directory_trace_printout_and_sft_export(g, tmp_path, capsys):
    qs = [Question("q1", "Which films did Ana Silva direct?", ["m1", "m2"])]
    with FakeOpenAI(director_script(g)) as server:
        res = open_resources(g, _llm(server, tmp_path))
        ret = get_retriever("dgr", res, n_agents=1, mode="json")
        run_eval(g, qs, EvalConfig(retriever="dgr", k=5), lambda q: ret.search(q.text, 5), tmp_path / "run")
    text = format_trace(find_trace(tmp_path / "run", "q1"))
    assert "agent 0 (sample 1): 4 steps, stopped by finish" in text
    assert 'search_in_graph({"query": "Ana Silva"})' in text and "she directed it" in text
    with pytest.raises(Exception, match="no trace for question 'q9'"):
        find_trace(tmp_path / "run", "q9")
    out = export_trajectories(tmp_path / "run", tmp_path / "sft.jsonl")
    assert out == {"trajectories": 1, "runs": 1}
    rec = json.loads((tmp_path / "sft.jsonl").read_text())
    assert (
        rec["messages"][0]["role"] == "system"
        and rec["messages"][-1]["role"] == "assistant"
        and rec["meta"]["stop"] == "finish"
    )
    assert "m1" not in json.dumps(rec) and "gold" not in json.dumps(rec)  # no labels ride along
    from sagegraph.cli import main

    assert main(["trace", str(tmp_path / "run"), "q1", "--lines", "2"]) == 0
    assert "stopped by finish" in capsys.readouterr().out
    assert (
        main(["dgr", "export-trajectories", str(tmp_path / "run"), str(tmp_path / "b.jsonl"), "--only-finished"]) == 0
    )
    assert '"trajectories": 1' in capsys.readouterr().out


def test_of_two_chains_that_read_alike_the_one_walked_the_stored_way_ranks_first(tmp_path):
    """From the middle generation, `child_of` walked its stored way (to the parent) and walked
    back (to the child) read as one phrase: the chain fallback ranks the stored way's end first."""
    family = build_mini(tmp_path / "graph", generations_records())
    ranked = get_retriever("dgr", open_resources(family, None), n_agents=0).search("Who is Siri Lund a child of?", 5)
    assert ranked.idx.tolist()[:2] == [int(family.row["ng0"]), int(family.row["ng2"])]
