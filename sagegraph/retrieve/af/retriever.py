"""AF-Retriever (af-retriever.txt Alg. 1-2): the LLM names the answer type and derives a Cypher
query that is parsed, never run; its symbols are grounded in the KB by typed set intersection,
the grounded answers are ordered by vector similarity, the rest of k is filled by vector search
over the answer type, and an LLM reranks the k.

What we follow and where we depart (LLM-RETRIEVERS.md §2):
- the paper's defaults (k = 20, alpha = 2/3 of k, l_max = 100, pairwise rerank) and its l
  schedule l <- l^1.5 + 0.5; the public code's 1, 2, 3, 5, 8, ... is `schedule: code`;
- grounding follows relation direction (`directed: false` gives the public code's undirected);
- type modes: strict (node and relation types filter), node_types (the paper's best, T18:
  node types filter, any relation), lenient (neither);
- CONTAINS is in the grammar (the paper's; the code dropped it) and works as a text filter;
- our own prompts, one user message each with the question last, so a local server's prompt
  cache reuses the schema part across questions.
Every LLM failure has a fallback that still returns k results (vector fill), and is counted.
No gold label is read here; the per-step diagnostics against gold are computed by the evaluator
from the trace's `stage_sets`.
"""

from __future__ import annotations

import re
import threading
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np

from sagegraph.llm import LLMRequestRefused, usage_scope
from sagegraph.model import safe_label
from sagegraph.retrieve.af.ground import Candidates, filter_symbol, ground, rank_constant, theme_conditions
from sagegraph.retrieve.af.params import AFParams
from sagegraph.retrieve.af.parse import NAME_KEYS, ParsedQuery, cypher_text, parse_cypher, return_names
from sagegraph.retrieve.base import Resources, Retrieval, Retriever
from sagegraph.retrieve.flat import HybridRetriever
from sagegraph.retrieve.kb.grounding import count_repairs, ground_counters, ground_query, view_schema
from sagegraph.retrieve.kb.rerank import Reranker
from sagegraph.retrieve.kb.schema_card import cypher_literal, load_hints
from sagegraph.retrieve.kb.unnamed import names_a_node, prepare_unnamed, rank_unnamed
from sagegraph.retrieve.kb.view import KBView, kb_view
from sagegraph.retrieve.registry import register
from sagegraph.retrieve.timeline import Timeline

# The paper's AF: `ground: false, semantic_text: false, unnamed: resolve`. The prompt version is part
# of the run key: a changed prompt reruns instead of resuming (its history: CHANGELOG.md).
PROMPT_VERSION = "af-8"

# The target-type prompt says the question may mention nodes it does not ask for: a small model
# otherwise names the mentioned node's type. Its name example is a node of the KB being queried.
TARGET_TYPE = """A knowledge base holds nodes of these types: {types}.
The question below asks for some nodes and may mention others. Which type are the nodes it asks for?
Reply with the type name only.

Question: {question}"""

DERIVE_CYPHER = """Write one Cypher query that captures what the question below asks. Follow these rules exactly:
- Simple syntax: a short, basic query.
- Use only the node labels, relationship types and properties listed here; leave out what they
  cannot express exactly.
- No quantifiers, no negation (no NOT, no <>), no OR.
- Keywords: MATCH, WHERE, RETURN, AND, CONTAINS only.
- Put names into the node pattern, e.g. {name_example}; dates as 'YYYY-MM-DD'.
- Mind each relationship's direction.

Node labels (example names) and their properties:
{labels}

Relationships:
{patterns}
{examples}
Question: {question}
{return_rule} Reply with the Cypher query only."""

_TOKEN = re.compile(r"[^\w]+")


def parse_target_type(text: str, types: list[str]) -> str | None:
    """The type the reply names: its first comma-separated token (the public code's reading), or
    else the one type named anywhere in it; None when neither is a known type."""
    text = re.sub(r"<think>.*?</think>", " ", text or "", flags=re.DOTALL)
    lower = {t.lower(): t for t in types}
    as_label = {safe_label(t).lower(): t for t in types}  # `gene/protein` written as its label, or as words
    first = _TOKEN.sub(" ", text.split(",")[0]).strip().lower()
    if first in lower:
        return lower[first]
    if first and (label := safe_label(first).lower()) in as_label:
        return as_label[label]
    named = {lower[w] for w in re.findall(r"[\w]+", text.lower()) if w in lower}
    return named.pop() if len(named) == 1 else None


def _written(parsed: ParsedQuery) -> list[str]:
    """The strings the query compares with `=`, `CONTAINS` or `IN`, on any key: the motifs of a
    question that names nothing."""
    return [
        str(v)
        for s in parsed.symbols.values()
        for cond in s.conditions
        if cond.op in ("=", "contains", "in")
        for v in (cond.value if isinstance(cond.value, list) else [cond.value])
        if isinstance(v, str)
    ]


def name_example(view: KBView) -> str:
    """`(x:Label {name: 'Stored Name'})` for the head of the KB's most frequent pattern: the
    example is this KB's, not one a prompt was written for."""
    for head, relation, tail, _ in view.patterns:
        pair = view.instance(head, relation, tail)
        if pair is not None and view.names[pair[0]].strip():
            key = _return_key(view, head)
            var = (head[:1] or "x").lower() if head[:1].isalpha() else "x"
            return f"({var}:{head} {{{key}: {cypher_literal(view.names[pair[0]])}}})"
    return "(x:Label {name: 'Exact Name'})"


def _return_key(view: KBView, node_type: str | None) -> str:
    props = view.properties(node_type) if node_type else {}
    return next((k for k in NAME_KEYS if k in props), "name")


# How the oracle endpoint tells this method's prompts apart (their fixed wording).
ORACLE_TYPE_MARK = "Which type are the nodes it asks for?"
ORACLE_CYPHER_MARK = "Write one Cypher query that captures what the question below asks."
ORACLE_RERANK_MARK = "candidate answer"


@register("af")
class AFRetriever(Retriever[AFParams]):
    uses_llm = True
    prompt_version = PROMPT_VERSION
    Params = AFParams
    shared_axes = ()  # `alpha` here is AF's share of k, not the hybrid BM25 weight of the sweep axis

    @classmethod
    def miss_kind(cls, trace: dict[str, Any], gold_type: str | None, relations: int | None) -> str:
        from sagegraph.retrieve.af.diagnostics import miss_kind

        return miss_kind(trace, gold_type, relations)

    @classmethod
    def prepare(cls, graph, params: AFParams) -> list[str]:
        """`semantic_text` reads the sentence vectors of the graph's long texts (as SPARK's)."""
        built = prepare_unnamed(graph, params.query.unnamed)
        if params.query.semantic_text and "sentence vectors" not in built:
            _ = graph.passages
            built.append("sentence vectors")
        return built

    @classmethod
    def oracle_reply(cls, messages: list[dict[str, Any]], gold: dict[str, Any]) -> str | None:
        """Step 1: the gold target type; step 2: the gold Cypher, returning the answer's name as
        AF asks; a rerank prompt gets no usable answer, so reranking keeps the order."""
        last = next((str(m.get("content")) for m in reversed(messages) if m.get("role") == "user"), "")
        if ORACLE_TYPE_MARK in last:
            return str(gold.get("target_type") or "")
        if ORACLE_CYPHER_MARK in last:
            return return_names(gold.get("gold_cypher") or "")
        if ORACLE_RERANK_MARK in last:
            return ""
        return None

    def __init__(self, res: Resources, params: AFParams):
        super().__init__(res, params)
        self.view = kb_view(self.graph)
        self._card: tuple[str, str, str, str] | None = None
        self._lock = threading.Lock()
        self._schema = view_schema(self.view) if params.query.ground else None
        self.hybrid = HybridRetriever.over(res)

    # -- prompts --------------------------------------------------------------------------------
    def _hints_path(self) -> Path | None:
        if self.params.query.hints:
            return self.params.query.hints
        corpus = (self.graph.manifest.get("config") or {}).get("corpus") or {}
        path = Path(corpus["path"]) / "hints.yaml" if corpus.get("path") else None
        return path if path and path.exists() else None

    def card(self) -> tuple[str, str, str, str]:
        """(labels, relationship patterns, examples, a name example), built once per retriever from
        the graph."""
        with self._lock:
            if self._card is None:
                v = self.view
                labels = []
                for t in self.graph.node_types():
                    props = ", ".join(f"{p}: {kind}" for p, kind in v.properties(t).items())
                    names = "; ".join(v.example_names(t, 5))
                    labels.append(f"(:{t}) e.g. {names}\n  properties: {props}")
                patterns = "\n".join(f"(:{h})-[:{r}]->(:{t})" for h, r, t, _ in v.patterns)
                examples = ""
                shown = (load_hints(self._hints_path()).get("examples") or [])[:2]
                if shown:
                    lines = ["", "Examples:"]
                    for ex in shown:
                        lines += [
                            f"Question: {ex['question']}",
                            f"Cypher: {return_names(ex['cypher'], lambda label: _return_key(self.view, label))}",
                        ]
                    examples = "\n".join(lines) + "\n"
                self._card = ("\n".join(labels), patterns, examples, name_example(v))
            return self._card

    def type_messages(self, question: str) -> list[dict[str, str]]:
        return [
            {"role": "user", "content": TARGET_TYPE.format(types=", ".join(self.graph.node_types()), question=question)}
        ]

    def cypher_messages(self, question: str, target_type: str | None) -> list[dict[str, str]]:
        labels, patterns, examples, named = self.card()
        if target_type:
            rule = (
                f"The answer is a {target_type}: end with RETURN y.{_return_key(self.view, target_type)} for "
                f"the answer node (y:{target_type})."
            )
        else:
            rule = "End with RETURN y.name for the answer node y."
        return [
            {
                "role": "user",
                "content": DERIVE_CYPHER.format(
                    labels=labels,
                    patterns=patterns,
                    examples=examples,
                    question=question,
                    return_rule=rule,
                    name_example=named,
                ),
            }
        ]

    # -- pipeline -------------------------------------------------------------------------------
    def _search(self, query: str, k: int) -> Retrieval:
        with usage_scope() as usage:
            r = self._run(query, k)
        r.usage = usage.as_dict()
        return r

    def _ask(
        self, timeline: Timeline, name: str, messages: list[dict[str, str]], counters: dict[str, int]
    ) -> str | None:
        try:
            with timeline.span("llm", name, messages) as ev:
                reply = self.res.llm.chat(messages, max_tokens=256)
                timeline.reply(ev, reply)
            return reply.text
        except LLMRequestRefused:
            counters["llm_refused"] += 1
            return None

    def _run(self, query: str, k: int) -> Retrieval:
        counters = {
            "type_skipped": 0,
            "type_invalid": 0,
            "llm_refused": 0,
            "with_triplet": 0,
            "with_constant": 0,
            "grounded_any": 0,
            "vss_only": 0,
            "filters_unapplied": 0,
            "unnamed": 0,
            "unnamed_motifs": 0,
            "text_ranked": 0,
        }
        timeline = Timeline()
        steps: dict[str, Any] = {}
        trace: dict[str, Any] = {"counters": counters, "events": timeline.events, "steps": steps}
        types = self.graph.node_types()
        # 1. target type
        if len(types) == 1:
            counters["type_skipped"] = 1
            y_type: str | None = types[0]
        else:
            text = self._ask(timeline, "target type", self.type_messages(query), counters)
            y_type = parse_target_type(text, types) if text is not None else None
            counters["type_invalid"] = int(y_type is None)
        steps["target_type"] = y_type
        # 2. Cypher derivation
        text = self._ask(timeline, "derive cypher", self.cypher_messages(query, y_type), counters)
        steps["cypher"] = text
        if self._schema is not None and text:
            text = self._ground(text, y_type, counters, steps)
        out = self.steps_3_to_7(query, k, y_type, text or "", counters, steps)
        # 8. rerank
        candidates = out.candidates
        ranked = (
            Reranker(
                self.params.ranking.reranker,
                self.res.llm,
                self.view,
                timeline,
                counters,
                relations=self.params.ranking.rerank_relations,
                text_chars=self.params.ranking.rerank_text_chars,
            ).rerank(query, candidates)
            if self.params.ranking.reranker != "none"
            else candidates
        )
        trace["stage_sets"] = {
            name: self.stage_ids(rows, cap=5000)
            for name, rows in (("grounded", out.grounded), ("kept", out.kept), ("candidates", candidates))
        }
        trace["predictions"] = {"target_type": y_type}
        trace["target"] = y_type
        n = len(ranked)
        return Retrieval(
            np.array(ranked, dtype=np.int64),
            np.linspace(1.0, 1.0 / max(n, 1), n).astype(np.float32) if n else np.zeros(0, np.float32),
            [out.found_by[r] for r in ranked],
            trace,
        )

    def _ground(self, text: str, y_type: str | None, counters: dict[str, int], steps: dict[str, Any]) -> str:
        """The derived query repaired against the KB before it is parsed; the model's text stays
        in steps["cypher"], what was parsed and each repair beside it."""
        assert self._schema is not None
        counters.update(ground_counters())
        query = cypher_text(text)
        grounded, repairs = ground_query(
            query, self._schema, y_type, return_ids=False
        )  # AF reads the returned variable, named
        if repairs:
            steps["cypher_grounded"] = grounded
            steps["repairs"] = count_repairs(repairs, counters)
            return grounded
        return text

    def steps_3_to_7(
        self, query: str, k: int, y_type: str | None, text: str, counters: dict[str, int], steps: dict[str, Any]
    ) -> Steps37:
        """Everything between the LLM calls: parse, candidates, grounding, VSS keep and fill. Pure
        given the two replies (what `benchmarks/af_steps.py` times)."""
        # 3. parse
        parsed = parse_cypher(text, set(self.graph.node_types()), set(self.view.relation_types))
        for name, v in parsed.counters.items():
            counters[f"parse_{name}"] = v
        strict = self.params.grounding.type_mode == "strict"
        if not strict:
            for t in parsed.triplets:
                t.rel = None  # any relation
        if (
            parsed.target in parsed.symbols
            and parsed.symbols[parsed.target].type is None
            and y_type
            and self.params.grounding.type_mode != "lenient"
        ):
            parsed.symbols[parsed.target].type = y_type
        steps["parsed"] = _parsed_dict(parsed)
        counters["with_triplet"] = int(bool(parsed.triplets))
        counters["with_constant"] = int(bool(parsed.constants))
        asked = parsed  # what the model wrote: a question that names no node is ranked by all of it
        themes = (
            theme_conditions(self.view, parsed, self.params.grounding.type_mode != "lenient")
            if self.params.query.semantic_text
            else []
        )
        if themes and parsed.target is not None:  # the theme ranks the grounded answers (step 6), not pins them
            answer = parsed.symbols[parsed.target]
            parsed = replace(
                parsed,
                symbols={
                    **parsed.symbols,
                    parsed.target: replace(answer, conditions=[c for c in answer.conditions if c not in themes]),
                },
            )
        # 4. candidates, 5. grounding
        grounded: list[int] = []
        rounds: list[int] = []
        cands = self._candidates(parsed, counters) if parsed.target is not None else {}
        if cands:
            steps["candidates"] = {v: c.summary(self.view) for v, c in cands.items()}
        if self.params.query.unnamed != "resolve" and self._unnamed(query, cands):
            r = rank_unnamed(self.params.query.unnamed, self.view, self.hybrid, query, _written(asked), y_type, k)
            counters["unnamed"], counters["unnamed_motifs"] = 1, int(r.trace["ranked_by"] == "motifs")
            steps["unnamed"] = r.trace
            rows = [int(x) for x in r.idx]
            steps["kept"], steps["filled"] = 0, 0
            return Steps37([], [], rows, dict(zip(rows, r.found_by)))
        if themes:
            steps["text_words"] = [c.value for c in themes]
            counters["text_ranked"] = 1
        if parsed.target is not None:
            tc = cands.get(parsed.target)
            if parsed.triplets or (tc is not None and (tc.constant or tc.filters_applied)):  # else nothing to ground
                g = ground(
                    self.view,
                    parsed,
                    cands,
                    k,
                    self.params.grounding.l_max,
                    self.params.grounding.schedule,
                    self.params.grounding.directed,
                    self.params.grounding.cap,
                )
                grounded, rounds = g.answers, g.round_of
                steps["grounding"] = g.rounds
        counters["grounded_any"] = int(bool(grounded))
        # 6. VSS over grounded: by round, then cosine
        qv = self.graph.query_vector(query)
        keep_n = round(self.params.ranking.alpha * k)
        kept: list[int] = []
        if grounded:
            grounded_rows = np.array(grounded, dtype=np.int64)
            cos = (
                self.graph.sentence_scores(" ".join(str(c.value) for c in themes), grounded_rows)
                if themes
                else self.graph.vectors[grounded_rows] @ qv
            )
            order = np.lexsort((grounded_rows, -cos, np.array(rounds)))
            kept = [int(x) for x in grounded_rows[order][:keep_n]]
        # 7. VSS fill over the answer type
        pool = self.graph.rows_of_type(y_type)
        if kept:
            pool = pool[~np.isin(pool, kept)]
        need = k - len(kept)
        fill: list[int] = []
        if need > 0 and len(pool):
            s = self.graph.vectors[pool] @ qv
            fill = [int(x) for x in pool[np.argsort(-s, kind="stable")[:need]]]
        counters["vss_only"] = int(not kept)
        steps["kept"] = len(kept)
        steps["filled"] = len(fill)
        return Steps37(grounded, kept, kept + fill, {r: "grounded" for r in kept} | {r: "vss" for r in fill})

    def _unnamed(self, query: str, cands: dict[str, Candidates]) -> bool:
        """No node to start from: the question names none, and no filter compares a value ("films
        released after 2003" needs no name; a `CONTAINS` of the question's words is a motif)."""
        if any(c.value_filters for c in cands.values()):
            return False
        return not names_a_node(self.view, query)

    def _candidates(self, parsed: ParsedQuery, counters: dict[str, int]) -> dict[str, Candidates]:
        use_type = self.params.grounding.type_mode != "lenient"
        out = {v: filter_symbol(self.view, s, use_type) for v, s in parsed.symbols.items()}
        for v, c in out.items():
            counters["filters_unapplied"] = counters.get("filters_unapplied", 0) + len(c.filters_unapplied)
            if c.constant:
                rank_constant(self.view, parsed.symbols[v], c, self.params.grounding.l_max)
        return out


@dataclass
class Steps37:
    grounded: list[int]  # rows, in grounding-round order
    kept: list[int]  # step 6
    candidates: list[int]  # steps 6 + 7: what the reranker sees
    found_by: dict[int, str]


def _parsed_dict(p: ParsedQuery) -> dict[str, Any]:
    return {
        "target": p.target,
        "symbols": {
            v: {
                "type": s.type,
                "constant": s.is_constant,
                "conditions": [[c.prop, c.op, c.value] for c in s.conditions],
            }
            for v, s in p.symbols.items()
        },
        "triplets": [[t.head, t.rel, t.tail] for t in p.triplets],
    }
