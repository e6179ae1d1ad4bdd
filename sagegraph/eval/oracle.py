"""The oracle endpoint: a loopback OpenAI-compatible server that answers from the synthetic
questions' gold (their gold Cypher and target type), so every LLM pipeline runs offline and its
ceiling can be measured: what the rest of the pipeline makes of a perfect plan.

It is for tests and ceilings only. It is never a default, and every number it produces is labelled
"oracle" wherever it appears; quality numbers come from real model replies."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from sagegraph.corpus.questions import load_questions
from sagegraph.loopback import FakeOpenAI, completion
from sagegraph.retrieve.af.parse import return_names

ORACLE_MODEL = "oracle"
# How the oracle tells AF-Retriever's prompts apart (their fixed wording, sagegraph.retrieve.af).
AF_TYPE_PROMPT = "Which type are the nodes it asks for?"
AF_CYPHER_PROMPT = "Write one Cypher query that captures what the question below asks."
AF_RERANK_MARK = "candidate answer"
_QUESTION = re.compile(r"^Question: (.+)$", re.MULTILINE)


class Oracle:
    def __init__(self, questions: Path | list):
        qs = load_questions(Path(questions)) if not isinstance(questions, list) else questions
        self.by_text = {q.text: q.meta for q in qs}
        self.misses = 0

    def plan_for(self, question: str) -> dict[str, Any]:
        meta = self.by_text.get(question)
        if meta is None:
            self.misses += 1
            return {"target": None, "cypher": None, "vector": []}
        return {"target": meta.get("target_type"), "cypher": meta.get("gold_cypher"), "vector": [], "combine": "intersect"}

    def af_reply(self, question: str, prompt: str) -> str:
        """AF's step 1 (the gold target type) and step 2 (the gold Cypher, returning the answer's
        name as AF asks); rerank prompts get no usable answer, so reranking keeps the order."""
        meta = self.by_text.get(question)
        if meta is None:
            self.misses += 1
            return ""
        if AF_TYPE_PROMPT in prompt:
            return str(meta.get("target_type") or "")
        if AF_CYPHER_PROMPT in prompt:
            return return_names(meta.get("gold_cypher") or "")
        return ""

    def __call__(self, body: dict) -> tuple[int, dict]:
        last = next((m["content"] for m in reversed(body.get("messages", [])) if m.get("role") == "user"), "")
        found = _QUESTION.findall(last) or _QUESTION.findall(" ".join(str(m.get("content")) for m in body.get("messages", [])))
        question = found[-1].strip() if found else ""
        if AF_TYPE_PROMPT in last or AF_CYPHER_PROMPT in last or AF_RERANK_MARK in last:
            return 200, completion(self.af_reply(question, last), prompt_tokens=0, completion_tokens=0)
        return 200, completion(json.dumps(self.plan_for(question)), prompt_tokens=0, completion_tokens=0)


def oracle_endpoint(questions: Path | list) -> FakeOpenAI:
    """`with oracle_endpoint(path) as server:` serves the oracle at `server.base_url`."""
    return FakeOpenAI(Oracle(questions))
