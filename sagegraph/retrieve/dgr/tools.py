"""DGR's four tools over a built KB graph (dgr.txt §3, App. A.2): global BM25 search (or the flat
hybrid retriever's ranking, `global_search: hybrid`), typed one-hop neighbourhood search,
add_to_answer and finish.

Each tool returns an observation the agent reads (plain lines, one node per line, its index in
brackets) and the rows it showed or accepted, so the harness can fall back to the last results and
the evaluator can ask after the fact whether gold was ever shown. Where the paper and the public
code differ we follow the paper (LLM-RETRIEVERS.md §3.2): the neighbourhood is *ranked* by BM25 on
the query, not filtered by substring (`neighbour_ranking: substring` gives the code's behaviour,
`none` the paper's "Neighbors w/o q" ablation). Nothing here touches a database: the KB view holds
the typed, directed relations in memory and one BM25 index over name + summary serves both tools.
"""

from __future__ import annotations

import re
import threading
import weakref
from collections.abc import Collection
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from sagegraph.index.bm25 import BM25Index, top_k
from sagegraph.retrieve.dgr.params import ToolParams
from sagegraph.retrieve.flat import HybridRetriever
from sagegraph.retrieve.graph_index import GraphIndex
from sagegraph.retrieve.kb.entities import linked_rows
from sagegraph.retrieve.kb.view import KBView, cut_text, kb_view

GLOBAL, NEIGHBOURS, ANSWER, FINISH = "search_in_graph", "search_in_neighborhood", "add_to_answer", "finish"
TOOL_NAMES = (GLOBAL, NEIGHBOURS, ANSWER, FINISH)


class ToolError(ValueError):
    """A call the harness cannot run (unknown tool, missing or bad argument): its message goes back
    to the agent as the observation, and is counted."""


@dataclass
class ToolOutput:
    text: str
    shown: list[int] = field(default_factory=list)  # rows the observation listed
    added: list[int] = field(default_factory=list)  # rows add_to_answer accepted
    reasons: dict[int, str] = field(default_factory=dict)  # the agent's reasoning per added row
    finish: bool = False
    relaxed: list[str] = field(default_factory=list)  # filters dropped because nothing matched them
    source: int | None = None  # the node a neighbourhood search explored from
    relation: dict[int, str] = field(default_factory=dict)  # the relation leading from `source` to each shown node


# How each tool's ranking is described to the agent (the system prompt and the native schemas).
GLOBAL_KIND = {"bm25": "keyword (BM25) search", "hybrid": "search by keywords and meaning (BM25 fused with embeddings)"}
NEIGHBOUR_MATCH = {
    "bm25": "keyword match",
    "hybrid": "keyword and meaning match",
    "substring": "keyword match",
    "none": "keyword match",
}


def tool_schemas(settings: ToolParams) -> list[dict[str, Any]]:
    """OpenAI function-calling schemas; the JSON-action mode describes the same tools in prose."""

    def fn(name: str, description: str, properties: dict[str, Any], required: list[str]) -> dict[str, Any]:
        return {
            "type": "function",
            "function": {
                "name": name,
                "description": description,
                "parameters": {"type": "object", "properties": properties, "required": required},
            },
        }

    kind, max_size = GLOBAL_KIND[settings.global_search], settings.max_search_size
    tools = [
        fn(
            GLOBAL,
            f"{kind[0].upper()}{kind[1:]} over every node's name and summary. Returns up to `size` nodes "
            f"(default {settings.search_size}, at most {max_size}).",
            {
                "query": {"type": "string", "description": "keywords, an entity name or descriptive terms"},
                "size": {"type": "integer", "description": f"number of results, 1-{max_size}"},
            },
            ["query"],
        )
    ]
    if settings.neighbourhood:
        tools.append(
            fn(
                NEIGHBOURS,
                "The direct neighbours of a node with the relation type and direction of each edge, ranked by "
                f"{NEIGHBOUR_MATCH[settings.neighbour_ranking]} to `query`; {settings.neighbour_k} shown.",
                {
                    "node_index": {"type": "integer", "description": "the node to explore around"},
                    "query": {"type": "string", "description": "keywords to rank the neighbours by"},
                    "node_type": {"type": "string", "description": "only neighbours of this node type"},
                    "edge_type": {"type": "string", "description": "only edges of this relation type"},
                },
                ["node_index"],
            )
        )
    tools.append(
        fn(
            ANSWER,
            "Add nodes that answer the question, best first, each with a short reason.",
            {
                "answer_nodes": {
                    "type": "array",
                    "items": {
                        "type": "object",
                        "properties": {"node_index": {"type": "integer"}, "reasoning": {"type": "string"}},
                        "required": ["node_index"],
                    },
                }
            },
            ["answer_nodes"],
        )
    )
    tools.append(
        fn(
            FINISH,
            "Stop: the answer is complete or nothing useful is left to explore.",
            {"comment": {"type": "string", "description": "why exploration ends"}},
            [],
        )
    )
    return tools


def action_schema(node_types: list[str], relation_types: list[str], neighbourhood: bool = True) -> dict[str, Any]:
    """JSON schema of one JSON-mode reply, {"calls": [...]} with at least one call of a known tool
    and typed arguments. A llama.cpp server turns it into a grammar, so a small model cannot
    answer with no call, an unknown tool or an unknown type."""

    calls = [_call(GLOBAL, {"query": {"type": "string"}, "size": {"type": "integer"}}, ["query"])]
    if neighbourhood:
        calls.append(
            _call(
                NEIGHBOURS,
                {
                    "node_index": {"type": "integer"},
                    "query": {"type": "string"},
                    "node_type": {"enum": node_types},
                    "edge_type": {"enum": relation_types},
                },
                ["node_index"],
            )
        )
    calls.append(_answer_call({"type": "integer"}))
    calls.append(_call(FINISH, {"comment": {"type": "string"}}, []))
    return _calls(calls)


def _call(tool: str, properties: dict[str, Any], required: list[str]) -> dict[str, Any]:
    return {
        "type": "object",
        "properties": {
            "tool": {"const": tool},
            "args": {"type": "object", "properties": properties, "required": required},
        },
        "required": ["tool", "args"],
    }


def _answer_call(index: dict[str, Any]) -> dict[str, Any]:
    return _call(
        ANSWER,
        {
            "answer_nodes": {
                "type": "array",
                "minItems": 1,
                "items": {
                    "type": "object",
                    "properties": {"node_index": index, "reasoning": {"type": "string"}},
                    "required": ["node_index", "reasoning"],
                },
            }
        },
        ["answer_nodes"],
    )


def _calls(calls: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "type": "object",
        "properties": {"calls": {"type": "array", "minItems": 1, "items": {"anyOf": calls}}},
        "required": ["calls"],
    }


def _as_int(value: Any, name: str) -> int:
    if isinstance(value, bool):
        raise ToolError(f"{name} must be an integer node index, got {value!r}")
    if isinstance(value, int):
        return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, str) and re.fullmatch(r"\s*\[?\s*\d+\s*\]?\s*", value):
        return int(value.strip(" []"))
    raise ToolError(f"{name} must be an integer node index, got {value!r}")


def _arrow(relation: str, outgoing: bool) -> str:
    """A relation as read from the node whose neighbours are listed."""
    return f"-[{relation}]->" if outgoing else f"<-[{relation}]-"


class GraphTools:
    """The tools for one graph and one parameter set; stateless between calls (the answer list
    lives in the agent), so n agents share one instance."""

    def __init__(self, graph: GraphIndex, settings: ToolParams | None = None):
        self.graph = graph
        self.settings = settings or ToolParams()
        self.view: KBView = kb_view(graph)
        self.hybrid = HybridRetriever.over(graph)  # the flat baseline's fused ranking, for the `hybrid` searches
        self._types = {t.lower(): t for t in graph.node_types()}
        self._relations = {r.lower(): c for c, r in enumerate(self.view.relation_types)}

    def schemas(self) -> list[dict[str, Any]]:
        return tool_schemas(self.settings)

    def action_schema(self) -> dict[str, Any]:
        return action_schema(self.graph.node_types(), self.view.relation_types, self.settings.neighbourhood)

    # -- rendering --------------------------------------------------------------------------------
    def label(self, row: int) -> str:
        return f"[{row}] {self.graph.types[row]}: {self.view.shown_name(row)}"

    def summary(self, row: int) -> str:
        """What a result line says about a node, cut to `summary_chars`: the LLM-written topic when
        the build wrote one; for a KB record otherwise its short attributes and the first sentence
        of its longest text (its description), which is what the heuristic topic would be without
        the field block in front."""
        view = self.view
        fields = view.fields[row]
        if view.llm_metadata and view.topics[row]:
            s = view.topics[row]
        elif fields:
            scalars = [
                f"{k}: {v}"
                for k, v in fields.items()
                if k not in ("name", "title", "aliases")
                and isinstance(v, (int, float, str))
                and not isinstance(v, bool)
                and len(str(v)) <= 40
            ]
            texts = [v for v in fields.values() if isinstance(v, str) and len(v) > 40]
            first = re.split(r"(?<=[.!?])\s+", max(texts, key=len), maxsplit=1)[0] if texts else ""
            s = "; ".join(scalars) + (f". {first}" if first and scalars else first)
        else:
            s = view.topics[row] or self.graph.text(row)
        s = " ".join(s.split())
        return cut_text(s, self.settings.summary_chars)

    def _line(self, row: int, extra: str = "") -> str:
        s = self.summary(row)
        return f"{self.label(row)}{extra}" + (f" | {s}" if s else "")

    # -- tools ------------------------------------------------------------------------------------
    def call(self, name: str, args: dict[str, Any], shown: Collection[int] | None = None) -> ToolOutput:
        """`shown`: the nodes this agent has been shown; when given, a node_index outside it is
        refused (a small model invents indices and plans calls on results it has not seen yet)."""
        if not isinstance(args, dict):
            raise ToolError(f"{name}: arguments must be a JSON object, got {type(args).__name__}")
        if name == GLOBAL:
            unknown = set(args) - {"query", "size"}
            if unknown:
                raise ToolError(f"{GLOBAL}: unknown argument(s) {sorted(unknown)}; it takes query and size")
            return self.search_in_graph(args.get("query"), args.get("size"))
        if name == NEIGHBOURS and self.settings.neighbourhood:
            unknown = set(args) - {"node_index", "query", "node_type", "edge_type"}
            if unknown:
                raise ToolError(
                    f"{NEIGHBOURS}: unknown argument(s) {sorted(unknown)}; it takes node_index, query, "
                    "node_type and edge_type"
                )
            if "node_index" not in args:
                raise ToolError(f"{NEIGHBOURS}: node_index is required")
            return self.search_in_neighborhood(
                args["node_index"], args.get("query"), args.get("node_type"), args.get("edge_type"), shown=shown
            )
        if name == ANSWER:
            return self.add_to_answer(args.get("answer_nodes", args.get("nodes")), shown=shown)
        if name == FINISH:
            return ToolOutput("Finished.", finish=True)
        names = [GLOBAL, *([NEIGHBOURS] if self.settings.neighbourhood else []), ANSWER, FINISH]
        raise ToolError(f"unknown tool {name!r}; the tools are {', '.join(names)}")

    def search_in_graph(self, query: Any, size: Any = None) -> ToolOutput:
        if not isinstance(query, str) or not query.strip():
            raise ToolError(f"{GLOBAL}: query must be a non-empty string")
        n = self.settings.search_size if size is None else _as_int(size, "size")
        n = max(1, min(n, self.settings.max_search_size))
        if self.settings.global_search == "hybrid":
            rows = self.hybrid.search(query, n).idx
        else:
            scores = search_scores(self.graph, query)
            rows, s = top_k(scores, n)
            rows = rows[s > 0]
        if not len(rows):
            return ToolOutput(
                f'search_in_graph("{query}"): no node matches these keywords. Try other words or an entity name.'
            )
        lines = [f'search_in_graph("{query}"): {len(rows)} results'] + [self._line(int(r)) for r in rows]
        return ToolOutput("\n".join(lines), shown=[int(r) for r in rows])

    def _node(self, value: Any, arg: str = "node_index", shown: Collection[int] | None = None) -> int:
        row = _as_int(value, arg)
        if not 0 <= row < len(self.graph):
            raise ToolError(f"{arg} {row} is not a node; use the numbers in brackets from earlier results")
        if shown is not None and row not in shown:
            raise ToolError(
                f"{arg} {row} has not appeared in your results yet; use a number in brackets from a result you "
                "were shown"
            )
        return row

    def search_in_neighborhood(
        self,
        node_index: Any,
        query: Any = None,
        node_type: Any = None,
        edge_type: Any = None,
        shown: Collection[int] | None = None,
    ) -> ToolOutput:
        row = self._node(node_index, shown=shown)
        if isinstance(edge_type, list):
            raise ToolError("edge_type must be one relation type, not a list")
        other, codes, out = self.view.incident(row)
        rel_names = self.view.relation_types
        notes, said, relaxed = [], [], []
        filters: dict[str, tuple[str, np.ndarray]] = {}  # argument -> (what it kept, mask)
        if node_type and self.settings.type_filters:
            t = self._types.get(str(node_type).strip().lower())
            if t is not None:
                filters["node_type"] = (f"node_type={t}", self.graph.types[other] == t)
            elif not self.settings.relax_filters:
                raise ToolError(f"unknown node_type {node_type!r}; node types: {', '.join(self.graph.node_types())}")
            else:
                relaxed.append("node_type")
                said.append(
                    f"node_type {node_type!r} is not a node type (ignored; node types: "
                    f"{', '.join(self.graph.node_types())})"
                )
        if edge_type and self.settings.type_filters:
            c = self._relations.get(str(edge_type).strip().lower())
            if c is not None:
                filters["edge_type"] = (f"edge_type={rel_names[c]}", codes == c)
            elif not self.settings.relax_filters:
                raise ToolError(f"unknown edge_type {edge_type!r}; relation types: {', '.join(rel_names)}")
            else:
                relaxed.append("edge_type")
                said.append(
                    f"edge_type {edge_type!r} is not a relation type (ignored; relation types: {', '.join(rel_names)})"
                )
        keep = np.ones(len(other), dtype=bool)
        for _, mask in filters.values():
            keep &= mask
        if self.settings.relax_filters and len(filters) and len(other) and not keep.any():
            dropped = self._filter_to_drop(row, filters)
            if dropped is not None:
                asked = " and ".join(w for w, _ in filters.values())
                what, _ = filters.pop(dropped)
                keep = np.ones(len(other), dtype=bool)
                for _, mask in filters.values():
                    keep &= mask
                relaxed.append(dropped)
                own = (
                    f" ({self.graph.types[row]} is the type of node {row} itself)"
                    if what == f"node_type={self.graph.types[row]}"
                    else ""
                )
                said.append(
                    f"no neighbour matches {asked}{own}; {what} dropped, showing the neighbours that match "
                    f"{', '.join(w for w, _ in filters.values()) or 'any filter'}"
                )
        notes += [what for what, _ in filters.values()]
        # One line per neighbour, with every relation that links it to the node.
        via: dict[int, list[str]] = {}
        first_rel: dict[int, str] = {}
        for o, c, is_out in zip(other[keep].tolist(), codes[keep].tolist(), out[keep].tolist()):
            via.setdefault(o, []).append(_arrow(rel_names[c], is_out))
            first_rel.setdefault(o, rel_names[c])
        rows = np.fromiter(via, dtype=np.int64, count=len(via))
        q = query.strip() if isinstance(query, str) else ""
        if q and self.settings.neighbour_ranking != "none":
            rows = self._rank_neighbours(rows, q)
            notes.append(f'{"filtered" if self.settings.neighbour_ranking == "substring" else "ranked"} by "{q}"')
        shown = rows[: self.settings.neighbour_k]
        head = f"Neighbours of {self.label(row)}" + (f" ({', '.join(notes)})" if notes else "")
        note = "".join(f"\nNote: {x}." for x in said)
        if not len(shown):
            if not len(other):
                return ToolOutput(f"{head}: none (the node has no neighbours).{note}", relaxed=relaxed)
            return ToolOutput(
                f"{head}: none match. {self._neighbour_kinds(row, other, codes, out)}{note}", relaxed=relaxed
            )
        lines = [f"{head}: {len(rows)} found, {len(shown)} shown; arrows read from node {row}"]
        lines += [self._line(int(o), f"  {', '.join(via[int(o)])}{self._kinds_of(int(o))}") for o in shown]
        return ToolOutput(
            "\n".join(lines) + note,
            shown=[int(o) for o in shown],
            relaxed=relaxed,
            source=row,
            relation={int(o): first_rel[int(o)] for o in shown},
        )

    def linked(self, question: str, per_name: int = 3) -> ToolOutput:
        """(`link`) The nodes whose name the question holds (the KB's name index, as SPARK's and
        AF's linking), each with what its neighbours are by type and relation: shown before the
        first step, so a small agent starts from the right node with the edge types it can follow
        instead of disambiguating by search and copying the prompt example's edge_type. Empty text
        when the question names no node."""
        rows = list(dict.fromkeys(r for _, r in linked_rows(self.view, question, per_name)))
        if not rows:
            return ToolOutput("")
        lines = ["Nodes the question names, found in the graph by name:"]
        for r in rows:
            other, codes, out = self.view.incident(r)
            lines.append(self._line(r))
            lines.append(
                "  " + (self._neighbour_kinds(r, other, codes, out) if len(other) else "It has no neighbours.")
            )
        return ToolOutput("\n".join(lines), shown=rows)

    def _kinds_of(self, row: int, most: int = 8) -> str:
        """(`relation_kinds`) the relation types a shown neighbour has, so an agent one hop short of
        the answer knows which edge_type to ask for next: the trajectories show a small model
        repeating the relation that reached the node ("children" from the child, for "the sex of
        the child of X") where the answer is one `gender` hop on."""
        if not self.settings.relation_kinds:
            return ""
        _, codes, _ = self.view.incident(row)
        kinds = sorted({self.view.relation_types[c] for c in codes.tolist()})
        return f" (its relations: {', '.join(kinds[:most])}{', ...' if len(kinds) > most else ''})" if kinds else ""

    def _filter_to_drop(self, row: int, filters: dict[str, tuple[str, np.ndarray]]) -> str | None:
        """Which of two filters that together match nothing to drop: the node type when it is the
        explored node's own (a small model names the source's type, the trajectories show), else
        the one whose removal leaves neighbours, the node type first; a single filter that matches
        nothing is dropped when it names the node's own type."""
        if "node_type" in filters and filters["node_type"][0] == f"node_type={self.graph.types[row]}":
            return "node_type"
        if len(filters) == 2:
            for name in ("node_type", "edge_type"):
                rest = next(mask for key, (_, mask) in filters.items() if key != name)
                if rest.any():
                    return name
        return None

    def _neighbour_kinds(self, row: int, other: np.ndarray, codes: np.ndarray, out: np.ndarray, most: int = 8) -> str:
        """What the node's neighbours are, by type and relation, for a filter that matched none:
        the recorded trajectories show a small model copying the prompt's example filter
        (node_type="Movie" from a Movie) and retrying it; told what is there, it can correct it."""
        rel_names = self.view.relation_types
        kinds: dict[tuple[str, str], int] = {}
        for o, c, is_out in zip(other.tolist(), codes.tolist(), out.tolist()):
            key = (str(self.graph.types[o]), _arrow(rel_names[c], is_out))
            kinds[key] = kinds.get(key, 0) + 1
        ranked = sorted(kinds.items(), key=lambda kv: (-kv[1], kv[0]))
        parts = [f"{n} {t} {arrow}" for (t, arrow), n in ranked[:most]]
        more = f", and {len(ranked) - most} more kinds" if len(ranked) > most else ""
        return f"Its {len(other)} neighbours, read from node {row}: {', '.join(parts)}{more}."

    def _rank_neighbours(self, rows: np.ndarray, query: str) -> np.ndarray:
        if not len(rows):
            return rows
        if self.settings.neighbour_ranking in ("bm25", "hybrid"):
            s = (
                self.hybrid.scores_for(query, rows)
                if self.settings.neighbour_ranking == "hybrid"
                else search_scores(self.graph, query)[rows]
            )
            return rows[np.lexsort((np.arange(len(rows)), -s))]  # best first, edge order among ties
        # The public code: names containing the query first, then summaries ranked by how many of the
        # query's words they hold; the rest dropped.
        ql = query.lower()
        words = [w for w in re.findall(r"\w+", ql) if len(w) > 2]
        names = [r for r in rows.tolist() if ql in self.view.names[r].lower()]
        named = set(names)
        rest = [(sum(w in self.summary(r).lower() for w in words), r) for r in rows.tolist() if r not in named]
        rest = [r for n, r in sorted((t for t in rest if t[0] > 0), key=lambda t: -t[0])]
        return np.array(names + rest, dtype=np.int64)

    def add_to_answer(self, answer_nodes: Any, shown: Collection[int] | None = None) -> ToolOutput:
        if isinstance(answer_nodes, dict):
            answer_nodes = [answer_nodes]
        if not isinstance(answer_nodes, list) or not answer_nodes:
            raise ToolError(f"{ANSWER}: answer_nodes must be a non-empty list of {{node_index, reasoning}}")
        added, bad, unseen, reasons = [], [], [], {}
        for item in answer_nodes:
            value = item.get("node_index", item.get("index", item.get("name"))) if isinstance(item, dict) else item
            try:
                r = self._node(value)
            except ToolError:
                bad.append(value)
                continue
            if shown is not None and r not in shown:
                unseen.append(r)
                continue
            added.append(r)
            if isinstance(item, dict) and item.get("reasoning"):
                reasons[r] = str(item["reasoning"])[:300]
        msg = (
            (f"Added {len(added)} node(s): " + ", ".join(f"[{r}] {self.view.names[r]}" for r in added) + ".")
            if added
            else "Added nothing."
        )
        if bad:
            msg += f" Not node indexes (ignored): {bad[:10]}."
        if unseen:
            msg += f" Not in any result you were shown (ignored): {unseen[:10]}."
        return ToolOutput(msg, added=added, reasons=reasons)


_LOCK = threading.Lock()
_INDEXES: weakref.WeakKeyDictionary[GraphIndex, BM25Index] = weakref.WeakKeyDictionary()


def search_scores(g: GraphIndex, query: str) -> np.ndarray:
    """BM25 of every node for DGR's searches, over its name and summary. With LLM metadata the
    summary is the written topic (the paper's LLM summaries); with heuristic metadata it is the
    node's own text, i.e. the graph's BM25 index: a cut-off opening would hide what descriptive
    questions ask about (the synthetic KB spreads a film's motifs over a 1,300-character plot)."""
    view = kb_view(g)
    if not view.llm_metadata:
        return g.bm25_scores(query)
    with _LOCK:
        if g not in _INDEXES:
            _INDEXES[g] = BM25Index.build([f"{n}\n{t}" for n, t in zip(view.names, view.topics)])
        index = _INDEXES[g]
    return index.scores(query)
