"""What an LLM retriever did for one query, as timed events: LLM calls, Cypher runs, tool calls.

The events are plain dicts in the query's trace (traces.jsonl), so a run directory alone says what
happened; `sagegraph.tracking` turns them into MLflow trace spans afterwards (a CHAT_MODEL span per
LLM call with its token usage, a TOOL span per Cypher or tool call, an AGENT span per `group`).
Recording after the fact keeps MLflow out of the retrieval path and makes logging resumable.
"""

from __future__ import annotations

import contextlib
import json
import time
from collections.abc import Iterator
from typing import Any

from sagegraph.llm import Reply


class Timeline:
    def __init__(self) -> None:
        self.events: list[dict[str, Any]] = []

    @contextlib.contextmanager
    def span(self, kind: str, name: str, inputs: Any = None, group: str | None = None) -> Iterator[dict[str, Any]]:
        """Times the block; an exception is recorded on the event and re-raised."""
        ev: dict[str, Any] = {"kind": kind, "name": name, "start": time.time(), "inputs": inputs}
        if group:
            ev["group"] = group
        t0 = time.perf_counter()
        try:
            yield ev
        except Exception as exc:
            ev["error"] = f"{type(exc).__name__}: {str(exc)[:300]}"
            key = getattr(exc, "key", None)
            if key:  # a refusal is recorded in the reply cache like a reply
                ev["key"] = key
            raise
        finally:
            ev["seconds"] = round(time.perf_counter() - t0, 4)
            self.events.append(ev)

    @staticmethod
    def reply(ev: dict[str, Any], r: Reply) -> None:
        """An LLM call's outcome: reply, tool calls, tokens, cache key (for `sagegraph llm export`)."""
        ev.update(
            {
                "outputs": r.text,
                "key": r.key,
                "cached": r.cached,
                "tokens": {"input": r.prompt_tokens, "output": r.completion_tokens},
            }
        )
        if r.tool_calls:
            ev["tool_calls"] = r.tool_calls


def llm_keys(trace: dict[str, Any]) -> list[str]:
    """The reply-cache keys of a query's LLM calls, in order."""
    return [e["key"] for e in trace.get("events", []) if e.get("kind") == "llm" and e.get("key")]


def cut(text: Any, lines: int, width: int = 160) -> list[str]:
    """Text as at most `lines` lines of at most `width` characters, saying how much was left out."""
    out = []
    for line in str(text if text is not None else "").splitlines() or [""]:
        out.append(line if len(line) <= width else line[: width - 3] + "...")
    return out if len(out) <= lines else out[:lines] + [f"... ({len(out) - lines} more lines)"]


def format_events(row: dict[str, Any], lines: int = 8, body: list[str] | None = None) -> str:
    """One traced question as text: its head, then `body` (a method's own account) or its timed
    events (each LLM call, Cypher run and tool call with inputs and outputs), then its top results."""
    out = [
        f"question {row['qid']}: {row.get('question', '')}",
        f"latency {row.get('latency_ms', 0) / 1000:.1f} s; counters {row.get('counters', {})}",
    ]
    if body is not None:
        out += body
    else:
        for e in row.get("events", []):
            out.append(
                f"[{e['kind']}] {e['name']} ({e.get('seconds', 0):.2f} s)"
                + (f" ERROR {e['error']}" if e.get("error") else "")
            )
            if e["kind"] != "llm":
                out += [f"    in:  {x}" for x in cut(json.dumps(e.get("inputs"), ensure_ascii=False, default=str), 2)]
            out += [f"    out: {x}" for x in cut(e.get("outputs"), lines)]
    out += ["", "top: " + ", ".join(map(str, row.get("top", [])))]
    return "\n".join(out)
