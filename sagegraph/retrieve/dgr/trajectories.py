"""Reading what an LLM retriever did back out of a run directory: `sagegraph trace RUN_DIR QID`
prints one question's trace for a person (each DGR agent's calls, what it saw and what it added and
why; for SPARK and AF their LLM calls and tool runs), and `sagegraph dgr export-trajectories`
writes DGR's agent conversations as chat-format SFT records (dgr.txt §5: label-free distillation).

The export carries the conversations only: the system prompt, the question, the agent's tool
calls and the observations it got. No gold label, score or rank is in a record, and the only
selection offered (`only_finished`) looks at how the agent stopped, never at whether it was right.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from sagegraph.retrieve.dgr.agent import ActionError, read_text_actions
from sagegraph.retrieve.timeline import cut, format_events
from sagegraph.runfiles import read_traces, replaced, run_dirs


def _calls_of(message: dict[str, Any]) -> list[str]:
    """An assistant message's actions as `tool(args)` lines, native or JSON-mode."""
    if message.get("tool_calls"):
        return [f"{c['function']['name']}({c['function'].get('arguments') or ''})" for c in message["tool_calls"]]
    try:
        return [
            f"{a.tool}({json.dumps(a.args, ensure_ascii=False)})"
            for a in read_text_actions(message.get("content") or "")
        ]
    except ActionError as exc:
        return [f"(unreadable reply: {exc}) {str(message.get('content'))[:200]}"]


FALLBACK_FROM = {
    "last": "its last search results",
    "first": "its first neighbourhood search",
    "deepest": "the search that first reached its walk's farthest nodes, {reach} relation(s) out",
    "chain": "the nodes its walk reached, by how their relation chains read against the question",
}


def format_agent(agent: dict[str, Any], lines: int = 8) -> list[str]:
    """One agent as numbered steps: the calls it made, then each observation (cut to `lines`)."""
    head = (
        f"agent {agent['agent']} (sample {agent['sample']}): {agent['steps']} steps, stopped by {agent['stop']}, "
        f"tools {agent.get('tools', {})}, prompt tokens per step {agent.get('prompt_tokens', [])}"
    )
    out = [head]
    step = 0
    for m in agent.get("messages", [])[2:]:
        if m["role"] == "assistant":
            step += 1
            out.append(f"  step {step}:")
            out += [f"    -> {c}" for c in _calls_of(m)]
        else:
            out += [f"       {x}" for x in cut(m.get("content"), lines)]
    answer = agent.get("answer", [])
    reasons = agent.get("reasons", {})
    beyond = "; its first on a chain beyond its walk" if agent.get("fallback") and agent.get("beyond_walk") else ""
    fallback_from = FALLBACK_FROM[agent.get("fallback_from") or "last"].format(reach=agent.get("deepest_reach"))
    label = f"answer (fallback: {fallback_from}{beyond})" if agent.get("fallback") else "answer"
    out.append(f"  {label}: {answer[:20]}{' ...' if len(answer) > 20 else ''}")
    out += [f"    [{r}] {reasons[str(r)]}" for r in answer if str(r) in reasons][:20]
    return out


def format_trace(row: dict[str, Any], lines: int = 8) -> str:
    """A DGR question: each agent's steps; a question without agents as any LLM retriever's."""
    if not row.get("agents"):
        return format_events(row, lines)
    body = [f"action mode: {row.get('action_mode')}; tokens spent {row.get('budget_spent')}"]
    for agent in row["agents"]:
        body += [""] + format_agent(agent, lines)
    return format_events(row, lines, body)


def sft_records(run_dir: Path, only_finished: bool = False) -> Iterator[dict[str, Any]]:
    """One chat record per agent trajectory: `messages` as sent to the model plus the last reply,
    and `tools` when the run used function calling (so a trainer renders the same prompt)."""
    cfg_path = Path(run_dir) / "config.json"
    cfg = json.loads(cfg_path.read_text()) if cfg_path.exists() else {}
    for row in read_traces(Path(run_dir) / "traces.jsonl"):
        tools = _tool_schemas(row)
        for agent in row.get("agents") or []:
            if only_finished and agent.get("stop") != "finish":
                continue
            messages = list(agent["messages"])
            while messages and messages[-1]["role"] != "assistant":  # end on the model's turn
                messages.pop()
            if len(messages) < 3:
                continue
            rec: dict[str, Any] = {
                "messages": messages,
                "meta": {
                    "qid": row["qid"],
                    "agent": agent["agent"],
                    "sample": agent["sample"],
                    "stop": agent["stop"],
                    "steps": agent["steps"],
                    "action_mode": row.get("action_mode"),
                    "run": cfg.get("label", str(run_dir)),
                },
            }
            if tools:
                rec["tools"] = tools
            yield rec


def _tool_schemas(row: dict[str, Any]) -> list[dict[str, Any]] | None:
    return row.get("tool_schemas") or None


def export_trajectories(path: Path, out: Path, only_finished: bool = False) -> dict[str, int]:
    """Every DGR trajectory under `path` (a run or a sweep directory) as JSONL."""
    n = runs = 0
    with replaced(Path(out)) as tmp, tmp.open("w", encoding="utf-8") as fh:
        for run in run_dirs(path):
            before = n
            for rec in sft_records(run, only_finished):
                fh.write(json.dumps(rec, ensure_ascii=False) + "\n")
                n += 1
            runs += n > before
    return {"trajectories": n, "runs": runs}
