"""Sentence vectors of long node texts, scored per node by its best sentence.

One vector per node cannot find a node by what one sentence of a long text says: a film's
description of 150 words embeds as its filler ("the score mixes orchestral themes ..."), and a
question naming three of its motifs ranks it among thousands (the synthetic KB's descriptive
questions: gold at rank 81-5,572 of 8,000 films by the node vector, first among 400 by the sum
over the motifs of each one's best sentence). So a node whose text has several sentences gets a
vector per sentence, and a phrase scores a node by its closest sentence (ColBERT's MaxSim with
sentences for tokens).

Built on first use from the graph's own texts and encoder, saved beside the graph (as BM25's
index is) with what it was built from, so a changed graph or encoder builds it again and an
unchanged one never does.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np

from sagegraph.index.sentences import split_sentences
from sagegraph.runfiles import replaced, write_text_whole

log = logging.getLogger("sagegraph.index")
MIN_SENTENCES = 3  # fewer: the node vector already reads them all


class PassageIndex:
    def __init__(self, vectors: np.ndarray, owner: np.ndarray, n_rows: int):
        self.vectors = np.ascontiguousarray(vectors, dtype=np.float32)
        self.owner = np.asarray(owner, dtype=np.int64)
        self.n_rows = n_rows

    @classmethod
    def build(
        cls, texts: Sequence[str], encode: Callable[[list[str]], np.ndarray], min_sentences: int = MIN_SENTENCES
    ) -> PassageIndex:
        sentences: list[str] = []
        owner: list[int] = []
        for row, text in enumerate(texts):
            parts = split_sentences(text)
            if len(parts) >= min_sentences:
                sentences += parts
                owner += [row] * len(parts)
        # a sentence repeated across nodes (boilerplate, a template's filler) is encoded once
        unique = list(dict.fromkeys(sentences))
        at = {text: i for i, text in enumerate(unique)}
        vectors = (
            np.asarray(encode(unique), dtype=np.float32)[[at[x] for x in sentences]]
            if sentences
            else np.zeros((0, 1), np.float32)
        )
        if len(vectors):
            vectors /= np.maximum(np.linalg.norm(vectors, axis=1, keepdims=True), 1e-12)
        return cls(vectors, np.array(owner, dtype=np.int64), len(texts))

    @classmethod
    def load_or_build(
        cls, path: Path, texts: Sequence[str], encode: Callable[[list[str]], np.ndarray], built_from: str
    ) -> PassageIndex:
        """The saved index if it was built from `built_from` (the graph's node fingerprint and the
        encoder's name), else a new one, each file written whole (`runfiles.replaced`: two processes
        building at once both publish a whole file; the later rename wins)."""
        meta, data = path / "meta.json", path / "passages.npz"
        if meta.exists() and data.exists():
            try:
                if json.loads(meta.read_text()).get("built_from") == built_from:
                    z = np.load(data)
                    return cls(z["vectors"], z["owner"], len(texts))
            except (OSError, ValueError, KeyError):
                pass  # unreadable: build again
        t0 = time.perf_counter()
        log.info("building sentence vectors of long node texts in %s (once per graph)", path)
        index = cls.build(texts, encode)
        with replaced(data, suffix=".npz") as tmp:
            np.savez(tmp, vectors=index.vectors, owner=index.owner)
        write_text_whole(
            meta,
            json.dumps(
                {
                    "built_from": built_from,
                    "sentences": int(len(index.owner)),
                    "nodes": int(len(np.unique(index.owner))),
                    "seconds": round(time.perf_counter() - t0, 1),
                }
            ),
        )
        return index

    def best(self, query_vector: np.ndarray, rows: np.ndarray) -> np.ndarray:
        """Each row's best sentence cosine with the query; NaN for a row without sentences."""
        rows = np.asarray(rows, dtype=np.int64)
        out = np.full(len(rows), np.nan, dtype=np.float32)
        if not len(self.owner) or not len(rows):
            return out
        position = np.full(self.n_rows, -1, dtype=np.int64)
        position[rows] = np.arange(len(rows))
        mine = position[self.owner] >= 0
        if not mine.any():
            return out
        scores = self.vectors[mine] @ np.asarray(query_vector, dtype=np.float32)
        best = np.full(len(rows), -np.inf, dtype=np.float32)
        np.maximum.at(best, position[self.owner[mine]], scores)
        out[np.isfinite(best)] = best[np.isfinite(best)]
        return out
