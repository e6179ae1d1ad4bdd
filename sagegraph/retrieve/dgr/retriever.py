"""DGR, the Dynamic Graph Retriever (dgr.txt §3, App. A.2-A.3): n tool-using LLM agents explore the
KB with global BM25 search and typed one-hop neighbourhood search, each adds the nodes it judges
answers, and the n answer lists are fused by votes (ties: earliest position).

What we follow and where we depart (LLM-RETRIEVERS.md §3):
- the paper's settings by default: n = 3 agents, T_max = 20 steps, 20 neighbours shown, global
  search size 5 unless the agent asks (at most 30), neighbourhood *ranked* by BM25 (the code's
  substring filter is `neighbour_ranking: substring`);
- tools that forgive a small model, on by default (the paper's tools: `link`, `relation_kinds`,
  `relax_filters`, `read_before_finish` false, `fallback: last`, `unnamed: resolve`): the nodes the
  question names shown under it, each neighbour's relation types, a filter that matches nothing
  dropped, no finish before a search's results are read;
- agents sample at temperature 0.7 (the paper's trajectory sampling), each with its own sample
  index, so n agents are n draws and a rerun replays them from the reply cache;
- function calling where the endpoint has it, the JSON-action mode where it does not (`mode:
  auto` probes once per endpoint);
- our own system prompt, shorter than the paper's, with the same strategy (broad search for
  descriptive questions, disambiguate then expand for named entities);
- an agent that adds nothing answers with the nodes its walk reached, ranked by how the relation
  chain that reached each reads against the question (`fallback: chain`; the code returns
  nothing), with the KB's chains of up to three relations from its starts and the question's
  named nodes (`chain_reach`, `reach_named`), counted; a per-query token budget and a refused
  (too long) history stop agents cleanly, counted;
- for a question that names no node (`unnamed: motifs`), an agent that adds nothing answers
  instead with the nodes ranked by the words its global searches asked for, each weighted by its
  rarity in the KB, as AF and GraphRAFT rank such a question by their motifs (`kb/unnamed.py`):
  its walk started from a keyword hit, so the chains from there say nothing of the answer
  (`unnamed: resolve` is the paper's: the fallback as for any question).
The answer is what the agents chose, fused and cut at k: no fill from another retriever.
"""

from __future__ import annotations

import contextvars
import functools
import threading
import weakref
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np

from sagegraph.errors import ReplayMiss
from sagegraph.llm import LLMClient, LLMRequestRefused, usage_scope
from sagegraph.retrieve.base import Resources, Retrieval, Retriever
from sagegraph.retrieve.dgr.agent import (
    AgentRun,
    Mode,
    TokenBudget,
    fuse_votes,
    run_agent,
)
from sagegraph.retrieve.dgr.params import DGRParams
from sagegraph.retrieve.dgr.tools import (
    ANSWER,
    FINISH,
    GLOBAL,
    GLOBAL_KIND,
    NEIGHBOUR_MATCH,
    NEIGHBOURS,
    GraphTools,
    ToolOutput,
)
from sagegraph.retrieve.flat import HybridRetriever
from sagegraph.retrieve.kb.chain_encoder import adapted_inputs, keyed_prompt, tuned_encoder
from sagegraph.retrieve.kb.chains import (
    chain_phrase,
    distance_bands,
    masked_question,
    name_distances,
    order_gap,
)
from sagegraph.retrieve.kb.metapaths import WalkBudget, chains_from
from sagegraph.retrieve.kb.unnamed import (
    names_a_node,
    prepare_unnamed,
    rank_unnamed,
    word_motifs,
)
from sagegraph.retrieve.kb.view import KBView
from sagegraph.retrieve.registry import register
from sagegraph.retrieve.timeline import Timeline

PROMPT_VERSION = "dgr-14"
# `chain_order`: words farther from a start's name count as this far (at most 300 bands a start)
ORDER_WORDS = 24

SYSTEM = """You explore a knowledge graph to find the nodes that answer a question.

Node types: {types}
Relations (head -[TYPE]-> tail): {patterns}

Tools:
- search_in_graph(query, size): {global_kind} over every node's name and summary; size defaults to {size}, at most {max_size}.
{neighbour_tool}- add_to_answer(answer_nodes): add answer nodes, best first: [{{"node_index": 12, "reasoning": "why it answers"}}].
- finish(comment): stop when the answer is complete or nothing useful is left to explore.
Nodes are shown as [index] Type: Name | summary. Use the index in brackets to refer to a node.

How to search:
- If the question names no entity, search_in_graph with its key words and size {max_size}, then add the
  results that fit (often about half of them).
{entities}- Several conditions: explore from each named entity and prefer nodes that satisfy all of them.
- Add answers as soon as you find them, best first, and call finish when done.
- Use only node indices from results you have already received: a call that needs a search's
  result goes in your next reply, after you have read it.{example}{json_rule}"""  # noqa: E501 - a prompt: its text is the recorded replies' key

ENTITIES_SEARCHED = """- If it names entities, first find each with search_in_graph(name), then
  explore around the right one with search_in_neighborhood, filtered by node_type or edge_type and
  ranked by the question's other key words, and add the neighbours that satisfy every condition.
"""
# With `link` the named nodes are already shown: the agent is told to walk from them one relation
# at a time, reading each relation off the node it reached (what the small model never did alone).
ENTITIES_LINKED = """- If it names entities, they are listed under the question with the relations of their neighbours:
  explore from them with search_in_neighborhood, edge_type the relation the question asks about;
  from the node that shows, explore along the question's next relation, until you reach what is asked.
  Use search_in_graph only for a name that is not listed.
"""

# The worked example is read from the graph being queried (its most frequent relationship pattern
# and one stored instance): a small model copies a prompt's example names and types, so an example
# written for one KB misleads it on every other.
EXAMPLE = """

Example from this graph. To find the {tail_type} nodes that {head_name} is linked to by {relation}:
1. search_in_graph(query="{head_name}") shows [{head}] {head_type}: {head_name}
2. search_in_neighborhood(node_index={head}, node_type="{tail_type}", edge_type="{relation}") lists [{tail}] {tail_type}: {tail_name}  -[{relation}]->
3. add_to_answer(answer_nodes=[{{"node_index": {tail}, "reasoning": "{head_name} -[{relation}]-> {tail_name}"}}]), then finish()"""  # noqa: E501 - a prompt: its text is the recorded replies' key

NEIGHBOUR_TOOL = (
    "- search_in_neighborhood(node_index, query, node_type, edge_type): the node's direct neighbours with each "
    "edge's relation and "
    "direction, ranked by {match} to query; only node_index is required; {k} shown.\n"
)

JSON_RULE = """

Reply with one JSON object and nothing else, listing the tool calls to make now, e.g.
{{"calls": [{{"tool": "search_in_graph", "args": {{"query": "{name}", "size": 5}}}}]}}"""


_PROBE_TOOL = [
    {
        "type": "function",
        "function": {
            "name": "ping",
            "description": "Answer the ping.",
            "parameters": {"type": "object", "properties": {"x": {"type": "integer"}}, "required": ["x"]},
        },
    }
]
_MODES: weakref.WeakKeyDictionary[LLMClient, str] = weakref.WeakKeyDictionary()
_MODES_LOCK = threading.Lock()


def detect_mode(llm: LLMClient) -> Mode:
    """Whether the endpoint returns structured tool calls: one small cached request per client.
    A refusal (no `tools` support) or calls written as text mean the JSON-action mode. In replay
    mode a probe with no recorded reply is what a live refusal left before refusals were recorded,
    so it also means the JSON mode; had the recorded run been native, its first agent request
    misses instead, and the replay stops there as it should."""
    with _MODES_LOCK:
        if llm not in _MODES:
            try:
                reply = llm.chat(
                    [{"role": "user", "content": "Call the tool ping with x = 1."}],
                    tools=_PROBE_TOOL,
                    tool_choice="required",
                    max_tokens=64,
                    temperature=0.0,
                )
                _MODES[llm] = "native" if reply.tool_calls else "json"
            except (LLMRequestRefused, ReplayMiss):
                _MODES[llm] = "json"
        return _MODES[llm]  # type: ignore[return-value]


@register("dgr")
class DGRRetriever(Retriever[DGRParams]):
    uses_llm = True
    prompt_version = PROMPT_VERSION
    Params = DGRParams
    shared_axes = ()  # none of the sweep's shared axes (alpha, k_prime) means anything here

    @classmethod
    def needs_llm(cls, params: DGRParams) -> bool:
        return params.agent.n_agents > 0  # the chain fallback alone asks the model nothing

    @classmethod
    def run_report(cls, run_dir: Path, metrics: dict[str, Any]) -> dict[str, Any]:
        from sagegraph.retrieve.dgr.diagnostics import run_report

        return run_report(run_dir, metrics)

    @classmethod
    def format_trace(cls, row: dict[str, Any], lines: int = 8) -> str:
        from sagegraph.retrieve.dgr.trajectories import format_trace

        return format_trace(row, lines)

    @classmethod
    def prepare(cls, graph, params: DGRParams) -> list[str]:
        return prepare_unnamed(graph, params.answer.unnamed)

    def __init__(self, res: Resources, params: DGRParams):
        super().__init__(res, params)
        self.tools = GraphTools(self.graph, params.tools)
        # Loaded (and checked) before the first question: a wrong path is one error, not one per question.
        self.encoder = tuned_encoder(self.graph, params.answer.chain_encoder)
        self.hybrid = HybridRetriever.over(res) if params.answer.unnamed != "resolve" else None
        self._system_prompts: dict[Mode, str] = {}

    @classmethod
    def prompt_for(cls, params: DGRParams) -> str:
        return keyed_prompt(cls.prompt_version, params.answer.chain_encoder)

    @classmethod
    def graph_inputs(cls, graph, params: DGRParams) -> str:
        return adapted_inputs(graph.dir, params.answer.chain_encoder)

    def system_prompt(self, mode: Mode) -> str:
        """The agents' instructions: the same for every question (the KB's schema and a worked
        example read from it, a scan of its edges on a large KB), so made once per action mode."""
        if mode not in self._system_prompts:
            self._system_prompts[mode] = self._make_system_prompt(mode)
        return self._system_prompts[mode]

    def _make_system_prompt(self, mode: Mode) -> str:
        view = self.tools.view
        patterns = "; ".join(f"({h})-[{r}]->({t})" for h, r, t, _ in view.patterns)
        tools, agent = self.params.tools, self.params.agent
        example, name = worked_example(view, tools.neighbourhood)
        if not agent.example:
            example = ""
        return SYSTEM.format(
            global_kind=GLOBAL_KIND[tools.global_search],
            types=", ".join(self.graph.node_types()),
            patterns=patterns or "none",
            size=tools.search_size,
            max_size=tools.max_search_size,
            neighbour_tool=self._neighbour_tool(),
            entities=ENTITIES_LINKED if agent.link and agent.link_prompt and tools.neighbourhood else ENTITIES_SEARCHED,
            example=example,
            json_rule=JSON_RULE.format(name=name.replace('"', "'")) if mode == "json" else "",
        )

    def rank_chains(self, query: str, run: AgentRun, named: list[int] | None = None) -> list[int]:
        """(`fallback: chain`) The nodes an agent's walk reached, best first by how the relation
        chain from its start reads against the question with the start's name taken out: an agent
        that walked to the answer and stopped without adding it was shown it at the end of the
        chain the question describes, which may be neither its deepest nor its last search. With
        `chain_encoder`, the chains are read by an encoder tuned on this KB's training labels.

        With `chain_reach`, the KB's chains of up to that many relations from the walk's starts are
        read too (a small agent walks one relation and stops, while the question's chain may go
        on), each kept only while every relation it adds reads closer to the question than the
        chain it extends: path expansion that stops when going on scores no better, as KBQA path
        retrievers stop (Zhang et al. 2022's subgraph retriever). Without that stop, a chain that
        walks on past the answer ('the studio of the films X directed') reads about as close as
        the answer's own ('the films X directed') and takes its place."""
        view, types, rules = self.tools.view, self.graph.types, self.params.answer
        names = view.names
        named = list(named or ())

        @functools.cache  # one regex pass per start, not one per node its chains reach
        def asked(start: int) -> str:
            return masked_question(query, [names[start]])

        def typed(hops) -> list[tuple[str, str]]:
            return [(rel, str(types[x])) for rel, x in hops]

        @functools.cache
        def layout(start: int) -> tuple[tuple[str, int], ...]:
            return tuple(name_distances(query, names[start], ORDER_WORDS)) if rules.chain_order else ()

        entries = [(r, chain_phrase(typed(hops)), asked(start)) for r, (start, hops) in run.chains.items()]
        # (entry index, start, each relation's phrase from the start) for `chain_order`
        orders = [
            (i, start, tuple(chain_phrase([h]) for h in typed(hops)))
            for i, (_, (start, hops)) in enumerate(run.chains.items())
            if len(hops) > 1 and layout(start)
        ]
        reached = []
        if rules.chain_reach:
            starts = [start for start, _ in run.chains.values()] + (named if rules.reach_named else [])
            for start in dict.fromkeys(starts):
                walk = WalkBudget()  # a hub's chains are bounded, and the run says so
                # shortest first, and of one length, those walking more relations their stored way:
                # a relation's name reads from the node it leaves, so of two chains that read the
                # same (X's `children`, and walked back, X's parents) the stored way ranks first
                reached += sorted(
                    (
                        (start, hops, chain_phrase([(view.relation_types[c], t) for c, _, t in hops]), ends)
                        for hops, ends in chains_from(view, start, rules.chain_reach, budget=walk)
                    ),
                    key=lambda chain: (len(chain[1]), -sum(out for _, out, _ in chain[1])),
                )
                run.reach_capped += int(walk.capped)
        # Exact vectors either way (a tuned encoder runs in fp32): through the graph's query vectors
        # (bf16 where the build was) a chain's rank moved with the questions encoded before it.
        encode = self.encoder.vectors if self.encoder is not None else self.graph.exact_vectors
        texts = list(
            dict.fromkeys(
                [x for _, phrase, question in entries for x in (phrase, question)]
                + [x for start, _, phrase, _ in reached for x in (phrase, asked(start))]
            )
        )
        vec = dict(zip(texts, encode(texts))) if texts else {}
        kept: dict[tuple, float] = {}
        for start, hops, phrase, ends in reached:  # shortest first: a chain's prefix is decided before it
            score = float(vec[phrase] @ vec[asked(start)])
            parent = kept.get((start, hops[:-1])) if len(hops) > 1 else -np.inf
            if parent is not None and score > parent + added_margin(
                len(hops), rules.reach_margin, rules.margin_upto
            ):  # a one-relation chain's parent is -inf
                kept[(start, hops)] = score
                if len(hops) > 1 and layout(start):
                    each = tuple(chain_phrase([(view.relation_types[c], t)]) for c, _, t in hops)
                    orders += [(len(entries) + j, start, each) for j in range(len(ends))]
                entries += [(int(r), phrase, asked(start)) for r in ends]
        extra: list[float] | None = None
        # the same relations in another order read better outward from the name: the chain loses the difference
        if orders:
            extra = [0.0] * len(entries)
            bands = {start: distance_bands(layout(start)) for start in dict.fromkeys(start for _, start, _ in orders)}
            more = list(
                dict.fromkeys(x for b in bands.values() for x in b.values() if x not in vec)
                | dict.fromkeys(h for _, _, each in orders for h in each if h not in vec)
            )
            vec.update(zip(more, encode(more)) if more else ())

            @functools.cache
            def gap(start: int, each: tuple[str, ...]) -> float:
                fit = functools.cache(lambda h, band: float(vec[h] @ vec[bands[start][band]]))
                return order_gap(each, fit, max(d for _, d in layout(start)))

            for i, start, each in orders:
                extra[i] += rules.chain_order * gap(start, each)
        ranked = rank_by_similarity(entries, lambda batch: np.stack([vec[x] for x in batch]), extra=extra)
        run.beyond_walk = bool(ranked) and ranked[0] not in run.chains
        return ranked

    def _neighbour_tool(self) -> str:
        tools = self.params.tools
        if not tools.neighbourhood:
            return ""
        return NEIGHBOUR_TOOL.format(k=tools.neighbour_k, match=NEIGHBOUR_MATCH[tools.neighbour_ranking])

    def _search(self, query: str, k: int) -> Retrieval:
        setting = self.params.agent.mode
        if self.params.agent.n_agents == 0:  # no agent asks the model anything
            mode: Mode = "json"
        else:
            mode = detect_mode(self.res.llm) if setting == "auto" else setting
        with usage_scope() as usage:
            r = self._run(query, k, mode)
        r.usage = usage.as_dict()
        return r

    def _run(self, query: str, k: int, mode: Mode) -> Retrieval:
        timeline = Timeline()
        agent_settings = self.params.agent
        n_agents = agent_settings.n_agents
        budget = TokenBudget(agent_settings.token_budget)
        system = self.system_prompt(mode) if n_agents else ""
        start = self.tools.linked(query) if agent_settings.link else None

        def one(agent: int) -> AgentRun:
            return run_agent(
                self.res.llm,
                self.tools,
                system,
                query,
                mode=mode,
                settings=agent_settings,
                agent=agent,
                budget=budget,
                timeline=timeline,
                start=start,
                fallback=self.params.answer.fallback,
                rank_chains=lambda run: self.rank_chains(query, run, start.shown if start is not None else None),
            )

        # Agents run side by side up to the client's concurrency (a serial local server runs them in
        # turn, which also keeps its prefix cache on one history); each thread carries the query's
        # usage scope.
        if n_agents == 0:
            runs = [self._chains_alone(query, start)]
        elif (workers := min(n_agents, self.res.llm.cfg.concurrency)) <= 1:
            runs = [one(a) for a in range(n_agents)]
        else:
            contexts = [contextvars.copy_context() for _ in range(n_agents)]  # taken here, in the query's thread
            with ThreadPoolExecutor(workers, thread_name_prefix="dgr-agent") as pool:
                runs = list(pool.map(lambda a: contexts[a].run(one, a), range(n_agents)))
        unnamed = self._answer_unnamed(query, runs, k)
        fused = fuse_votes([r.answer for r in runs])[:k]
        rows = np.array([r for r, _, _ in fused], dtype=np.int64)
        scores = np.array([v + 1.0 / (2 + pos) for _, v, pos in fused], dtype=np.float32)
        from_fallback = {x for r in runs if r.fallback for x in r.answer} - {
            x for r in runs if not r.fallback for x in r.answer
        }
        found_by = ["fallback" if int(r) in from_fallback else "agents" for r in rows]
        trace: dict[str, Any] = {
            "counters": counters(runs) | unnamed.pop("counters"),
            "events": timeline.events,
            "action_mode": mode,
            "tool_schemas": self.tools.schemas() if mode == "native" else None,
            "agents": [r.record() for r in runs],
            "budget_spent": budget.spent,
            "stage_sets": {
                "seen": self.stage_ids(x for r in runs for x in r.seen),
                "answered": self.stage_ids(x for r in runs for x in r.answer),
            },
        }
        if unnamed:
            trace["unnamed"] = unnamed
        return Retrieval(rows, scores, found_by, trace)

    def _chains_alone(self, query: str, start: ToolOutput | None) -> AgentRun:
        """(`n_agents: 0`) What an agent that walked nowhere would answer: the KB's chains from the
        nodes the question names, ranked as the chain fallback ranks them; no model call. It
        measures what DGR's agents add over their own fallback."""
        run = AgentRun(agent=0, sample=0, stop="finish")
        run.linked = len(start.shown) if start is not None else 0
        run.answer = self.rank_chains(query, run, start.shown if start is not None else None)
        run.fallback_from = "chain"
        return run

    def _answer_unnamed(self, query: str, runs: list[AgentRun], k: int) -> dict[str, Any]:
        """(`unnamed`) For a question that names no node, the agents that added nothing answer with
        the nodes ranked by the motifs their global searches asked for (or the question by hybrid);
        an agent that chose answers keeps them. The trace's `unnamed` says what ranked them."""
        searches = [q for r in runs for q in r.searches]
        out: dict[str, Any] = {"counters": {"unnamed": 0, "unnamed_motifs": 0}}
        if self.hybrid is None or not any(r.fallback for r in runs) or names_a_node(self.tools.view, query):
            return out
        view = self.tools.view
        unnamed = self.params.answer.unnamed
        weights = word_motifs(view, searches, query) if unnamed == "motifs" else None
        r = rank_unnamed(unnamed, view, self.hybrid, query, searches, None, k, weights=weights)
        for run in runs:
            if run.fallback:
                run.answer = [int(x) for x in r.idx]
        out["counters"] = {"unnamed": 1, "unnamed_motifs": int(r.trace["ranked_by"] == "motifs")}
        return out | r.trace


def added_margin(length: int, margin: float, upto: int | None) -> float:
    """What a relation that makes a chain `length` long must read closer than the chain it extends
    by (`reach_margin`, `margin_upto`): the margin up to `upto` relations, any gain past them."""
    return margin if upto is None or length <= upto else 0.0


def rank_by_similarity(
    entries: Sequence[tuple[int, str, str]],
    vectors: Callable[[list[str]], np.ndarray],
    extra: Sequence[float] | None = None,
) -> list[int]:
    """Rows best first by the best cosine of any of their (phrase, question) pairs (unit vectors: a
    dot product) plus that entry's `extra` where given; ties keep the order the rows first appear in. Each
    distinct text is encoded once: a
    chain's many end nodes share one phrase."""
    if not entries:
        return []
    texts = list(dict.fromkeys(x for _, phrase, question in entries for x in (phrase, question)))
    vec = dict(zip(texts, vectors(texts)))
    best: dict[int, float] = {}
    for i, (r, phrase, question) in enumerate(entries):
        score = float(vec[phrase] @ vec[question]) + (extra[i] if extra is not None else 0.0)
        if score > best.get(r, -np.inf):
            best[r] = score
    rows = list(best)
    order = sorted(range(len(rows)), key=lambda i: -best[rows[i]])
    return [rows[i] for i in order]


def worked_example(view: KBView, neighbourhood: bool = True) -> tuple[str, str]:
    """The prompt's example walk and the name its JSON sample searches for, both from the most
    frequent relationship pattern whose head has a name; no example for a graph without one."""
    for head_type, relation, tail_type, _ in view.patterns:
        pair = view.instance(head_type, relation, tail_type)
        if pair is None or not view.names[pair[0]].strip():
            continue
        head, tail = pair
        if not neighbourhood:
            return "", view.names[head]
        return EXAMPLE.format(
            head=head,
            tail=tail,
            head_type=head_type,
            tail_type=tail_type,
            relation=relation,
            head_name=view.names[head].replace('"', "'"),
            tail_name=view.names[tail],
        ), view.names[head]
    return "", "keywords"


def counters(runs: list[AgentRun]) -> dict[str, float]:
    """Per-question counts; the run's metrics hold their sums (count_*) and means (rate_*)."""
    c: dict[str, float] = {
        "agents": len(runs),
        "steps": 0,
        "global_calls": 0,
        "neighbour_calls": 0,
        "answer_calls": 0,
        "finish_calls": 0,
        "invalid_calls": 0,
        "parse_errors": 0,
        "text_tool_calls": 0,
        "repeated_calls": 0,
        "stop_finish": 0,
        "stop_t_max": 0,
        "stop_budget": 0,
        "stop_refused": 0,
        "stop_repeats": 0,
        "fallback_answers": 0,
        "agents_without_neighbourhood": 0,
        "tool_ms": 0.0,
        "relaxed_filters": 0,
        "linked_nodes": 0,
        "early_finishes": 0,
        "cut_replies_salvaged": 0,
        "answers_beyond_walk": 0,
        "reach_capped": 0,
    }
    for r in runs:
        c["steps"] += r.steps
        c["global_calls"] += r.tools[GLOBAL]
        c["neighbour_calls"] += r.tools[NEIGHBOURS]
        c["answer_calls"] += r.tools[ANSWER]
        c["finish_calls"] += r.tools[FINISH]
        c["invalid_calls"] += r.tools["invalid"]
        c["parse_errors"] += r.parse_errors
        c["text_tool_calls"] += r.text_calls
        c["repeated_calls"] += r.repeated_calls
        c[f"stop_{r.stop}"] += 1
        c["fallback_answers"] += int(r.fallback)
        c["agents_without_neighbourhood"] += int(r.tools[NEIGHBOURS] == 0)
        c["tool_ms"] += sum(r.tool_ms)
        c["relaxed_filters"] += r.tools["relaxed_filter"]
        c["linked_nodes"] += r.linked
        c["answers_beyond_walk"] += int(r.fallback and r.beyond_walk)
        c["reach_capped"] += r.reach_capped
        c["early_finishes"] += r.early_finishes
        c["cut_replies_salvaged"] += r.cut_salvaged
    return c
