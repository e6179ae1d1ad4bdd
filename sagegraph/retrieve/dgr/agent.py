"""One DGR agent's loop, the readers of its actions, and the vote fusion of n agents.

Loop (dgr.txt §3.1): each step is one chat call with the whole history; the reply's tool calls run
in order and their observations are appended; the run ends on `finish`, after T_max steps, when
the query's token budget is spent, or when the endpoint refuses the request (most often the
growing history no longer fits its context). The answer is the add_to_answer order without duplicates; an agent
that added nothing
answers with its last search results instead (counted: the public code returns nothing).

Two ways to ask for actions:
- native: the endpoint's function calling (`tools`, `tool_choice="required"`), observations as
  `tool` messages. Servers that render tools into the prompt but return the call as text (Qwen's
  `<tool_call>` blocks through llama-cpp-python's template) are read from the text, counted.
- json: no `tools` field; the system prompt describes the tools and the reply is one JSON object
  {"calls": [{"tool": ..., "args": {...}}]} (JSON mode), observations as a user message.
A reply that yields no readable action is answered with the reason and counted; the agent tries
again on its next step. Every call goes through the client's cache with the agent's sample index
in the key, so a rerun replays the same trajectory and n agents are n distinct samples.
"""

from __future__ import annotations

import json
import re
import threading
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal

from sagegraph.llm import LLMClient, LLMRequestRefused, Reply
from sagegraph.retrieve.dgr.params import AgentParams, Fallback
from sagegraph.retrieve.dgr.tools import (
    ANSWER,
    FINISH,
    GLOBAL,
    NEIGHBOURS,
    GraphTools,
    ToolError,
    ToolOutput,
)
from sagegraph.retrieve.timeline import Timeline

Mode = Literal["native", "json"]
Stop = Literal["finish", "t_max", "budget", "refused", "repeats"]
# A walk to one node: the node it started from, then (relation, the row it reached) per hop.
Chain = tuple[int, tuple[tuple[str, int], ...]]


class ActionError(ValueError):
    """A reply the harness cannot read as tool calls; the message is shown to the agent."""


@dataclass
class Action:
    tool: str
    args: dict[str, Any]
    call_id: str | None = None  # native calls are answered by id


def _args(raw: Any, tool: str) -> dict[str, Any]:
    if raw is None or raw == "":
        return {}
    if isinstance(raw, str):
        try:
            raw = json.loads(raw)
        except json.JSONDecodeError as exc:
            raise ActionError(f"the arguments of {tool} are not valid JSON ({exc.msg})") from None
    if not isinstance(raw, dict):
        raise ActionError(f"the arguments of {tool} must be a JSON object")
    return raw


def read_native(reply: Reply) -> list[Action]:
    return [Action(c["name"], _args(c.get("arguments"), c["name"]), c.get("id")) for c in reply.tool_calls]


_FENCE = re.compile(r"```(?:json)?\s*(.*?)```", re.DOTALL)
_TOOL_CALL = re.compile(r"<tool_call>\s*(.*?)\s*(?:</tool_call>|$)", re.DOTALL)


def _objects(text: str) -> list[Any]:
    """JSON values found in a reply: whole, in ```json fences, in <tool_call> blocks, or as the
    outermost {...}; doubled braces (a template's escaping leaking into the output) are undone."""
    text = re.sub(r"<think>.*?</think>", " ", text or "", flags=re.DOTALL).strip()
    pieces = _TOOL_CALL.findall(text) or _FENCE.findall(text) or [text]
    out = []
    for p in pieces:
        p = p.strip()
        for candidate in (p, p.replace("{{", "{").replace("}}", "}")):
            start, end = candidate.find("{"), candidate.rfind("}")
            if start < 0 or end < start:
                continue
            try:
                out.append(json.loads(candidate[start : end + 1]))
                break
            except json.JSONDecodeError:
                # several objects one after another (one per line) are several calls
                objs, ok = [], True
                for line in candidate[start : end + 1].splitlines():
                    line = line.strip().rstrip(",")
                    if not line:
                        continue
                    try:
                        objs.append(json.loads(line))
                    except json.JSONDecodeError:
                        ok = False
                        break
                if ok and objs:
                    out.extend(objs)
                    break
    return out


def _to_actions(value: Any) -> list[Action]:
    if isinstance(value, list):
        return [a for v in value for a in _to_actions(v)]
    if not isinstance(value, dict):
        raise ActionError("expected a JSON object with the tool calls")
    if "calls" in value:
        return _to_actions(value["calls"])
    tool = value.get("tool") or value.get("name") or value.get("function")
    if isinstance(tool, dict):  # {"function": {"name", "arguments"}}
        return _to_actions(tool)
    if not isinstance(tool, str) or not tool:
        raise ActionError('each call needs a "tool" name')
    raw = value.get("args", value.get("arguments", value.get("parameters")))
    if raw is None:  # arguments written beside the name: {"tool": "finish"} or {"tool": ..., "query": ...}
        raw = {k: v for k, v in value.items() if k not in ("tool", "name", "function")}
    return [Action(tool, _args(raw, tool))]


_SEPARATOR = re.compile(r"\s*,?\s*")


def whole_calls(text: str) -> list[Any]:
    """The calls a JSON-mode reply wrote whole before it was cut off at the token limit (`{"calls":
    [` then each complete object in turn); [] when none is whole. A 1.5B model under the grammar
    sometimes repeats one pair of calls until the limit, and the reply then reads as no JSON."""
    opening = re.search(r'"calls"\s*:\s*\[', text or "")
    if opening is None:
        return []
    decoder, i = json.JSONDecoder(), opening.end()
    out: list[dict[str, Any]] = []
    while True:
        i = _SEPARATOR.match(text, i).end()  # type: ignore[union-attr]
        try:
            value, i = decoder.raw_decode(text, i)
        except json.JSONDecodeError:
            return out
        out.append(value)


def _salvaged(text: str, most: int) -> tuple[list[Any], list[Action]]:
    """The first `most` whole calls of a cut reply and their actions; nothing when they do not read
    as calls."""
    whole = whole_calls(text)[:most]
    try:
        return whole, _to_actions(whole)
    except ActionError:
        return [], []


def read_text_actions(text: str) -> list[Action]:
    """Actions written as text: JSON-action mode's {"calls": [...]}, a bare {"tool"/"name", "args"/
    "arguments"} call, or tool-call blocks; an ActionError says what was wrong."""
    objs = _objects(text)
    if not objs:
        raise ActionError('no JSON object found; reply with {"calls": [{"tool": "...", "args": {...}}]}')
    actions = _to_actions(objs)
    if not actions:
        raise ActionError("the reply lists no tool call")
    return actions


class TokenBudget:
    """Tokens (prompt + completion) one query may spend, shared by its agents."""

    def __init__(self, limit: int | None):
        self.limit = limit
        self.spent = 0
        self._lock = threading.Lock()

    def spend(self, tokens: int) -> None:
        with self._lock:
            self.spent += tokens

    @property
    def exhausted(self) -> bool:
        return self.limit is not None and self.spent >= self.limit


@dataclass
class AgentRun:
    """One agent's trajectory and its account: what a person reads in `sagegraph trace` and what
    the distillation export turns into a chat record."""

    agent: int
    sample: int
    answer: list[int] = field(default_factory=list)
    reasons: dict[int, str] = field(default_factory=dict)
    last_results: list[int] = field(default_factory=list)
    first_neighbours: list[int] = field(default_factory=list)  # the first neighbourhood search that showed nodes
    deepest: list[int] = field(
        default_factory=list
    )  # the neighbourhood search that first reached the walk's farthest new nodes
    deepest_reach: int = 0  # how many relations from its start `deepest` lies
    depth: dict[int, int] = field(
        default_factory=dict
    )  # relations walked from a named or searched node to each node shown
    chains: dict[int, Chain] = field(
        default_factory=dict
    )  # how the walk first reached each node a neighbourhood search showed
    seen: list[int] = field(default_factory=list)
    searches: list[str] = field(
        default_factory=list
    )  # what its global searches asked for, in order (`unnamed`'s motifs)
    linked: int = 0  # nodes shown with the question (`link`)
    beyond_walk: bool = False  # its fallback's first node lies on a chain beyond its walk (`chain_reach`)
    reach_capped: int = 0  # starts whose `chain_reach` walk stopped at its bound (`metapaths.WalkBudget`: a hub)
    steps: int = 0
    stop: Stop = "t_max"
    fallback_from: Fallback | None = None  # which results an agent that added nothing answered (None: it answered)
    tools: Counter = field(default_factory=Counter)
    parse_errors: int = 0
    text_calls: int = 0
    repeated_calls: int = 0
    early_finishes: int = 0  # finish calls refused because the same reply searched (`read_before_finish`)
    cut_salvaged: int = 0  # replies cut off at the token limit whose whole calls ran (`salvage_cut`)
    prompt_tokens: list[int] = field(default_factory=list)  # per step: the history's growth
    completion_tokens: list[int] = field(default_factory=list)
    tool_ms: list[float] = field(default_factory=list)  # the harness's time per tool call
    messages: list[dict[str, Any]] = field(default_factory=list)

    @property
    def fallback(self) -> bool:
        return self.fallback_from is not None

    def record(self) -> dict[str, Any]:
        return {
            "agent": self.agent,
            "sample": self.sample,
            "answer": self.answer,
            "reasons": {str(k): v for k, v in self.reasons.items()},
            "stop": self.stop,
            "steps": self.steps,
            "fallback": self.fallback,
            "fallback_from": self.fallback_from,
            "searches": self.searches,
            "linked": self.linked,
            "beyond_walk": self.beyond_walk,
            "reach_capped": self.reach_capped,
            "deepest_reach": self.deepest_reach,
            "tools": dict(self.tools),
            "parse_errors": self.parse_errors,
            "tool_errors": self.tools["invalid"],
            "text_calls": self.text_calls,
            "repeated_calls": self.repeated_calls,
            "early_finishes": self.early_finishes,
            "cut_salvaged": self.cut_salvaged,
            "prompt_tokens": self.prompt_tokens,
            "completion_tokens": self.completion_tokens,
            "tool_ms": [round(x, 3) for x in self.tool_ms],
            "messages": self.messages,
        }


def _assistant_native(reply: Reply) -> dict[str, Any]:
    return {
        "role": "assistant",
        "content": reply.text or None,
        "tool_calls": [
            {"id": c["id"], "type": "function", "function": {"name": c["name"], "arguments": c["arguments"]}}
            for c in reply.tool_calls
        ],
    }


def run_agent(
    llm: LLMClient,
    tools: GraphTools,
    system: str,
    question: str,
    *,
    mode: Mode,
    settings: AgentParams,
    agent: int = 0,
    budget: TokenBudget | None = None,
    timeline: Timeline | None = None,
    start: ToolOutput | None = None,
    fallback: Fallback = "last",
    rank_chains: Callable[[AgentRun], list[int]] | None = None,
) -> AgentRun:
    """Runs one agent to its stop under `settings`; `agent` picks its sample (agent + 1 in the cache
    key and seed). A small model loops (one search resent until T_max), invents node indices and
    writes a finish beside the search it needs, so `stop_repeats`, `shown_only` and
    `read_before_finish` guard against each; `salvage_cut` runs the calls a reply cut off at the
    token limit wrote whole (`whole_calls`). An agent that added nothing answers by `fallback`;
    `rank_chains` orders the nodes its walk reached for `fallback: chain`."""
    run = AgentRun(agent=agent, sample=agent + 1)
    budget = budget or TokenBudget(None)
    timeline = timeline or Timeline()
    group = f"agent {agent}"
    opening = f"Question: {question}"
    if start is not None and start.text:
        opening += f"\n\n{start.text}"
        run.seen += [r for r in start.shown if r not in run.seen]
        run.depth.update((r, 0) for r in start.shown)
        run.linked = len(start.shown)
    run.messages = [{"role": "system", "content": system}, {"role": "user", "content": opening}]
    schemas = tools.schemas() if mode == "native" else None
    fmt = (
        None
        if mode == "native"
        else (
            {"type": "json_object", "schema": tools.action_schema()} if settings.constrain else {"type": "json_object"}
        )
    )
    sent = 0  # messages already shown in an earlier step's span (spans carry only what is new)
    asked: dict[str, int] = {}  # search call -> the step that first made it
    stale = 0  # steps in a row that only repeated earlier searches
    t_max, max_calls_per_step = settings.t_max, settings.max_calls_per_step
    for step in range(1, t_max + 1):
        if budget.exhausted:
            run.stop = "budget"
            break
        try:
            with timeline.span("llm", f"step {step}", run.messages[sent:], group=group) as ev:
                reply = llm.chat(
                    run.messages,
                    tools=schemas,
                    tool_choice="required" if schemas else None,
                    response_format=fmt,
                    sample=run.sample,
                    temperature=settings.temperature,
                    max_tokens=settings.max_tokens,
                )
                timeline.reply(ev, reply)
        except LLMRequestRefused:  # most often the history outgrew the context window
            run.stop = "refused"
            break
        sent = len(run.messages)
        run.steps = step
        run.prompt_tokens.append(reply.prompt_tokens)
        run.completion_tokens.append(reply.completion_tokens)
        budget.spend(reply.prompt_tokens + reply.completion_tokens)
        written, cut_note = reply.text, ""
        try:
            if mode == "native" and reply.tool_calls:
                actions = read_native(reply)
            else:
                actions = read_text_actions(reply.text)
                run.text_calls += mode == "native"
        except ActionError as exc:
            whole, actions = (
                _salvaged(reply.text, max_calls_per_step) if settings.salvage_cut and not reply.whole else ([], [])
            )
            if not actions:
                run.parse_errors += 1
                run.messages.append({"role": "assistant", "content": reply.text})
                run.messages.append(
                    {"role": "user", "content": f"Your reply could not be read as tool calls: {exc}. Call a tool."}
                )
                continue
            # The history keeps the calls that ran, not the cut text: a small model copies the loop
            # that ran it into the token limit.
            run.cut_salvaged += 1
            written = json.dumps({"calls": whole})
            cut_note = (
                f"\n(Your reply was cut off at the token limit; its first {len(actions)} whole "
                f"call{'s' if len(actions) != 1 else ''} ran. Write a few calls, each once.)"
            )
        native_ids = mode == "native" and bool(reply.tool_calls)
        run.messages.append(_assistant_native(reply) if native_ids else {"role": "assistant", "content": written})
        observations, finished, fresh, answered, searched = [], False, False, len(run.answer), False
        for i, action in enumerate(actions):
            if i >= max_calls_per_step:
                text = f"Skipped: at most {max_calls_per_step} tool calls run per step."
            elif settings.read_before_finish and action.tool == FINISH and searched:
                run.early_finishes += 1
                text = (
                    "Not finished: this reply's searches have results you have not read yet. Read them, add "
                    "the nodes that answer, then finish."
                )
            else:
                text, finished_now = _execute(run, tools, action, timeline, group, settings.shown_only)
                finished = finished or finished_now
                if action.tool in (GLOBAL, NEIGHBOURS):
                    searched = True
                    key = f"{action.tool}:{json.dumps(action.args, sort_keys=True)}"
                    if key in asked:  # small models loop on one search; say so (counted)
                        run.repeated_calls += 1
                        text += (
                            f"\n(The same call as at step {asked[key]}: nothing new. Add the nodes that "
                            "answer with add_to_answer, explore another node, or finish.)"
                        )
                    else:
                        fresh = True
                    asked.setdefault(key, step)
            observations.append((action, text))
        # Progress is a new search or a new answer; re-adding the same nodes is not.
        stale = 0 if fresh or len(run.answer) > answered else stale + 1
        if native_ids:
            run.messages += [{"role": "tool", "tool_call_id": a.call_id, "content": text} for a, text in observations]
        else:
            # The question is restated under the results: a small model otherwise loses it in a
            # long history and repeats its last call.
            results = "\n\n".join(f"{a.tool} result:\n{text}" for a, text in observations)
            run.messages.append(
                {"role": "user", "content": f"{results}{cut_note}\n\nQuestion: {question}\nNext tool calls?"}
            )
        if finished:
            run.stop = "finish"
            break
        if settings.stop_repeats and stale >= settings.stop_repeats:
            run.stop = "repeats"
            break
    else:
        run.stop = "t_max"
    if not run.answer:
        picks = {
            "first": run.first_neighbours,
            "deepest": run.deepest,
            "last": run.last_results,
            "chain": rank_chains(run) if fallback == "chain" and rank_chains is not None else [],
        }
        run.fallback_from = (
            fallback if picks[fallback] else "last"
        )  # no neighbourhood search showed anything: its last results
        run.answer = list(picks[run.fallback_from])
    return run


def _execute(
    run: AgentRun, tools: GraphTools, action: Action, timeline: Timeline, group: str, shown_only: bool
) -> tuple[str, bool]:
    error = None
    with timeline.span("tool", action.tool, action.args, group=group) as ev:
        try:
            out = tools.call(action.tool, action.args, shown=set(run.seen) if shown_only else None)
            ev["outputs"] = out.text
        except ToolError as exc:
            error = ev["outputs"] = f"Error: {exc}"
    run.tool_ms.append(ev["seconds"] * 1000)
    if error is not None:
        run.tools["invalid"] += 1
        return error, False
    run.tools[action.tool] += 1
    if out.relaxed:
        run.tools["relaxed_filter"] += len(out.relaxed)
    if action.tool == GLOBAL and str(action.args.get("query", "")).strip():
        run.searches.append(str(action.args["query"]))
    if action.tool in (GLOBAL, NEIGHBOURS):
        if out.shown:
            run.last_results = out.shown
            if action.tool == NEIGHBOURS and not run.first_neighbours:
                run.first_neighbours = list(out.shown)
            _walked(run, action.tool, out)
        seen = set(run.seen)
        run.seen += [r for r in out.shown if r not in seen]
    elif action.tool == ANSWER:
        have = set(run.answer)
        for r in out.added:
            if r not in have:
                run.answer.append(r)
                have.add(r)
        run.reasons.update(out.reasons)
    return out.text, action.tool == FINISH


def _walked(run: AgentRun, tool: str, out: ToolOutput) -> None:
    """How far the agent has walked: a named node (`link`) or a global search result is a start
    (0); a neighbourhood search puts the nodes it shows for the first time one relation beyond the node it
    explored from. The search that first reaches a new farthest depth is
    `fallback: deepest`'s answer: a small agent that walks a chain and stops without answering was
    last where the chain led, while its later searches (back along a relation, a global search)
    show nothing farther."""
    if tool == GLOBAL:
        for r in out.shown:
            run.depth.setdefault(r, 0)
        return
    base = run.depth.get(out.source, 0) if out.source is not None else 0
    new = [r for r in out.shown if r not in run.depth]
    start, walked = run.chains.get(out.source, (out.source, ())) if out.source is not None else (None, ())
    for r in new:
        run.depth[r] = base + 1
        relation = out.relation.get(r)
        if start is not None and relation:
            run.chains[r] = (start, walked + ((relation, r),))
    if new and base + 1 > run.deepest_reach:
        run.deepest, run.deepest_reach = list(out.shown), base + 1


def fuse_votes(answers: list[list[int]]) -> list[tuple[int, int, int]]:
    """(row, votes, earliest position) best first: most agents first, then the earliest position
    in any agent's list, then the earlier agent (dgr.txt App. A.2)."""
    votes: Counter = Counter()
    first: dict[int, tuple[int, int]] = {}
    for a, rows in enumerate(answers):
        for pos, r in enumerate(dict.fromkeys(rows)):
            votes[r] += 1
            if r not in first or (pos, a) < first[r]:
                first[r] = (pos, a)
    order = sorted(votes, key=lambda r: (-votes[r], first[r]))
    return [(r, votes[r], first[r][0]) for r in order]
