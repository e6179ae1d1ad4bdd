"""Dense search over L2-normalised node vectors with faiss: exact inner product by default, HNSW
(M=64, as in SAGE) selectable."""

from __future__ import annotations

from typing import Literal

import faiss
import numpy as np


class DenseIndex:
    def __init__(
        self, vectors: np.ndarray, kind: Literal["flat", "hnsw"] = "flat", hnsw_m: int = 64, ef_search: int = 128
    ):
        self.vectors = np.ascontiguousarray(vectors, dtype=np.float32)
        d = self.vectors.shape[1]
        self.index: faiss.Index
        if kind == "hnsw":
            self.index = faiss.IndexHNSWFlat(d, hnsw_m, faiss.METRIC_INNER_PRODUCT)
            self.index.hnsw.efSearch = ef_search
        else:
            self.index = faiss.IndexFlatIP(d)
        self.index.add(self.vectors)
        self.kind = kind

    def search(self, query: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        k = min(k, len(self.vectors))
        scores, idx = self.index.search(np.ascontiguousarray(query.reshape(1, -1), dtype=np.float32), k)
        ok = idx[0] >= 0
        return idx[0][ok].astype(np.int64), scores[0][ok]

    def scores_for(self, query: np.ndarray, idx: np.ndarray) -> np.ndarray:
        """Exact cosine for given nodes: reranking a neighbourhood costs O(|idx|·d)."""
        return self.vectors[idx] @ query.astype(np.float32)
