"""GraphRAFT's constrained selection (graphraft.txt §4.3; LLM-RETRIEVERS.md §4.2): the model may
only ever produce one of the enumerated, grounded templates.

The public code runs Hugging Face beam search with a logits processor that allows only the next
tokens of candidate queries, prompting a fine-tuned model with the question alone. Substitutes:

- `grammar`: the question and the entity parameters in the prompt, the candidates only in the
  decoding grammar (a JSON schema whose `query` is an enum of the candidate strings, which llama.cpp
  servers compile to a GBNF alternation). The model never sees the list, as in the paper; top-m by
  asking again with the earlier picks excluded.
- `score`: every candidate's exact teacher-forced log-probability as the reply to that prompt,
  by a local model (`sagegraph.local_model.SequenceScorer`), best first: the exact top-m that the
  paper's beam search approximates; `length_norm` divides by the tokens, as Hugging Face's beam
  search ranks finished sequences by default (length_penalty 1.0).
- `similar` (no model, not the paper's): candidates by the cosine similarity of their relation
  chains in words (`Template.phrase`) to the question with the template's entity names taken
  out, weighted by how surely those entities were resolved, using the graph's own text encoder:
  a training-free stand-in for the fine-tuned selector that reads relation names as the KB has
  them.
- `listed`: the candidates numbered in the prompt, the model picks m of them (a schema-constrained
  list of numbers). This is zero-shot selection, a different method from the paper's decoder, and
  is named so in results; it is what an API model without grammars can do.

Either way a reply is checked against the candidates: one that is not among them (an endpoint
that ignores the grammar, a model that invents a query) is never executed; it is counted and the
remaining picks come from the no-model order (`prior_order`).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal

from sagegraph.llm import Reply, parse_json_reply
from sagegraph.retrieve.graphraft.templates import Template
from sagegraph.retrieve.kb.entities import Entity, entity_slots

Selector = Literal["score", "grammar", "listed", "similar", "prior"]
Score = Callable[
    [list[dict[str, str]], list[str]], list[tuple[float, int]]
]  # (messages, replies) -> (log-prob, tokens) each
Chat = Callable[..., Reply]  # chat(step name, messages, response_format=..., max_tokens=...)
Similarity = Callable[[list[Template]], list[float]]  # templates -> how well each reads as the question

SELECT_SYSTEM = """You translate a question about a knowledge graph into one Cypher query that returns the nodes answering it.
The question's entities are already resolved to nodes; the query refers to them by parameter ($e0, $e1, ...).
Reply with JSON only: {"query": "<the Cypher query>"}."""  # noqa: E501 - a prompt: its text is the recorded replies' key

LISTED_SYSTEM = """You choose which Cypher queries over a knowledge graph return the nodes answering a question.
The question's entities are already resolved to nodes; the queries refer to them by parameter ($e0, $e1, ...).
Each candidate is shown with the number of nodes it returns. Choose up to {m}, best first.
Reply with JSON only: {{"choices": [numbers]}}."""


def entity_lines(entities: list[Entity], view) -> str:
    """'$e0 = Person "Ana Silva"' per entity slot, numbered as the templates number them."""
    lines = []
    for i, e in enumerate(entity_slots(entities)):
        more = f" ({len(e.rows)} nodes of this name)" if len(e.rows) > 1 else ""
        lines.append(f'$e{i} = {view.graph.types[e.row]} "{view.names[e.row]}"{more}')
    return "\n".join(lines)


def grammar_messages(question: str, entities_text: str) -> list[dict[str, str]]:
    """The `grammar` selector's prompt: the question and entity parameters, no candidates (also
    the prompt of the fine-tuning records, so a tuned model is asked as it was taught)."""
    return [
        {"role": "system", "content": SELECT_SYSTEM},
        {"role": "user", "content": f"Question: {question}\nEntities:\n{entities_text}"},
    ]


def prior_order(templates: list[Template]) -> list[int]:
    """Without a model: paths between two named entities first (they use both), then 1-hop, then
    2-hop, each by fewest results (the most specific); enumeration order breaks ties."""
    rank = {"path": 0, "1hop": 1, "2hop": 2, "3hop": 3}
    return sorted(range(len(templates)), key=lambda i: (rank[templates[i].kind], templates[i].count, i))


@dataclass
class Selection:
    order: list[int] = field(default_factory=list)  # indices into the candidates, best first
    calls: int = 0
    ungrounded: int = 0  # replies that were not one of the candidates (never executed)
    unreadable: int = 0
    from_prior: int = 0  # picks that came from the no-model order
    replies: list[str] = field(default_factory=list)

    def record(self) -> dict[str, Any]:
        return {
            "order": self.order,
            "calls": self.calls,
            "ungrounded": self.ungrounded,
            "unreadable": self.unreadable,
            "from_prior": self.from_prior,
            "replies": self.replies,
        }


Enough = Callable[[list[int]], bool]  # the picks so far already cover what will be used


def _never(order: list[int]) -> bool:
    return False


def _fill(sel: Selection, templates: list[Template], m: int, enough: Enough = _never) -> Selection:
    for i in prior_order(templates):
        if len(sel.order) >= m or enough(sel.order):
            break
        if i not in sel.order:
            sel.order.append(i)
            sel.from_prior += 1
    return sel


def select_grammar(
    chat: Chat,
    question: str,
    entities_text: str,
    templates: list[Template],
    m: int,
    enough: Enough = _never,
    max_tokens: int = 256,
) -> Selection:
    """Top-m by asking again with the earlier picks left out of the grammar; stops early once
    `enough` says the picks already fill the results (no call is paid for a template never run)."""
    sel = Selection()
    texts = [t.cypher() for t in templates]
    index = {t: i for i, t in enumerate(texts)}
    messages = grammar_messages(question, entities_text)
    while len(sel.order) < min(m, len(templates)) and not enough(sel.order):
        left = [t for i, t in enumerate(texts) if i not in sel.order]
        if len(left) == 1:
            sel.order.append(index[left[0]])  # nothing left to choose
            continue
        schema = {"type": "object", "required": ["query"], "properties": {"query": {"enum": left}}}
        reply = chat(
            f"select {len(sel.order) + 1}",
            messages,
            response_format={"type": "json_object", "schema": schema},
            max_tokens=max_tokens,
        )
        sel.calls += 1
        sel.replies.append(reply.text)
        try:
            q = parse_json_reply(reply.text).get("query")
        except (ValueError, json.JSONDecodeError):
            sel.unreadable += 1
            break
        if not isinstance(q, str) or q.strip() not in index or index[q.strip()] in sel.order:
            sel.ungrounded += 1
            break
        sel.order.append(index[q.strip()])
    return _fill(sel, templates, m, enough)


def select_score(
    score: Score, question: str, entities_text: str, templates: list[Template], m: int, length_norm: bool = True
) -> Selection:
    sel = Selection(calls=1)
    scored = score(grammar_messages(question, entities_text), [json.dumps({"query": t.cypher()}) for t in templates])
    value = [lp / max(1, n) if length_norm else lp for lp, n in scored]
    rank = {i: r for r, i in enumerate(prior_order(templates))}
    order = sorted(range(len(templates)), key=lambda i: (-value[i], rank[i]))
    sel.order = order[:m]
    sel.replies = [f"{value[i]:.4f} {templates[i].cypher()}" for i in order[:10]]
    return sel


def select_similar(similarity: Similarity, templates: list[Template], m: int) -> Selection:
    """Top-m by phrase similarity. Of phrases that read the same (a relation between nodes of one
    type walked either way: `children` to X's children, and back to X's parents), those walking
    more relations their stored way first, since a relation's name reads from the node it leaves
    (X -[:children]-> Y: Y is X's child; X -[:child_of]-> Y: X is Y's child); then the no-model
    order."""
    read = similarity(templates)
    rank = {i: r for r, i in enumerate(prior_order(templates))}
    stored_way = [sum(hop.out for hop in t.hops) for t in templates]
    order = sorted(range(len(templates)), key=lambda i: (-read[i], -stored_way[i], rank[i]))
    return Selection(order=order[:m], replies=[f"{read[i]:.4f} {templates[i].phrase()}" for i in order[:10]])


def listed_prompt(templates: list[Template]) -> str:
    return "\n".join(f"[{i}] {t.cypher()}  ({t.count} nodes)" for i, t in enumerate(templates))


def select_listed(
    chat: Chat,
    question: str,
    entities_text: str,
    templates: list[Template],
    m: int,
    enough: Enough = _never,
    max_tokens: int = 128,
) -> Selection:
    sel = Selection()
    messages = [
        {"role": "system", "content": LISTED_SYSTEM.format(m=m)},
        {
            "role": "user",
            "content": f"Question: {question}\nEntities:\n{entities_text}\n\nCandidates:\n{listed_prompt(templates)}",
        },
    ]
    schema = {
        "type": "object",
        "required": ["choices"],
        "properties": {"choices": {"type": "array", "items": {"enum": list(range(len(templates)))}}},
    }
    reply = chat(
        "select (listed)", messages, response_format={"type": "json_object", "schema": schema}, max_tokens=max_tokens
    )
    sel.calls = 1
    sel.replies.append(reply.text)
    try:
        picks = parse_json_reply(reply.text).get("choices")
    except (ValueError, json.JSONDecodeError):
        sel.unreadable += 1
        return _fill(sel, templates, m, enough)
    for p in picks if isinstance(picks, list) else []:
        if isinstance(p, bool) or not isinstance(p, int) or not 0 <= p < len(templates):
            sel.ungrounded += 1
        elif p not in sel.order and len(sel.order) < m:
            sel.order.append(p)
    return _fill(sel, templates, m, enough)


def select(
    selector: Selector,
    chat: Chat | None,
    question: str,
    entities_text: str,
    templates: list[Template],
    m: int,
    enough: Enough = _never,
    score: Score | None = None,
    length_norm: bool = True,
    similarity: Similarity | None = None,
) -> Selection:
    if not templates:
        return Selection()
    if selector == "similar" and similarity is not None:
        return select_similar(similarity, templates, m)
    if selector == "score" and score is not None:
        return select_score(score, question, entities_text, templates, m, length_norm)
    if selector == "prior" or chat is None:
        return _fill(Selection(), templates, m, enough)
    if selector == "listed":
        return select_listed(chat, question, entities_text, templates, m, enough)
    return select_grammar(chat, question, entities_text, templates, m, enough)
