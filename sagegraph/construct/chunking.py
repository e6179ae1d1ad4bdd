"""SAGE semantic chunking (sage.txt §2.1 A.1).

Windows w_i = [s_(i-1), s_i, s_(i+1)] are embedded; s_i = cos(h_i, h_(i+1)); theta is the 20th
percentile of {s_i}; the text is cut after sentence i wherever s_i <= theta. Pieces below a minimum
size merge into a neighbour (a 2-sentence passage would otherwise always split), and pieces above a
maximum are cut again at their weakest boundary.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np


def window_texts(sentences: Sequence[str]) -> list[str]:
    n = len(sentences)
    return [" ".join(sentences[max(0, i - 1) : min(n, i + 2)]) for i in range(n)]


def adjacent_similarities(window_vectors: np.ndarray) -> np.ndarray:
    """Cosine of consecutive (normalised) window embeddings: len = n_sentences - 1."""
    if len(window_vectors) < 2:
        return np.zeros(0, dtype=np.float32)
    a, b = window_vectors[:-1], window_vectors[1:]
    denom = np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1)
    return (np.sum(a * b, axis=1) / np.maximum(denom, 1e-12)).astype(np.float32)


def percentile_threshold(similarities: np.ndarray, percentile: float) -> float:
    return float(np.percentile(similarities, percentile)) if len(similarities) else float("-inf")


def cut_positions(similarities: np.ndarray, theta: float) -> list[int]:
    """Indices i after which to cut (between sentence i and i+1)."""
    return [i for i, s in enumerate(similarities) if s <= theta]


def _split_long(start: int, end: int, sims: np.ndarray, lengths: list[int], max_chars: int) -> list[tuple[int, int]]:
    size = sum(lengths[start:end]) + (end - start - 1)
    if size <= max_chars or end - start < 2:
        return [(start, end)]
    inner = sims[start : end - 1]
    cut = start + int(np.argmin(inner))
    return _split_long(start, cut + 1, sims, lengths, max_chars) + _split_long(cut + 1, end, sims, lengths, max_chars)


def segment(
    sentences: Sequence[str], sims: np.ndarray, theta: float, min_chars: int = 0, max_chars: int = 10**9
) -> list[str]:
    """Group sentences into chunks given boundary similarities and a threshold."""
    n = len(sentences)
    if n == 0:
        return []
    bounds, start = [], 0
    for i in cut_positions(sims, theta):
        bounds.append((start, i + 1))
        start = i + 1
    bounds.append((start, n))
    lengths = [len(s) for s in sentences]

    def size(b: tuple[int, int]) -> int:
        return sum(lengths[b[0] : b[1]]) + (b[1] - b[0] - 1)

    merged: list[tuple[int, int]] = []
    for b in bounds:
        if merged and (size(merged[-1]) < min_chars or size(b) < min_chars):
            merged[-1] = (merged[-1][0], b[1])
        else:
            merged.append(b)
    pieces: list[tuple[int, int]] = []
    for b in merged:
        pieces.extend(_split_long(b[0], b[1], sims, lengths, max_chars))
    return [" ".join(sentences[a:b]) for a, b in pieces]


def cut_can_survive(sentences: Sequence[str], min_chars: int, max_chars: int) -> bool:
    """Whether a document's similarities can change its chunks (per-document scope).

    A cut survives merging only where the text before it and the text after it both reach min_chars,
    and a piece is re-split only above max_chars; with neither, the document is one chunk whatever
    its similarities are. Two sentences have one window text twice, so s_0 = theta and their cut is
    decided by length alone.
    """
    n = len(sentences)
    if n < 3:
        return False
    lengths = [len(s) for s in sentences]
    total = sum(lengths) + n - 1
    if total > max_chars:
        return True
    prefix = -1
    for length in lengths[:-1]:
        prefix += length + 1
        if prefix >= min_chars and total - prefix - 1 >= min_chars:
            return True
    return False


def chunk_documents(
    docs_sentences: Sequence[Sequence[str]],
    encode,
    percentile: float = 20.0,
    scope: str = "document",
    min_chars: int = 200,
    max_chars: int = 2000,
) -> list[list[str]]:
    """Chunk many documents with one batched encode of all their windows.

    `encode(texts) -> normalised vectors`. Window encoding is nearly all of a build's cost, so only
    documents whose chunks depend on their similarities are encoded: under per-document scope that
    is `cut_can_survive`; under corpus scope every document of 2+ sentences feeds the shared theta.
    """
    windows: list[str] = []
    spans: list[tuple[int, int]] = []
    encoded: list[Any] = []
    for sents in docs_sentences:
        start = len(windows)
        needed = cut_can_survive(sents, min_chars, max_chars) if scope == "document" else len(sents) > 1
        if needed:
            windows.extend(window_texts(sents))
        spans.append((start, len(windows)))
        encoded.append(needed)
    vecs = encode(windows) if windows else np.zeros((0, 1), dtype=np.float32)
    sims_per_doc = [adjacent_similarities(vecs[a:b]) for a, b in spans]
    global_theta = None
    if scope == "corpus":
        allsims = np.concatenate([s for s in sims_per_doc if len(s)] or [np.zeros(0)])
        global_theta = percentile_threshold(allsims, percentile)
    out = []
    for sents, sims, needed in zip(docs_sentences, sims_per_doc, encoded):
        if not needed and len(sents) == 2:
            sims = np.ones(1, dtype=np.float32)  # identical windows: what encoding them would give
        elif not needed:
            out.append([" ".join(sents)] if sents else [])
            continue
        theta = global_theta if global_theta is not None else percentile_threshold(sims, percentile)
        out.append(segment(sents, sims, theta, min_chars, max_chars))
    return out
