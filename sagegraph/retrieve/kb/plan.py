"""A relation plan from the model: for each entity a question names, the KB relations walked
from it to the answer, in order, each chosen from the KB's own relation names (a JSON schema whose
items are an enum of them, so the reply can only name relations the KB has). A small model reads
a question's kinship or paraphrase words ('heir', 'mom') into relations better than an encoder
reads them into a relation's name; the plan is a ranking signal over enumerated templates and
chains, never a query the model writes.

The plan is matched with a chain by the ordered overlap of their relations, walk by walk (LCS
F1), with one allowance: a model often ends a walk with the relation named like the answer's type
('country' for "which countries border X"), so a last relation that names the chain's target
type may be left out."""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from sagegraph.llm import Reply, ReplyRejected, parse_json_reply
from sagegraph.retrieve.kb.view import normalise

PLAN_SYSTEM = """You plan how to answer a question about a knowledge graph by walking its relations.
For each entity the question names, list the relations walked from that entity, in order, to reach the answer.
Choose each relation from the graph's relations: {relations}
Reply with JSON only: {{"walks": [{{"from": "<entity name>", "relations": ["<relation>", ...]}}]}}."""  # noqa: E501 - a prompt: its text is the recorded replies' key

MAX_RELATIONS = 3  # a walk's relations: the chains enumerated reach at most three hops


@dataclass
class Plan:
    """Each named entity's walk (entity slot -> relations from it, in order); empty when the reply
    could not be read or named no relation."""

    walks: dict[int, tuple[str, ...]] = field(default_factory=dict)
    unreadable: bool = False
    reply: str = ""

    def record(self) -> dict[str, Any]:
        return {"walks": {str(s): list(r) for s, r in self.walks.items()}, "unreadable": self.unreadable}


def plan_schema(relations: Sequence[str]) -> dict[str, Any]:
    return {
        "type": "object",
        "required": ["walks"],
        "properties": {
            "walks": {
                "type": "array",
                "items": {
                    "type": "object",
                    "required": ["from", "relations"],
                    "properties": {
                        "from": {"type": "string"},
                        "relations": {
                            "type": "array",
                            "items": {"enum": list(relations)},
                            "minItems": 1,
                            "maxItems": MAX_RELATIONS,
                        },
                    },
                },
            }
        },
    }


def plan_messages(question: str, names: Sequence[str], relations: Sequence[str]) -> list[dict[str, str]]:
    return [
        {"role": "system", "content": PLAN_SYSTEM.format(relations=", ".join(relations))},
        {"role": "user", "content": f"Question: {question}\nEntities: {'; '.join(names)}"},
    ]


def _slot_of(name: str, names: Sequence[str]) -> int | None:
    """The entity slot a walk starts from: its name as given, else the one name whose words hold
    the walk's or are held in them ('Ana' for 'Ana Silva')."""
    key = normalise(name)
    exact = [i for i, n in enumerate(names) if normalise(n) == key]
    if exact:
        return exact[0]
    words = set(key.split())
    near = [
        i
        for i, n in enumerate(names)
        if words and (words <= set(normalise(n).split()) or set(normalise(n).split()) <= words)
    ]
    return near[0] if len(near) == 1 else None


def read_plan(text: str, names: Sequence[str], relations: Sequence[str]) -> dict[int, tuple[str, ...]]:
    """Entity slot -> relations walked. A relation outside the KB's is dropped, a walk from no
    named entity is given to the only entity when there is one. Raises ValueError on a reply that
    is not the JSON asked for."""
    data = parse_json_reply(text)
    items = data.get("walks")
    if not isinstance(items, list):
        raise ValueError("no 'walks' list")
    known = set(relations)
    walks: dict[int, tuple[str, ...]] = {}
    for item in items:
        if not isinstance(item, dict) or not isinstance(item.get("relations"), list):
            continue
        rels = tuple(r for r in item["relations"] if isinstance(r, str) and r in known)[:MAX_RELATIONS]
        start = item.get("from")
        slot = _slot_of(start, names) if isinstance(start, str) else None
        if slot is None and len(names) == 1:
            slot = 0
        if rels and slot is not None and slot not in walks:
            walks[slot] = rels
    return walks


Chat = Callable[..., Reply]


def ask_plan(chat: Chat, question: str, names: Sequence[str], relations: Sequence[str]) -> Plan:
    """One call; a reply that cannot be read is an empty plan (the ranking is then the encoder's
    alone), counted by the caller through `unreadable`, and not cached (`accept`)."""
    if not names or not relations:
        return Plan()
    fmt = {"type": "json_object", "schema": plan_schema(relations)}
    messages = plan_messages(question, names, relations)
    try:
        reply = chat(
            "plan", messages, response_format=fmt, max_tokens=160, accept=lambda text: read_plan(text, names, relations)
        )
        return Plan(read_plan(reply.text, names, relations), reply=reply.text)
    except (ReplyRejected, ValueError, json.JSONDecodeError):  # not cached as good: asked again next run
        return Plan(unreadable=True)


def _lcs(a: Sequence[str], b: Sequence[str]) -> int:
    best = [[0] * (len(b) + 1) for _ in range(len(a) + 1)]
    for i, x in enumerate(a):
        for j, y in enumerate(b):
            best[i + 1][j + 1] = best[i][j] + 1 if x == y else max(best[i][j + 1], best[i + 1][j])
    return best[-1][-1]


def _overlap(planned: Sequence[str], walked: Sequence[str]) -> float:
    common = _lcs(planned, walked)
    return 2 * common / (len(planned) + len(walked)) if common else 0.0


_SPLIT = re.compile(r"[^a-z0-9]+")


def _words(name: str) -> set[str]:
    spaced = re.sub(r"(?<=[a-z0-9])(?=[A-Z])", " ", name).lower()
    return {w.rstrip("s") for w in _SPLIT.split(spaced) if w}


def names_type(relation: str, node_type: str) -> bool:
    """A relation named like a node type ('country' and Country): a model ends a walk with it to say
    what the answer is."""
    return bool(_words(relation)) and _words(relation) == _words(node_type)


def walk_match(planned: Sequence[str], walked: Sequence[str], target_type: str) -> float:
    score = _overlap(planned, walked)
    if len(planned) > 1 and names_type(planned[-1], target_type):
        score = max(score, _overlap(planned[:-1], walked))
    return score


def plan_match(plan: Plan, walks: dict[int, tuple[str, ...]], target_type: str) -> float:
    """How well a chain's walks (entity slot -> relations from it) follow the plan: each entity
    either names, matched walk by walk, averaged; 0 where only one of them walks from an entity."""
    slots = set(plan.walks) | set(walks)
    if not plan.walks or not slots:
        return 0.0
    total = sum(walk_match(plan.walks[s], walks[s], target_type) for s in slots if s in plan.walks and s in walks)
    return total / len(slots)
