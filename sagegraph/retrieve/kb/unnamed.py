"""A question that names no node of the KB ("Which film brings together a shipwreck, a funeral
and a library?"), for the methods that start from the nodes a question names (AF, GraphRAFT).

Such a method has nothing to start from: the names its model writes for the question are motifs,
which resolve by vector to unrelated nodes ('funeral' -> the genre Disaster), and what it reaches
from them answers worse than ranking the question's text. What the model wrote is still worth reading: each
motif is a phrase one sentence of the answer's text says, so a node scores by the sum over the
motifs of its closest sentence (`GraphIndex.sentence_scores`, SPARK's `semantic_text`).

    unnamed: resolve  the paper's: motifs resolve to nodes like names
             hybrid   the question's text ranked by hybrid (over the answer's type when known)
             motifs   the sum over the written motifs of each node's best sentence (over the
                      answer's type when known), less the KB names the question does not
                      hold (copies); hybrid where none is left

DGR's agent writes no motif list, only keyword searches ("library circus jungle"), which read as
one phrase against no single sentence of the answer's text: its motifs are the searches' words
(`word_motifs`), each weighted by its rarity in the KB's texts, so a word every node of the
answer's type holds ('film' in a film KB) does not outweigh the motifs.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Literal

import numpy as np

from sagegraph.index.bm25 import idf, words
from sagegraph.retrieve.base import Retrieval
from sagegraph.retrieve.flat import HybridRetriever
from sagegraph.retrieve.graph_index import GraphIndex
from sagegraph.retrieve.kb.entities import gazetteer_entities
from sagegraph.retrieve.kb.view import KBView, normalise

Unnamed = Literal["resolve", "hybrid", "motifs"]
UNNAMED_HELP = (
    "a question that names no KB node (no KB name among its words or among the names its model wrote): resolve "
    "(the paper's: the written motifs resolve like names), hybrid (the question ranked by hybrid), motifs (each "
    "node by "
    "the sum over the written motifs, less KB names the question does not hold, of its closest sentence; hybrid where "
    "none is left); counted"
)


def names_a_node(view: KBView, question: str) -> bool:
    """Whether one of the question's word spans is a KB name or alias (the gazetteer). Only the
    question's own words decide: a name the model wrote that the question does not hold is a copy
    (the prompt's example, a card's value), not a sign that the question names a node."""
    return bool(gazetteer_entities(view, question))


def _kb_name(view: KBView, phrase: str) -> str:
    """The phrase as the name index keys it, where it is a KB name or alias; else ''."""
    key = normalise(phrase)
    return key if key and key in view.name_index else ""


def motif_order(
    g: GraphIndex, motifs: Iterable[str], rows: np.ndarray, weights: dict[str, float] | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """`rows` by the sum over the motifs of each row's best sentence cosine (its node vector's
    where its text is short), each times its weight where given, ties by row; with the summed
    scores."""
    rows = np.asarray(rows, dtype=np.int64)
    score = np.zeros(len(rows), dtype=np.float32)
    for m in motifs:
        score += np.float32((weights or {}).get(m, 1.0)) * g.sentence_scores(m, rows)
    order = np.lexsort((rows, -score))
    return rows[order], score[order]


def written_motifs(view: KBView, written: Iterable[str], question: str) -> list[str]:
    """The model's phrases, each once (case and spacing aside), in the order written, less the KB
    names the question does not hold: those are copies, not motifs (the 1.5B local model wrote the
    prompt's example name, 'Ana Silva', and the schema card's genres, 'Drama', 'Thriller', for a
    question about a shipwreck). A paraphrase the KB does not name stays ('Honeybee' for "someone
    who tends honey-making insects"): on the synthetic KB's validation split, keeping only phrases
    that share a word with the question cost two of GraphRAFT's five descriptive hits."""
    asked = f" {normalise(question)} "
    seen: dict[str, str] = {}
    for w in written:
        text = " ".join(str(w).split())
        key = _kb_name(view, text)
        if not text or text.lower() in seen or (key and f" {key} " not in asked):
            continue
        seen[text.lower()] = text
    return list(seen.values())


def word_motifs(view: KBView, written: Iterable[str], question: str) -> dict[str, float]:
    """The words of the phrases written (searches), less KB names the question does not hold
    (whole phrases, then words), each with its inverse document frequency over the graph's texts
    (BM25's): the motifs of a method whose model writes keyword searches, not a motif list."""
    phrases = written_motifs(view, written, question)
    kept = written_motifs(view, (w for text in phrases for w in words(text)), question)
    return {w: idf(view.graph.bm25_scores(w)) for w in kept}


def rank_unnamed(
    how: Unnamed,
    view: KBView,
    hybrid: HybridRetriever,
    query: str,
    written: Iterable[str],
    node_type: str | None,
    k: int,
    weights: dict[str, float] | None = None,
) -> Retrieval:
    """The k nodes for an unnamed question under `how` ("hybrid" or "motifs"); the trace says
    what ranked them (`ranked_by`) and from which motifs. With `weights` (`word_motifs`) the
    motifs are its words, each scored times its weight."""
    g = view.graph
    rows = g.rows_of_type(node_type)
    motifs = (list(weights) if weights is not None else written_motifs(view, written, query)) if how == "motifs" else []
    if motifs and len(rows):
        idx, scores = motif_order(g, motifs, rows, weights)
        return Retrieval(idx[:k], scores[:k], ["motifs"] * min(k, len(idx)), {"ranked_by": "motifs", "motifs": motifs})
    r = hybrid.search_within(query, rows, k) if node_type else hybrid.search(query, k)
    return Retrieval(r.idx, r.scores, ["hybrid"] * len(r.idx), {"ranked_by": "hybrid"})


def prepare_unnamed(graph: GraphIndex, how: Unnamed) -> list[str]:
    """`motifs` reads the sentence vectors of the graph's long texts: built before a sweep fans
    out (`Retriever.prepare`), not inside its first unnamed question."""
    if how != "motifs":
        return []
    _ = graph.passages
    return ["sentence vectors"]
