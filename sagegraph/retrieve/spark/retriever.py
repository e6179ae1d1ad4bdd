"""SPARK (sage.txt §2.2, App. C.7, App. H): one LLM call plans the retrieval over the KB schema,
mixing semantic searches and one read-only Cypher query; the plan runs; its result set is ranked
by the hybrid score and filled from hybrid over the target label to k.

What we follow and where we depart (LLM-RETRIEVERS.md §1):
- one planning call returning a JSON plan validated by pydantic, not generated Python run in a
  subprocess (the public code's path, up to 3 calls);
- at most one repair call, only for Cypher the engine cannot parse or plan, fed its error text;
- the fallback is hybrid retrieval, taken when the plan is unparseable, empty, refused by the
  read-only guard, or fails to run; it never looks at gold labels (the public evaluator falls back
  on a question's gold recall and reruns low-recall questions; we do neither);
- the trace says whether the executed Cypher traverses a relationship, which SAGE's `-edge`
  policy uses to skip expansion.
"""

from __future__ import annotations

import json
import re
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from sagegraph.errors import CypherInvalid, QueryStopped, ReadOnlyViolation, StoreError, StoreUnavailable
from sagegraph.llm import LLMRequestRefused, Reply, parse_json_reply, usage_scope
from sagegraph.retrieve.base import Resources, Retrieval, Retriever
from sagegraph.retrieve.flat import HybridRetriever
from sagegraph.retrieve.kb.entities import linked_rows
from sagegraph.retrieve.kb.feedback import empty_result_feedback
from sagegraph.retrieve.kb.grounding import (
    KBSchema,
    count_repairs,
    ground_counters,
    ground_query,
    text_conditions,
    text_relaxed,
    undirected,
    view_schema,
)
from sagegraph.retrieve.kb.lengthen import lengthened
from sagegraph.retrieve.kb.schema_card import kb_only, load_hints, node_literal, pattern_examples, schema_card
from sagegraph.retrieve.kb.view import kb_view
from sagegraph.retrieve.registry import register
from sagegraph.retrieve.spark.params import SparkParams
from sagegraph.retrieve.timeline import Timeline
from sagegraph.store.readonly import Token, render, tokenize

# Grounding in the KB is on by default: the card's stored instances and the question's linked names
# change the prompt, the repairs change what runs. The paper's SPARK: `card_examples: false, link:
# false, ground: false, card_similarity: true, semantic_text: false, named_last: false, repair_empty: false`.
PROMPT_VERSION = "spark-8"  # the run key: bumped when what runs changes, the prompt included

SYSTEM = """You plan how to find the answers to a question in a graph database.
Reply with one JSON object and nothing else:
{"target": "<label of the answer nodes>",
 "cypher": "<one read-only Cypher query returning the answer ids as `id`, or null>",
 "vector": [{"label": "<label>", "field": "content" or "name", "text": "<what to look for>", "k": <1-100>}],
 "combine": "intersect" or "union"}
How to plan: name the entities the question mentions, the relationships that lead from them to
the answer, and the constraints on properties. Put exact names, relationships and property
filters into the Cypher query. Use `vector` searches for what the question describes in words
rather than names (themes, topics, descriptions); leave it empty when Cypher says everything.
`combine` says how Cypher results and vector results meet. Use only the labels, relationship
types and properties of the schema; match names exactly ({name: 'X'}), text with
toLower(n.property) CONTAINS 'word'; end with RETURN DISTINCT n.id AS id."""

REPAIR = """The database could not run that Cypher query:
{error}
Reply with the corrected JSON plan (same format), changing only what the error requires."""

EMPTY = """That Cypher query ran and found nothing.
{feedback}
Reply with the corrected JSON plan (same format), using only relationships the KB holds."""

_RELATIONSHIP = re.compile(r"-\s*\[|\]\s*-|<-|->|--")
_STRINGS = re.compile(r"'(?:\\.|[^'\\])*'|\"(?:\\.|[^\"\\])*\"")


class VectorStep(BaseModel):
    model_config = ConfigDict(extra="ignore")
    label: str | None = None
    field: str = "content"
    text: str
    k: int = Field(20, ge=1, le=200)


class Plan(BaseModel):
    model_config = ConfigDict(extra="ignore")
    target: str | None = None
    cypher: str | None = None
    vector: list[VectorStep] = Field(default_factory=list)
    combine: Literal["intersect", "union"] = "intersect"


def traverses_edges(cypher: str) -> bool:
    """Does the query match a relationship pattern? (string literals cannot fool it)"""
    return bool(_RELATIONSHIP.search(_STRINGS.sub("''", cypher)))


def parse_plan(text: str) -> Plan:
    obj = parse_json_reply(text)
    if isinstance(obj.get("vector"), dict):
        obj["vector"] = [obj["vector"]]
    if isinstance(obj.get("cypher"), str) and not obj["cypher"].strip():
        obj["cypher"] = None
    return Plan.model_validate(obj)


def answer_values(rows: list[dict[str, Any]]) -> list[Any]:
    """The ids in a result: the first column of each row; a node stands for its id; lists flatten."""
    out: list[Any] = []
    for row in rows:
        if not row:
            continue
        v = row.get("id", next(iter(row.values())))
        for x in v if isinstance(v, list) else [v]:
            if isinstance(x, dict):
                x = x.get("id")
            if x is not None:
                out.append(x)
    return out


_KEYWORDS = {"DISTINCT", "LIMIT", "SKIP", "ORDER", "AS", "UNION", "CALL"}


def ids_returned(query: str) -> str:
    """The query returning its answers' ids where it returns one whole node (`RETURN x`, `RETURN
    DISTINCT x`, with or without a LIMIT): SPARK reads a node as its id (`answer_values`), and a
    store sends a hub's thousands of whole nodes far slower than their ids (2,000 from a PRIME
    hub: 0.5-2.3 s against 0.03-0.08 s). Any other query (one that orders, aggregates, returns more
    or joins parts by UNION) runs as written."""
    try:
        tokens = tokenize(query)
    except ReadOnlyViolation:  # the guard refuses it with its reason
        return query
    code = [(at, token) for at, token in enumerate(tokens) if token.kind != "ws"]
    while code and code[-1][1].text == ";":
        code.pop()
    words = [token.word for _, token in code]
    if words.count("RETURN") != 1 or "UNION" in words:
        return query
    start = words.index("RETURN") + 1
    item = start + int(start < len(code) and words[start] == "DISTINCT")
    tail = code[item + 1 :]
    if item >= len(code) or code[item][1].kind != "name" or words[item] in _KEYWORDS:
        return query
    if tail and not (len(tail) == 2 and tail[0][1].word == "LIMIT" and tail[1][1].kind == "number"):
        return query
    name = code[item][1].text
    opens_node = any(
        code[k][1].text == "(" and code[k + 1][1].text == name and code[k + 2][1].text in (":", ")", "{")
        for k in range(len(code) - 2)
    )
    if not opens_node:
        return query
    tokens[code[item][0]] = Token("name", f"{name}.id AS id", f"{name}.id AS id")
    return render(tokens)


def _store_refused(query: str, exc: StoreError, trace: dict, counters: dict) -> None:
    """A query SPARK wrote itself (a repair of the model's) that the store refused or stopped at a
    bound: the question keeps what it had, and the diagnostics say so."""
    counters["repair_store_errors"] += 1
    trace.setdefault("repair_store_errors", []).append({"query": query, "error": str(exc)[:300]})


@register("spark")
class SparkRetriever(Retriever[SparkParams]):
    uses_llm = True
    prompt_version = PROMPT_VERSION
    Params = SparkParams

    @classmethod
    def miss_kind(cls, trace: dict[str, Any], gold_type: str | None, relations: int | None) -> str:
        from sagegraph.retrieve.spark.diagnostics import miss_kind

        return miss_kind(trace, gold_type, relations)

    @classmethod
    def prepare(cls, graph, params: SparkParams) -> list[str]:
        """`semantic_text` reads the sentence vectors of the graph's long texts (minutes to build on
        a large KB: 242 s for the synthetic KB's 8,000 films on two cores)."""
        if not params.execution.semantic_text:
            return []
        _ = graph.passages
        return ["sentence vectors"]

    @classmethod
    def oracle_reply(cls, messages: list[dict[str, Any]], gold: dict[str, Any]) -> str | None:
        """The plan a perfect model would write: the gold target type and the gold Cypher."""
        if not messages or messages[0].get("content") != SYSTEM:
            return None
        return json.dumps(
            {"target": gold.get("target_type"), "cypher": gold.get("gold_cypher"), "vector": [], "combine": "intersect"}
        )

    def __init__(self, res: Resources, params: SparkParams):
        super().__init__(res, params)
        self.hybrid = HybridRetriever.over(res, alpha=params.answer.alpha)
        self._card: str | None = None
        self._card_lock = threading.Lock()
        self._patterns: set[tuple[str, str, str]] = set()
        self._kb_schema: KBSchema | None = None

    @property
    def card(self) -> str:
        """The schema card, introspected once per retriever (questions run on a pool share it)."""
        with self._card_lock:
            if self._card is None:
                schema = self.res.store.introspect()
                if not self.params.plan.card_similarity:
                    schema = kb_only(schema)
                examples = pattern_examples(self.res.store, schema.patterns) if self.params.plan.card_examples else None
                self._card = schema_card(
                    schema, load_hints(self.params.plan.hints or self._default_hints()), examples=examples
                )
                self._patterns = set(schema.patterns)
            return self._card

    def kb_schema(self) -> KBSchema:
        """The stored patterns and the labels holding each name, for `ground_query`; made once
        (questions on a pool may make it twice at first, the same both times)."""
        if self._kb_schema is None:
            _ = self.card
            self._kb_schema = view_schema(kb_view(self.graph), self._patterns)
        return self._kb_schema

    def linked_rows(self, question: str) -> list[tuple[str, int]]:
        """(span, row) for the KB nodes (at most 3 a span) whose name the question holds."""
        return linked_rows(kb_view(self.graph), question)

    def linked(self, question: str, rows: list[tuple[str, int]] | None = None) -> list[str]:
        """`'span' is (:Label {name: 'Stored Name'})` for every KB name found in the question
        (`rows`: its `linked_rows`, when the caller has them)."""
        view = kb_view(self.graph)
        rows = self.linked_rows(question) if rows is None else rows
        return [f"'{span}' is {node_literal(str(self.graph.types[r]), view.fields[r])}" for span, r in rows]

    def relation_chooser(self, question: str):
        """The relationship type, of several, whose name reads closest to the question under the
        graph's encoder (`ACTED_IN` as "acted in")."""
        q = self.graph.query_vector(question)

        def choose(types: list[str]) -> str:
            return max(types, key=lambda t: float(self.graph.query_vector(t.replace("_", " ").lower()) @ q))

        return choose

    def _default_hints(self) -> Path | None:
        corpus = (self.graph.manifest.get("config") or {}).get("corpus") or {}
        if corpus.get("kind") == "kb" and corpus.get("path"):
            path = Path(corpus["path"]) / "hints.yaml"
            return path if path.exists() else None
        return None

    def messages(self, question: str, rows: list[tuple[str, int]] | None = None) -> list[dict[str, str]]:
        linked = self.linked(question, rows) if self.params.plan.link else []
        names = (
            ("\n\nNames in the question found in the graph:\n" + "\n".join(f"  {x}" for x in linked)) if linked else ""
        )
        return [
            {"role": "system", "content": SYSTEM},
            {"role": "user", "content": f"Schema:\n{self.card}{names}\n\nQuestion: {question}"},
        ]

    def _search(self, query: str, k: int) -> Retrieval:
        with usage_scope() as usage:
            r = self._plan_and_run(query, k)
        r.usage = usage.as_dict()
        return r

    def _plan_and_run(self, query: str, k: int) -> Retrieval:
        counters = {
            "plan_parsed": 0,
            "fallback": 0,
            "cypher_ran": 0,
            "cypher_rejected": 0,
            "cypher_invalid": 0,
            "cypher_error": 0,
            "cypher_empty": 0,
            "cypher_stopped": 0,
            "repair_store_errors": 0,
            "repair_calls": 0,
            "empty_feedback": 0,
            "llm_refused": 0,
            "text_ranked": 0,
        }
        if self.params.execution.ground:
            counters.update(ground_counters())
        timeline = Timeline()
        trace: dict[str, Any] = {"counters": counters, "events": timeline.events}
        linked = self.linked_rows(query)  # once a question: the prompt, the repairs and the order read it
        messages = self.messages(query, linked)
        try:
            with timeline.span("llm", "plan", messages) as ev:
                reply = self.res.llm.chat(messages, response_format={"type": "json_object"})
                timeline.reply(ev, reply)
        except LLMRequestRefused as exc:
            counters["llm_refused"] = 1
            return self._fallback(query, k, None, trace, f"LLM refused the request: {exc}")
        try:
            plan = parse_plan(reply.text)
        except (ValueError, ValidationError) as exc:
            return self._fallback(query, k, None, trace, f"unparseable plan: {str(exc)[:200]}")
        counters["plan_parsed"] = 1
        trace["plan"] = plan.model_dump()
        target = plan.target if plan.target in self.graph.node_types() else None
        cypher_rows: np.ndarray | None = None
        if plan.cypher:
            cypher_rows, plan = self._run_cypher(plan, messages, reply, trace, counters, timeline, query, linked)
            target = plan.target if plan.target in self.graph.node_types() else target
        vector_rows = [self._vector(step, target) for step in plan.vector]
        found = self._combine(cypher_rows, vector_rows, plan.combine)
        trace["result_rows"] = int(len(found))
        if len(found) == 0:
            return self._fallback(query, k, target, trace, "the plan found nothing")
        depth = k + len(linked) if self.params.answer.named_last else k
        if trace.get("text_words"):
            ranked = self._by_words(trace["text_words"], found, depth)
        else:
            ranked = self.hybrid.search_within(
                query, found, depth, label="cypher" if cypher_rows is not None and len(cypher_rows) else "vector"
            )
        idx, scores, how = list(ranked.idx), list(1.0 + ranked.scores), list(ranked.found_by)
        if self.params.answer.named_last:
            idx, scores, how = self._named_last(linked, idx, scores, how, k, trace)
        if self.params.answer.fill and len(idx) < k:
            pool = self.graph.rows_of_type(target)
            pool = pool[~np.isin(pool, found)]
            extra = self.hybrid.search_within(query, pool, k - len(idx), label="fill")
            idx += list(extra.idx)
            scores += list(extra.scores * 0.999)
            how += list(extra.found_by)
        trace["target"] = target
        trace["edge_constrained"] = bool(
            trace.get("cypher_executed")
            and traverses_edges(trace["cypher_executed"])
            and cypher_rows is not None
            and len(cypher_rows)
        )
        return Retrieval(np.array(idx, dtype=np.int64), np.array(scores, dtype=np.float32), how, trace)

    def _by_words(self, words: list[str], rows: np.ndarray, k: int) -> Retrieval:
        """Rows ranked by the sum over the text conditions' words of each row's closest sentence."""
        score = np.sum([self.graph.sentence_scores(w, rows) for w in words], axis=0)
        top = np.lexsort((rows, -score))[:k]
        return Retrieval(rows[top], (score[top] / len(words)).astype(np.float32), ["cypher (sentences)"] * len(top), {})

    @staticmethod
    def _named_last(
        linked: list[tuple[str, int]], idx: list, scores: list, how: list, k: int, trace: dict
    ) -> tuple[list, list, list]:
        """The results the question names (`linked`) moved after the others (scores kept below theirs)."""
        named = {r for _, r in linked}
        keep = [i for i, x in enumerate(idx) if int(x) not in named]
        moved = [i for i, x in enumerate(idx) if int(x) in named]
        if not moved or not keep:
            return idx[:k], scores[:k], how[:k]
        trace["named_last"] = len(moved)
        floor = min(scores[i] for i in keep)
        order = keep + moved
        return (
            [idx[i] for i in order][:k],
            [scores[i] if i in keep else floor - 1e-3 * (n + 1) for n, i in enumerate(order)][:k],
            [how[i] for i in order][:k],
        )

    def _run_cypher(
        self,
        plan: Plan,
        messages: list[dict[str, str]],
        reply: Reply,
        trace: dict,
        counters: dict,
        timeline: Timeline,
        question: str = "",
        linked: Sequence[tuple[str, int]] = (),
    ) -> tuple[np.ndarray | None, Plan]:
        for attempt in range(2):
            query = plan.cypher or ""
            if self.params.execution.ground:
                query = self._ground(query, plan.target, trace, counters, question, linked)
            try:
                with timeline.span("cypher", "cypher" if attempt == 0 else "cypher (repaired)", {"query": query}) as ev:
                    rows, truncated = self._read_answers(query)
                    ev["outputs"] = {"rows": len(rows), "truncated": truncated}
            except StoreUnavailable:
                raise
            except ReadOnlyViolation as exc:
                counters["cypher_rejected"] = 1
                trace["cypher_error"] = f"refused: {exc}"
                return None, plan
            except CypherInvalid as exc:
                counters["cypher_invalid"] += 1
                trace["cypher_error"] = str(exc)[:500]
                if attempt == 0 and self.params.plan.repair:
                    follow = REPAIR.format(error=str(exc)[:800])
                    repaired = self._repair(messages, reply.text, follow, trace, counters, timeline)
                    if repaired is not None and repaired.cypher:
                        plan = repaired
                        continue
                return None, plan
            except StoreError as exc:  # timeouts, runtime errors
                counters["cypher_error"] = 1
                trace["cypher_error"] = str(exc)[:500]
                if isinstance(exc, QueryStopped):  # the reply wrote a query past the store's bounds
                    counters["cypher_stopped"] = 1
                    self.res.llm.discredit(trace.get("repair_key") if attempt else reply.key)
                return None, plan
            counters["cypher_ran"] = 1
            trace["cypher_executed"] = query
            trace["cypher_rows"] = len(rows)
            trace["cypher_truncated"] = truncated
            found = self.graph.rows_for_ids(answer_values(rows))
            if len(found) and self.params.execution.ground and self.params.execution.lengthen:
                found = self._lengthened(query, found, trace, counters, timeline, question)
            if len(found) == 0 and self.params.execution.ground:
                found = self._either_way(query, trace, counters, timeline)
            if len(found) == 0 and self.params.execution.semantic_text:
                found = self._by_sentences(query, plan.target, trace, counters)
            if len(found) == 0 and attempt == 0 and self.params.plan.repair_empty:
                said = empty_result_feedback(query, self.kb_schema(), kb_view(self.graph), [row for _, row in linked])
                if said is not None:
                    counters["empty_feedback"] = 1
                    trace["empty_feedback"] = said
                    follow = EMPTY.format(feedback=said)
                    repaired = self._repair(messages, reply.text, follow, trace, counters, timeline)
                    if repaired is not None and repaired.cypher:
                        plan = repaired
                        continue
            if len(found) == 0:
                counters["cypher_empty"] = 1
            return found, plan
        return None, plan

    def _lengthened(
        self, query: str, found: np.ndarray, trace: dict, counters: dict, timeline: Timeline, question: str
    ) -> np.ndarray:
        """The query's nodes, or, where the question says a relation more than the query walks
        (`lengthen`), the nodes of the query lengthened by it, if it finds any."""
        longer, repairs = lengthened(
            query, self.kb_schema(), question, self.graph.exact_vectors, self.params.execution.lengthen_margin
        )
        if not repairs:
            return found
        try:
            with timeline.span("cypher", "cypher (lengthened)", {"query": longer}) as ev:
                rows, truncated = self._read_answers(longer)
                ev["outputs"] = {"rows": len(rows), "truncated": truncated}
        except StoreUnavailable:
            raise
        except StoreError as exc:
            _store_refused(longer, exc, trace, counters)
            return found
        more = self.graph.rows_for_ids(answer_values(rows))
        if not len(more):
            return found
        trace.setdefault("cypher_model", []).append(query)
        trace.setdefault("repairs", []).extend(count_repairs(repairs, counters))
        trace["cypher_executed"], trace["cypher_rows"], trace["cypher_truncated"] = longer, len(rows), truncated
        return more

    def _read_answers(self, query: str) -> tuple[list[dict[str, Any]], bool]:
        """The query run as untrusted Cypher within the execution bounds, asking for ids where it
        returns whole nodes (`ids_returned`)."""
        return self.res.store.read_untrusted(
            ids_returned(query), timeout_ms=self.params.execution.timeout_ms, max_rows=self.params.execution.max_rows
        )

    def _either_way(self, query: str, trace: dict, counters: dict, timeline: Timeline) -> np.ndarray:
        """The grounded query found nothing: run it again with its relationships undirected, then
        with its text conditions relaxed, then both (no model call); the first that finds something
        is the plan's result, counted and in the trace."""
        either, turned = undirected(query)
        relaxed, loosened = text_relaxed(query)
        both, loosened_both = text_relaxed(either) if turned else (either, [])
        tries = [
            ("either way", either, turned, False),
            ("text relaxed", relaxed, loosened, True),
            ("either way, text relaxed", both, turned + loosened_both if loosened_both else [], True),
        ]
        for label, second, repairs, text_gone in tries:
            if not repairs:
                continue
            try:
                with timeline.span("cypher", f"cypher ({label})", {"query": second}) as ev:
                    rows, truncated = self._read_answers(second)
                    ev["outputs"] = {"rows": len(rows), "truncated": truncated}
            except StoreUnavailable:
                raise
            except StoreError as exc:
                _store_refused(second, exc, trace, counters)
                continue
            found = self.graph.rows_for_ids(answer_values(rows))
            if len(found):
                trace.setdefault("cypher_model", []).append(query)
                trace.setdefault("repairs", []).extend(count_repairs(repairs, counters))
                trace["cypher_executed"], trace["cypher_rows"], trace["cypher_truncated"] = second, len(rows), truncated
                if text_gone and self.params.execution.semantic_text:
                    trace["text_words"] = text_conditions(query)[0]
                return found
        return np.zeros(0, np.int64)

    def _by_sentences(self, query: str, target: str | None, trace: dict, counters: dict) -> np.ndarray:
        """A query whose only constraints are text conditions that matched nothing: every node of
        the target label, to be ranked by its sentences against the words (`_rank`)."""
        words, named = text_conditions(query)
        if not words or named or target not in self.graph.node_types():
            return np.zeros(0, np.int64)
        counters["text_ranked"] = 1
        trace["text_words"] = words
        return self.graph.rows_of_type(target)

    def _ground(
        self,
        query: str,
        target: str | None,
        trace: dict,
        counters: dict,
        question: str = "",
        linked: Sequence[tuple[str, int]] = (),
    ) -> str:
        """The model's query repaired against the KB; what it wrote and each repair in the trace."""
        names = [kb_view(self.graph).names[r] for _, r in linked]
        grounded, repairs = ground_query(
            query,
            self.kb_schema(),
            target,
            question=question or None,
            linked=names,
            choose=self.relation_chooser(question) if question else None,
        )
        if repairs:
            trace.setdefault("cypher_model", []).append(query)
            trace.setdefault("repairs", []).extend(count_repairs(repairs, counters))
        return grounded

    def _repair(
        self, messages, reply_text: str, told: str, trace: dict, counters: dict, timeline: Timeline
    ) -> Plan | None:
        """The plan again from the model, told what the store said of its query (`told`)."""
        counters["repair_calls"] = 1
        follow = messages + [
            {"role": "assistant", "content": reply_text},
            {"role": "user", "content": told},
        ]
        try:
            with timeline.span("llm", "repair", follow) as ev:
                reply = self.res.llm.chat(follow, response_format={"type": "json_object"})
                timeline.reply(ev, reply)
        except LLMRequestRefused:
            return None
        try:
            plan = parse_plan(reply.text)
        except (ValueError, ValidationError):
            return None
        trace["repaired_plan"] = plan.model_dump()
        trace["repair_key"] = reply.key
        return plan

    def _vector(self, step: VectorStep, target: str | None) -> np.ndarray:
        label = step.label if step.label in self.graph.node_types() else target
        rows = self.graph.rows_of_type(label)
        if step.field.lower() in ("name", "title"):
            return kb_view(self.graph).nearest_names(step.text, rows, step.k)[0]
        if self.params.execution.semantic_text:
            s = self.graph.sentence_scores(step.text, rows)
        else:
            s = self.graph.vectors[rows] @ self.graph.query_vector(step.text)
        top = np.argsort(-s, kind="stable")[: step.k]
        return rows[top]

    @staticmethod
    def _combine(cypher_rows: np.ndarray | None, vector_rows: list[np.ndarray], how: str) -> np.ndarray:
        vec = np.unique(np.concatenate(vector_rows)) if vector_rows else np.zeros(0, np.int64)
        if cypher_rows is None or len(cypher_rows) == 0:
            return vec
        if len(vec) == 0:
            return cypher_rows
        if how == "union":
            return np.union1d(cypher_rows, vec)
        both = np.intersect1d(cypher_rows, vec)
        return both if len(both) else cypher_rows  # an empty intersection keeps the exact constraints

    def _fallback(self, query: str, k: int, target: str | None, trace: dict, reason: str) -> Retrieval:
        trace["counters"]["fallback"] = 1
        trace["fallback"] = reason
        rows = self.graph.rows_of_type(target)
        r = self.hybrid.search_within(query, rows, k, label="fallback") if target else self.hybrid.search(query, k)
        return Retrieval(
            r.idx, r.scores, ["fallback"] * len(r.idx), {**trace, "target": target, "edge_constrained": False}
        )
