"""The oracle endpoint: a loopback OpenAI-compatible server that answers from the synthetic
questions' gold (their gold Cypher and target type), so every LLM pipeline runs offline and its
ceiling can be measured: what the rest of the pipeline makes of a perfect plan.

It is for tests and ceilings only. It is never a default, and every number it produces is labelled
"oracle" wherever it appears; quality numbers come from real model replies."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from sagegraph.corpus.questions import load_questions
from sagegraph.loopback import FakeOpenAI, completion
from sagegraph.retrieve.registry import REGISTRY, retriever_names

ORACLE_MODEL = "oracle"
_QUESTION = re.compile(r"^Question: (.+)$", re.MULTILINE)


class Oracle:
    """Finds the question a request is about, then asks each registered retriever class for the
    reply its prompt would get from a perfect model (`Retriever.oracle_reply`); a prompt no class
    claims, or a question with no gold, gets an empty reply (the method's fallback runs)."""

    def __init__(self, questions: Path | list):
        qs = load_questions(Path(questions)) if not isinstance(questions, list) else questions
        self.by_text = {q.text: q.meta for q in qs}
        self.misses = 0

    def reply(self, messages: list[dict[str, Any]]) -> str:
        last = next((str(m["content"]) for m in reversed(messages) if m.get("role") == "user"), "")
        found = _QUESTION.findall(last) or _QUESTION.findall(" ".join(str(m.get("content")) for m in messages))
        gold = self.by_text.get(found[-1].strip() if found else "")
        if gold is None:
            self.misses += 1
            return ""
        for name in retriever_names():
            if (text := REGISTRY[name].oracle_reply(messages, gold)) is not None:
                return text
        return ""

    def __call__(self, body: dict) -> tuple[int, dict]:
        return 200, completion(self.reply(body.get("messages", [])), prompt_tokens=0, completion_tokens=0)


def oracle_endpoint(questions: Path | list) -> FakeOpenAI:
    """`with oracle_endpoint(path) as server:` serves the oracle at `server.base_url`."""
    return FakeOpenAI(Oracle(questions))
