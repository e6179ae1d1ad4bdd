"""Score normalisation and linear fusion of sparse and dense scores (SAGE: alpha=0.6 BM25, 0.4 dense)."""

from __future__ import annotations

import numpy as np


def minmax(x: np.ndarray) -> np.ndarray:
    """Per-query min-max to [0, 1]; a constant vector maps to zeros (it carries no ranking signal)."""
    if len(x) == 0:
        return x.astype(np.float32)
    lo, hi = float(x.min()), float(x.max())
    if hi - lo < 1e-12:
        return np.zeros_like(x, dtype=np.float32)
    return ((x - lo) / (hi - lo)).astype(np.float32)


def fuse(bm25: np.ndarray, dense: np.ndarray, alpha: float) -> np.ndarray:
    return alpha * minmax(bm25) + (1.0 - alpha) * minmax(dense)


def rank(scores: np.ndarray, ids: np.ndarray, k: int) -> np.ndarray:
    """Positions of the top k by (-score, id): deterministic ties (EVAL.md)."""
    order = np.lexsort((ids, -scores))
    return order[:k]
