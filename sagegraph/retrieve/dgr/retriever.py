"""DGR, the Dynamic Graph Retriever (dgr.txt §3, App. A.2-A.3): n tool-using LLM agents explore the
KB with global BM25 search and typed one-hop neighbourhood search, each adds the nodes it judges
answers, and the n answer lists are fused by votes (ties: earliest position).

What we follow and where we depart (LLM-RETRIEVERS.md §3):
- the paper's settings by default: n = 3 agents, T_max = 20 steps, 20 neighbours shown, global
  search size 5 unless the agent asks (at most 30), neighbourhood *ranked* by BM25 (the code's
  substring filter is `neighbour_ranking: substring`);
- tools that forgive a small model, on by default (prompt dgr-5; the paper's tools: `link`,
  `relation_kinds`, `relax_filters`, `read_before_finish` false, `fallback: last`, `unnamed: resolve`): the nodes the
  question names shown under it, each neighbour's relation types, a filter that matches nothing
  dropped, no finish before a search's results are read (dgr-6: the same, `fallback: chain`;
  dgr-7: `unnamed: motifs`; dgr-8: `chain_reach: 3`, `reach_named`; dgr-9: the chains read in
  fp32, so near ties rank alike in every run; dgr-10: `reach_margin: 0.02`; dgr-11: `chain_order:
  0.25`, a chain whose relations read better in another order outward from the name loses;
  dgr-12: `margin_upto: 2`, a third relation needs any gain, not the margin);
- agents sample at temperature 0.7 (the paper's trajectory sampling), each with its own sample
  index, so n agents are n draws and a rerun replays them from the reply cache;
- function calling where the endpoint has it, the JSON-action mode where it does not (`mode:
  auto` probes once per endpoint);
- our own system prompt, shorter than the paper's, with the same strategy (broad search for
  descriptive questions, disambiguate then expand for named entities);
- an agent that adds nothing answers with the nodes its walk reached, ranked by how the relation
  chain that reached each reads against the question (`fallback: chain`; the code returns
  nothing), with the KB's chains of up to three relations from its starts and the question's
  named nodes (`chain_reach`, `reach_named`), counted; a per-query token budget and a refused (too long) history stop agents
  cleanly, counted;
- for a question that names no node (`unnamed: motifs`, the default since dgr-7), an agent that
  adds nothing answers instead with the nodes ranked by the words its global searches asked for,
  each weighted by its rarity in the KB, as AF and GraphRAFT rank such a question by their motifs
  (`kb/unnamed.py`): its walk started from a keyword hit, so the chains from there say nothing
  of the answer (`unnamed: resolve` is dgr-6's and the paper's: the fallback as for any question).
The answer is what the agents chose, fused and cut at k: no fill from another retriever.
"""

from __future__ import annotations

import contextvars
import functools
import threading
import weakref
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from sagegraph.errors import ReplayMiss
from sagegraph.llm import LLMClient, LLMRequestRefused, usage_scope
from sagegraph.retrieve.base import Resources, Retrieval, Retriever
from sagegraph.retrieve.flat import HybridRetriever
from sagegraph.retrieve.registry import register
from sagegraph.retrieve.dgr.agent import AgentRun, Fallback, Mode, TokenBudget, fuse_votes, run_agent
from sagegraph.retrieve.dgr.tools import (ANSWER, FINISH, GLOBAL, GLOBAL_KIND, NEIGHBOUR_MATCH, NEIGHBOURS, GlobalSearch, GraphTools,
                                          NeighbourRanking)
from sagegraph.retrieve.kb.chain_encoder import keyed_prompt, selector_encoder
from sagegraph.retrieve.kb.chains import chain_phrase, distance_bands, masked_question, name_distances, name_window, order_gap
from sagegraph.retrieve.kb.entities import name_words
from sagegraph.retrieve.kb.metapaths import WalkBudget, chains_from
from sagegraph.retrieve.kb.unnamed import UNNAMED_HELP, Unnamed, names_a_node, prepare_unnamed, rank_unnamed, word_motifs
from sagegraph.retrieve.kb.view import KBView
from sagegraph.retrieve.timeline import Timeline

PROMPT_VERSION = "dgr-12"
FIRST_HOP_WORDS = 3  # `first_hop`: the words read on each side of a start's name
# `chain_order`: words farther from a start's name count as this far (at most 300 bands a start;
# no question of the synthetic KB or PathQuestion reaches it, so their figures are as measured)
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
  result goes in your next reply, after you have read it.{example}{json_rule}"""

ENTITIES_SEARCHED = """- If it names entities, first find each with search_in_graph(name), then
  explore around the right one with search_in_neighborhood, filtered by node_type or edge_type and
  ranked by the question's other key words, and add the neighbours that satisfy every condition.
"""
# With `link` the named nodes are already shown: the agent is told to walk from them one relation
# at a time, reading each relation off the node it reached (what the small model never did alone).
ENTITIES_PATH = """- If it names entities, they are listed under the question with the relations of their neighbours:
  call search_in_neighborhood from them with edge_type the list of relations the question asks about,
  in order from the named node (one relation for one step, two or three for a chain).
  Use search_in_graph only for a name that is not listed.
"""
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
3. add_to_answer(answer_nodes=[{{"node_index": {tail}, "reasoning": "{head_name} -[{relation}]-> {tail_name}"}}]), then finish()"""

NEIGHBOUR_TOOL = ("- search_in_neighborhood(node_index, query, node_type, edge_type): the node's direct neighbours with each edge's relation and "
                  "direction, ranked by {match} to query; only node_index is required; {k} shown.\n")
# `edge_path`: its sample path is two relations that meet in this KB (read at run time).
NEIGHBOUR_PATH = ("  edge_type may also be a list of relation types followed in order, e.g. [\"{r1}\", \"{r2}\"]: "
                  "the nodes at the end of that path are listed, each with the node it was reached through.\n")

JSON_RULE = """

Reply with one JSON object and nothing else, listing the tool calls to make now, e.g.
{{"calls": [{{"tool": "search_in_graph", "args": {{"query": "{name}", "size": 5}}}}]}}"""


class DGRParams(BaseModel):
    model_config = ConfigDict(extra="forbid")
    t_max: int = Field(20, ge=1, le=100, description="steps (LLM calls) per agent")
    n_agents: int = Field(3, ge=1, le=16, description="agents per question, fused by votes")
    mode: Literal["auto", "native", "json"] = Field("auto", description="function calling, JSON actions, or probe the endpoint once")
    temperature: float = Field(0.7, ge=0.0, le=2.0, description="agents' sampling temperature (n agents need > 0 to differ)")
    search_size: int = Field(5, ge=1, description="search_in_graph's default size")
    max_search_size: int = Field(30, ge=1, description="largest size an agent may ask for")
    neighbour_k: int = Field(20, ge=1, description="neighbours shown per search_in_neighborhood")
    neighbour_ranking: NeighbourRanking = Field("bm25", description="bm25 (paper), hybrid (BM25 fused with embeddings, as the flat hybrid retriever scores; not the paper's), substring (public code), none (ablation)")
    global_search: GlobalSearch = Field("bm25", description="search_in_graph's ranking: bm25 over name and summary (paper), or hybrid, the flat hybrid retriever's ranking (BM25 fused with embeddings; the public code's embedding mode is the nearest), which finds a node the question describes in other words")
    type_filters: bool = Field(True, description="honour node_type/edge_type filters (false: the paper's 'w/o F' ablation)")
    neighbourhood: bool = Field(True, description="offer search_in_neighborhood (false: the paper's 'w/o Neighbors' ablation)")
    summary_chars: int = Field(200, ge=0, description="characters of each node's summary shown in results")
    token_budget: int | None = Field(300_000, ge=1, description="prompt + completion tokens per question over all its agents (None: no limit)")
    max_tokens: int = Field(768, ge=16, description="completion tokens per step")
    max_calls_per_step: int = Field(8, ge=1, description="tool calls run from one reply; the rest are refused")
    shown_only: bool = Field(True, description="refuse node indices the agent has not been shown in a result (a small model invents them)")
    stop_repeats: int = Field(2, ge=0, description="stop an agent after this many steps in a row that only repeat earlier searches (0: never)")
    constrain: bool = Field(True, description="JSON mode: send the action schema in response_format (llama.cpp servers decode by it; set false for endpoints that refuse it)")
    # Not the paper's, each use counted. On by default since dgr-5: link, relation_kinds, relax_filters,
    # read_before_finish and fallback deepest lifted Hit@1 on both development KBs' held-out test
    # samples with the local 1.5B model (docs/results.md); fallback chain (dgr-6) lifted it again on
    # both dev samples, then both test samples; unnamed motifs (dgr-7) passed the synthetic test
    # sample and a third sample of questions not read before (docs/llm-retrievers.md, `unnamed`).
    # chain_reach 3 with reach_named (dgr-8) and reach_margin 0.02 (dgr-10) passed both test
    # samples (docs/results.md); chain_order 0.25 (dgr-11) passed both dev samples and both test samples;
    # margin_upto 2 (dgr-12) passed the synthetic dev sample and both fresh samples (seed 5).
    # The paper's tools set them false, fallback last (its code: none) and unnamed resolve.
    relax_filters: bool = Field(True, description="a neighbourhood filter that matches nothing (the explored node's own type, a type and relation that never meet, an unknown name) is dropped, said in the observation")
    answer_by_name: bool = Field(False, description="add_to_answer accepts the name of a node shown earlier as well as its index")
    steps_left: bool = Field(False, description="each observation says how many steps the agent has left")
    relation_kinds: bool = Field(True, description="each neighbour shown lists the relation types it has (which edge_type leads on from it)")
    link: bool = Field(True, description="show under the question the nodes it names (the KB's name index) with their neighbours by type and relation, so the agent starts from them (not the paper's)")
    fallback: Fallback = Field("chain", description="what an agent that added nothing answers: its last search results (last), what its first neighbourhood search showed (first), the search that first reached the farthest nodes of its walk from the named or searched nodes (deepest), or every node its walk reached, ranked by how the relation chain that reached it reads against the question (chain; the graph's text encoder, as GraphRAFT's `similar` ranks templates); none is the paper's, whose code answers nothing")
    chain_encoder: str | None = Field(None, description="with `fallback: chain`, a sentence encoder tuned on this KB's training labels reads the chains instead of the graph's encoder (the one GraphRAFT's `selector_encoder` takes, made by `sagegraph graphraft train-selector`; not the paper's)")
    chain_meets: bool = Field(False, description="with `fallback: chain`, a node that walks from more of the agent's starts reached ranks first (what an intersection question asks for; not the paper's)")
    chain_reach: int = Field(3, ge=0, le=3, description="with `fallback: chain`, the KB's chains of up to this many relations (either stored direction) from the walk's starts are ranked with the walk's own, each while every relation it adds reads closer to the question, so an agent that walked one relation of a longer chain still answers from its end; 0: the walk's chains only (not the paper's)")
    reach_named: bool = Field(True, description="with `chain_reach`, the chains from the nodes the question names (`link`) are read too, though the agent walked from other nodes or not at all (not the paper's)")
    mask_named: bool = Field(False, description="with `fallback: chain`, every start's chains are read against the question with the names of all the nodes it names (`link`) taken out, not only the start's own, so a start the agent drifted to is not read closer for another node's name left in the question (session 34's synthetic three-hop trace; not the paper's; session 35's synthetic validation sample: 0.214 against 0.357, the intersection questions lost)")
    mask_drifted: bool = Field(False, description="with `fallback: chain`, a start the question does not name (the agent reached it by search) has its chains read against the question with the named nodes' names taken out too; a named start's chains as before, its own name only (`mask_named` for all starts cost the intersection questions, whose other named node's name says which chain; session 35; not the paper's)")
    mask_qualifier: bool = Field(False, description="with `fallback: chain`, a parenthesis right after a start's name in the question ('Dune (2021)') is taken out with the name before the chains are read against it: it says which node, not which relation (session 36's synthetic three-hop trace: the question's chain read 0.428 against its parent's 0.437 with the year left in, 0.549 against 0.527 without, so the chain stop rule cut it); it lost on the synthetic dev sample (0.429 -> 0.357, three-hop 0.5 -> 0), so off (not the paper's)")
    chain_order: float = Field(0.25, ge=0.0, le=2.0, description="with `fallback: chain`, a chain of two or more relations from a start the question names loses this weight times how much worse its relations read laid outward from that name in their order than in their best order (a question says the relation that leaves the named node nearest its name), since the graph's encoder barely reads a chain's order; chains of different relations rank as before (session 36: Hit@1 PathQuestion test 60 0.583 -> 0.600, synthetic 70 0.371 both); 0: off, as dgr-10 (not the paper's)")
    first_hop: float = Field(0.0, ge=0.0, le=2.0, description="with `fallback: chain`, each chain also scores this weight times how its first relation reads against the words around its start's name in the question (3 each side: 'the director of X' says which relation leaves X), since the graph's encoder barely reads a chain's order (session 35's synthetic three-hop trace: the question's chain 0.489, its relations in another order 0.492); 0: off (not the paper's)")
    reach_margin: float = Field(0.02, ge=0.0, le=1.0, description="with `chain_reach`, each relation a chain adds must read closer to the question than the chain it extends by more than this cosine (0: any gain, dgr-9's; not the paper's)")
    margin_upto: int | None = Field(2, ge=2, description="with `reach_margin`, only a relation that makes a chain at most this long must gain more than the margin; a longer one any gain (2: the margin stops a second relation walking past a one-relation answer, what it was chosen for, and leaves a third relation to read closer at all; session 36: on 12 synthetic three-hop validation questions 7 answers first, 0 with the margin on every relation; fresh samples' unread questions Hit@1 PathQuestion 18 0.722 both, synthetic 12 0.250 -> 0.333; the default since dgr-12; None: every relation, as dgr-11; not the paper's)")
    link_neighbours: bool = Field(False, description="with `link`, each named node is shown with its neighbours (up to neighbour_k, ranked by the question) as a neighbourhood search would list them, the walk's first relation taken for the agent (not the paper's)")
    link_prompt: bool = Field(True, description="with `link`, the prompt's rule for named entities says to walk from the listed nodes (false: the paper's rule, find each name by search first)")
    edge_path: bool = Field(False, description="search_in_neighborhood's edge_type may be a list of relation types, followed in order, listing the nodes at the path's end (the 2025 prototype's find_paths; not the paper's)")
    example: bool = Field(True, description="the system prompt's worked example, a walk along this KB's most frequent relation (false: none; under `constrain` the grammar keeps the format, and a small model copies the example's edge_type into every search)")
    read_before_finish: bool = Field(True, description="refuse a finish written in the same reply as a search, whose results the agent has not read yet, said in the observation (not the paper's)")
    salvage_cut: bool = Field(False, description="a JSON-mode reply cut off at the token limit runs the calls it wrote whole (at most max_calls_per_step) and the history keeps only those, said in the observation (off: the reply is unreadable and goes back whole into the history, where a small model copies the loop that cut it; not the paper's)")
    unnamed: Unnamed = Field("motifs", description=UNNAMED_HELP.replace("resolve (the paper's: the written motifs resolve like names)",
                                                                      "resolve (as for a question that names a node: the agents' answers, else `fallback`)")
                             + "; for DGR the motifs are the words of the agents' global searches, each weighted by its inverse document frequency in the KB, and only an agent that added nothing answers by them")
    answer_on_stop: bool = Field(False, description="an agent stopped by t_max or its repeats with nothing added is asked once more, add_to_answer its only tool, to answer from the nodes it was shown (not the paper's; one more call)")


_PROBE_TOOL = [{"type": "function", "function": {"name": "ping", "description": "Answer the ping.",
                                                 "parameters": {"type": "object", "properties": {"x": {"type": "integer"}}, "required": ["x"]}}}]
_MODES: "weakref.WeakKeyDictionary[LLMClient, str]" = weakref.WeakKeyDictionary()
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
                reply = llm.chat([{"role": "user", "content": "Call the tool ping with x = 1."}], tools=_PROBE_TOOL,
                                 tool_choice="required", max_tokens=64, temperature=0.0)
                _MODES[llm] = "native" if reply.tool_calls else "json"
            except (LLMRequestRefused, ReplayMiss):
                _MODES[llm] = "json"
        return _MODES[llm]  # type: ignore[return-value]


@register("dgr")
class DGRRetriever(Retriever):
    uses_llm = True
    prompt_version = PROMPT_VERSION
    Params = DGRParams
    shared_axes = ()  # none of the sweep's shared axes (alpha, k_prime) means anything here

    @classmethod
    def format_trace(cls, row: dict[str, Any], lines: int = 8) -> str:
        from sagegraph.retrieve.dgr.trajectories import format_trace

        return format_trace(row, lines)

    @classmethod
    def prepare(cls, graph, params: DGRParams) -> list[str]:
        return prepare_unnamed(graph, params.unnamed)

    def __init__(self, res: Resources, params: DGRParams):
        super().__init__(res, params)
        self.tools = GraphTools(self.g, default_size=params.search_size, max_size=params.max_search_size, neighbour_k=params.neighbour_k,
                                neighbour_ranking=params.neighbour_ranking, type_filters=params.type_filters,
                                neighbourhood=params.neighbourhood, summary_chars=params.summary_chars,
                                relax_filters=params.relax_filters, answer_by_name=params.answer_by_name,
                                relation_kinds=params.relation_kinds, edge_path=params.edge_path, global_search=params.global_search)
        # Loaded (and checked) before the first question: a wrong path is one error, not one per question.
        self.encoder = selector_encoder(params.chain_encoder) if params.chain_encoder else None
        self.hybrid = HybridRetriever.over(res) if params.unnamed != "resolve" else None

    @classmethod
    def prompt_for(cls, params: DGRParams) -> str:
        return keyed_prompt(cls.prompt_version, params.chain_encoder)

    def system_prompt(self, mode: Mode) -> str:
        view = self.tools.view
        patterns = "; ".join(f"({h})-[{r}]->({t})" for h, r, t, _ in view.patterns)
        example, name = worked_example(view, self.p.neighbourhood)
        if not self.p.example:
            example = ""
        return SYSTEM.format(global_kind=GLOBAL_KIND[self.p.global_search], types=", ".join(self.g.node_types()), patterns=patterns or "none", size=self.p.search_size,
                             max_size=self.p.max_search_size,
                             neighbour_tool=self._neighbour_tool(),
                             entities=(ENTITIES_PATH if self.p.edge_path else ENTITIES_LINKED) if self.p.link and self.p.link_prompt and self.p.neighbourhood
                             else ENTITIES_SEARCHED,
                             example=example, json_rule=JSON_RULE.format(name=name.replace('"', "'")) if mode == "json" else "")

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
        view, types = self.tools.view, self.g.types
        names = view.names

        named = list(named or ())
        named_names = [names[n] for n in named]

        @functools.cache  # one regex pass per start, not one per node its chains reach
        def asked(start: int) -> str:
            others = self.p.mask_named or (self.p.mask_drifted and start not in named)
            return masked_question(query, [names[start], *(named_names if others else ())], qualifiers=self.p.mask_qualifier)

        @functools.cache
        def around(start: int) -> str:
            return name_window(query, names[start], FIRST_HOP_WORDS) if self.p.first_hop else ""

        def typed(hops) -> list[tuple[str, str | None]]:
            return [(rel, str(types[x]) if x is not None else None) for rel, x in hops]

        @functools.cache
        def layout(start: int) -> tuple[tuple[str, int], ...]:
            return tuple(name_distances(query, names[start], ORDER_WORDS)) if self.p.chain_order else ()

        entries = [(r, chain_phrase(typed(hops)), asked(start)) for r, (start, hops) in run.chains.items()]
        # (entry index, first relation's phrase, the words around the start's name) for `first_hop`
        firsts = [(i, chain_phrase(typed(hops[:1])), around(start)) for i, (_, (start, hops)) in enumerate(run.chains.items()) if around(start)]
        # (entry index, start, each relation's phrase from the start) for `chain_order`
        orders = [(i, start, tuple(chain_phrase([h]) for h in typed(hops))) for i, (_, (start, hops)) in enumerate(run.chains.items())
                  if len(hops) > 1 and layout(start)]
        reached = []
        if self.p.chain_reach:
            starts = [start for start, _ in run.chains.values()] + (named if self.p.reach_named else [])
            for start in dict.fromkeys(starts):
                walk = WalkBudget()  # a hub's chains are bounded, and the run says so
                reached += [(start, hops, chain_phrase([(view.relation_types[c], t) for c, _, t in hops]), ends)
                            for hops, ends in chains_from(view, start, self.p.chain_reach, budget=walk)]
                run.reach_capped += int(walk.capped)
        # Exact vectors either way (a tuned encoder runs in fp32): through the graph's query vectors
        # (bf16 where the build was) a chain's rank moved with the questions encoded before it.
        encode = self.encoder.vectors if self.encoder is not None else self.g.exact_vectors
        texts = list(dict.fromkeys([x for _, phrase, question in entries for x in (phrase, question)]
                                   + [x for start, _, phrase, _ in reached for x in (phrase, asked(start))]))
        vec = dict(zip(texts, encode(texts))) if texts else {}
        kept: dict[tuple, float] = {}
        for start, hops, phrase, ends in reached:  # shortest first: a chain's prefix is decided before it
            score = float(vec[phrase] @ vec[asked(start)])
            parent = kept.get((start, hops[:-1])) if len(hops) > 1 else -np.inf
            if parent is not None and score > parent + added_margin(len(hops), self.p.reach_margin, self.p.margin_upto):  # a one-relation chain's parent is -inf
                kept[(start, hops)] = score
                if around(start):
                    first = chain_phrase([(view.relation_types[hops[0][0]], hops[0][2])])
                    firsts += [(len(entries) + j, first, around(start)) for j in range(len(ends))]
                if len(hops) > 1 and layout(start):
                    each = tuple(chain_phrase([(view.relation_types[c], t)]) for c, _, t in hops)
                    orders += [(len(entries) + j, start, each) for j in range(len(ends))]
                entries += [(int(r), phrase, asked(start)) for r in ends]
        # Only the walk's meetings count: measured on the dev samples, counting the chains' too put
        # nodes that many searched starts lead to first (synthetic 14: 0.071 against 0.214).
        meets = {r: len(run.meets.get(r, ())) for r in run.chains} if self.p.chain_meets else None
        extra = [0.0] * len(entries) if firsts or orders else None
        if firsts:  # the first relation read against the name's neighbourhood; the stop rule above is untouched (a chain and its parent share it)
            more = list(dict.fromkeys(x for _, first, near in firsts for x in (first, near) if x not in vec))
            vec.update(zip(more, encode(more)) if more else ())
            for i, first, near in firsts:
                extra[i] += self.p.first_hop * float(vec[first] @ vec[near])
        if orders:  # the same relations in another order read better outward from the name: the chain loses the difference
            bands = {start: distance_bands(layout(start)) for _, start, _ in orders}
            more = list(dict.fromkeys(x for b in bands.values() for x in b.values() if x not in vec)
                        | dict.fromkeys(h for _, _, each in orders for h in each if h not in vec))
            vec.update(zip(more, encode(more)) if more else ())

            @functools.cache
            def gap(start: int, each: tuple[str, ...]) -> float:
                fit = functools.cache(lambda h, band: float(vec[h] @ vec[bands[start][band]]))
                return order_gap(each, fit, max(d for _, d in layout(start)))

            for i, start, each in orders:
                extra[i] += self.p.chain_order * gap(start, each)
        ranked = rank_by_similarity(entries, lambda batch: np.stack([vec[x] for x in batch]), first_by=meets, extra=extra)
        run.beyond_walk = bool(ranked) and ranked[0] not in run.chains
        return ranked

    def _neighbour_tool(self) -> str:
        if not self.p.neighbourhood:
            return ""
        text = NEIGHBOUR_TOOL.format(k=self.p.neighbour_k, match=NEIGHBOUR_MATCH[self.p.neighbour_ranking])
        chain = sample_chain(self.tools.view) if self.p.edge_path else None
        return text + (NEIGHBOUR_PATH.format(r1=chain[0], r2=chain[1]) if chain else "")

    def _search(self, query: str, k: int) -> Retrieval:
        mode: Mode = detect_mode(self.res.llm) if self.p.mode == "auto" else self.p.mode  # type: ignore[assignment]
        with usage_scope() as usage:
            r = self._run(query, k, mode)
        r.usage = usage.as_dict()
        return r

    def _run(self, query: str, k: int, mode: Mode) -> Retrieval:
        timeline = Timeline()
        budget = TokenBudget(self.p.token_budget)
        system = self.system_prompt(mode)
        start = self.tools.linked(query, neighbours=self.p.link_neighbours) if self.p.link else None

        def one(agent: int) -> AgentRun:
            return run_agent(self.res.llm, self.tools, system, query, mode=mode, t_max=self.p.t_max, agent=agent,
                             temperature=self.p.temperature, max_tokens=self.p.max_tokens, budget=budget, timeline=timeline,
                             max_calls_per_step=self.p.max_calls_per_step, constrain=self.p.constrain,
                             shown_only=self.p.shown_only, stop_repeats=self.p.stop_repeats, steps_left=self.p.steps_left,
                             answer_on_stop=self.p.answer_on_stop, start=start,
                             read_before_finish=self.p.read_before_finish, fallback=self.p.fallback,
                             salvage_cut=self.p.salvage_cut, rank_chains=lambda run: self.rank_chains(query, run, start.shown if start is not None else None))

        # Agents run side by side up to the client's concurrency (a serial local server runs them in
        # turn, which also keeps its prefix cache on one history); each thread carries the query's
        # usage scope.
        workers = max(1, min(self.p.n_agents, self.res.llm.cfg.concurrency))
        if workers == 1:
            runs = [one(a) for a in range(self.p.n_agents)]
        else:
            contexts = [contextvars.copy_context() for _ in range(self.p.n_agents)]  # taken here, in the query's thread
            with ThreadPoolExecutor(workers, thread_name_prefix="dgr-agent") as pool:
                runs = list(pool.map(lambda a: contexts[a].run(one, a), range(self.p.n_agents)))
        unnamed = self._answer_unnamed(query, runs, k)
        fused = fuse_votes([r.answer for r in runs])[:k]
        rows = np.array([r for r, _, _ in fused], dtype=np.int64)
        scores = np.array([v + 1.0 / (2 + pos) for _, v, pos in fused], dtype=np.float32)
        from_fallback = {x for r in runs if r.fallback for x in r.answer} - {x for r in runs if not r.fallback for x in r.answer}
        found_by = ["fallback" if int(r) in from_fallback else "agents" for r in rows]
        trace: dict[str, Any] = {"counters": counters(runs) | unnamed.pop("counters"), "events": timeline.events, "action_mode": mode,
                                 "tool_schemas": self.tools.schemas() if mode == "native" else None,
                                 "agents": [r.record() for r in runs], "budget_spent": budget.spent,
                                 "stage_sets": {"seen": self.stage_ids(x for r in runs for x in r.seen),
                                                "answered": self.stage_ids(x for r in runs for x in r.answer)}}
        if unnamed:
            trace["unnamed"] = unnamed
        return Retrieval(rows, scores, found_by, trace)

    def _answer_unnamed(self, query: str, runs: list[AgentRun], k: int) -> dict[str, Any]:
        """(`unnamed`) For a question that names no node, the agents that added nothing answer with
        the nodes ranked by the motifs their global searches asked for (or the question by hybrid);
        an agent that chose answers keeps them. The trace's `unnamed` says what ranked them."""
        searches = [q for r in runs for q in r.searches]
        out: dict[str, Any] = {"counters": {"unnamed": 0, "unnamed_motifs": 0}}
        # Every run of a search's words counts as a name the model wrote: PathQuestion's questions
        # are lower case, and an agent searches "srinagarindra children" (or "kalama's husband")
        # for "what did srinagarindra 's children die from ?", whose one-word name the gazetteer
        # skips, and "william cavendish bentinck 7th duke of portland 's kid", a name longer than
        # the gazetteer's six-word window.
        written = searches + [span for q in searches for span in word_spans(name_words(q))]
        if self.hybrid is None or not any(r.fallback for r in runs) or names_a_node(self.tools.view, query, written):
            return out
        view = self.tools.view
        weights = word_motifs(view, searches, query) if self.p.unnamed == "motifs" else None
        r = rank_unnamed(self.p.unnamed, view, self.hybrid, query, searches, None, k, weights=weights)
        for run in runs:
            if run.fallback:
                run.answer = [int(x) for x in r.idx]
        out["counters"] = {"unnamed": 1, "unnamed_motifs": int(r.trace["ranked_by"] == "motifs")}
        return out | r.trace


def added_margin(length: int, margin: float, upto: int | None) -> float:
    """What a relation that makes a chain `length` long must read closer than the chain it extends
    by (`reach_margin`, `margin_upto`): the margin up to `upto` relations, any gain past them."""
    return margin if upto is None or length <= upto else 0.0


def word_spans(words: list[str], longest: int = 12) -> list[str]:
    """Every run of at most `longest` consecutive words, joined by spaces: bounded, so a search a
    model wrote hundreds of words long costs linear time, not cubic."""
    return [" ".join(words[i:j]) for i in range(len(words)) for j in range(i + 1, min(i + longest, len(words)) + 1)]


def rank_by_similarity(entries: Sequence[tuple[int, str, str]], vectors: Callable[[list[str]], np.ndarray],
                       first_by: dict[int, int] | None = None, extra: Sequence[float] | None = None) -> list[int]:
    """Rows best first by the best cosine of any of their (phrase, question) pairs (unit vectors: a
    dot product) plus that entry's `extra` where given, after `first_by`'s count where given (more
    first); ties keep the order the rows first appear in. Each distinct text is encoded once: a
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
    order = sorted(range(len(rows)), key=lambda i: (-(first_by or {}).get(rows[i], 0), -best[rows[i]]))
    return [rows[i] for i in order]


def sample_chain(view: KBView) -> tuple[str, str] | None:
    """Two relation types that meet at a node type in this KB, for the path sample `edge_path`
    shows: the most frequent pair of distinct relations, a pair that ends at another type than it
    starts from first (a path that leads somewhere new); None when no two meet."""
    best: tuple[bool, int, str, str] | None = None
    for h1, r1, t1, n1 in view.patterns:
        for h2, r2, t2, n2 in view.patterns:
            key = (t2 != h1, min(n1, n2), r1, r2)
            if r2 != r1 and h2 == t1 and (best is None or key[:2] > best[:2]):
                best = key
    return (best[2], best[3]) if best else None


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
        return EXAMPLE.format(head=head, tail=tail, head_type=head_type, tail_type=tail_type, relation=relation,
                              head_name=view.names[head].replace('"', "'"), tail_name=view.names[tail]), view.names[head]
    return "", "keywords"


def counters(runs: list[AgentRun]) -> dict[str, float]:
    """Per-question counts; the run's metrics hold their sums (count_*) and means (rate_*)."""
    c: dict[str, float] = {"agents": len(runs), "steps": 0, "global_calls": 0, "neighbour_calls": 0, "answer_calls": 0, "finish_calls": 0,
                           "invalid_calls": 0, "parse_errors": 0, "text_tool_calls": 0, "repeated_calls": 0, "stop_finish": 0, "stop_t_max": 0, "stop_budget": 0,
                           "stop_refused": 0, "stop_repeats": 0, "fallback_answers": 0, "agents_without_neighbourhood": 0, "tool_ms": 0.0,
                           "relaxed_filters": 0, "answers_by_name": 0, "answers_on_stop": 0, "linked_nodes": 0, "early_finishes": 0, "cut_replies_salvaged": 0,
                           "answers_beyond_walk": 0, "reach_capped": 0}
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
        c["answers_by_name"] += r.tools["answer_by_name"]
        c["answers_on_stop"] += int(r.answered_on_stop)
        c["linked_nodes"] += r.linked
        c["answers_beyond_walk"] += int(r.fallback and r.beyond_walk)
        c["reach_capped"] += r.reach_capped
        c["early_finishes"] += r.early_finishes
        c["cut_replies_salvaged"] += r.cut_salvaged
    return c
