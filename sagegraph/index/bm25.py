"""BM25 over node texts with bm25s (sparse precomputed scores: a query costs the postings of its
terms), English stopwords and a Snowball stemmer. Persisted beside the graph so evaluation runs do
not re-index."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from pathlib import Path

import bm25s
import numpy as np
import Stemmer

# bm25s sets its own logger to DEBUG on import, which printed "Building index from IDs objects"
# into every sweep's output; its warnings still come through.
logging.getLogger("bm25s").setLevel(logging.WARNING)


class BM25Index:
    def __init__(self, retriever: bm25s.BM25):
        self.retriever = retriever
        self.stemmer = Stemmer.Stemmer("english")
        self.n = int(retriever.scores["num_docs"])

    @classmethod
    def build(cls, texts: Sequence[str]) -> BM25Index:
        stemmer = Stemmer.Stemmer("english")
        tokens = bm25s.tokenize(list(texts), stopwords="en", stemmer=stemmer, show_progress=False)
        retriever = bm25s.BM25()
        retriever.index(tokens, show_progress=False)
        return cls(retriever)

    def save(self, path: Path) -> None:
        self.retriever.save(str(path))

    @classmethod
    def load(cls, path: Path) -> BM25Index:
        return cls(bm25s.BM25.load(str(path)))

    @classmethod
    def load_or_build(cls, path: Path, texts: Sequence[str]) -> BM25Index:
        if (path / "params.index.json").exists():
            index = cls.load(path)
            if index.n == len(texts):
                return index
        index = cls.build(texts)
        index.save(path)
        return index

    def query_tokens(self, query: str) -> list[str]:
        toks = bm25s.tokenize([query], stopwords="en", stemmer=self.stemmer, return_ids=False, show_progress=False)[0]
        vocab = self.retriever.vocab_dict
        return [t for t in toks if t in vocab]

    def scores(self, query: str) -> np.ndarray:
        """BM25 score of every document (zeros when no query term is in the vocabulary)."""
        toks = self.query_tokens(query)
        if not toks:
            return np.zeros(self.n, dtype=np.float32)
        return np.asarray(self.retriever.get_scores(toks), dtype=np.float32)

    def top(self, query: str, k: int) -> tuple[np.ndarray, np.ndarray]:
        s = self.scores(query)
        return top_k(s, k)


def words(text: str) -> list[str]:
    """The words BM25 reads in `text` (bm25s' tokeniser and English stopwords), lower case and
    unstemmed, each once: phrases to embed, not index terms."""
    toks = bm25s.tokenize([text], stopwords="en", return_ids=False, show_progress=False)[0]
    return list(dict.fromkeys(toks))


def idf(scores: np.ndarray) -> float:
    """BM25's (Lucene's) inverse document frequency of a word, from its one-word query's scores
    over every document (a document that holds it scores above 0)."""
    n, df = len(scores), int(np.count_nonzero(scores))
    return float(np.log((n - df + 0.5) / (df + 0.5) + 1.0))


def top_k(scores: np.ndarray, k: int, ids: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Indices and scores of the k best, ties broken by index (EVAL.md: by (-score, id)); the caller
    maps indices to ids in id order where that matters."""
    k = min(k, len(scores))
    if k <= 0:
        return np.zeros(0, np.int64), np.zeros(0, np.float32)
    part = np.argpartition(-scores, k - 1)[:k] if k < len(scores) else np.arange(len(scores))
    order = np.lexsort((part if ids is None else ids[part], -scores[part]))
    idx = part[order]
    return idx, scores[idx]
