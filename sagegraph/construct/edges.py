"""SAGE similarity edges (sage.txt §2.1 B): per modality pair, several metadata signals; an edge is
kept when a signal exceeds its percentile (95th by default) over the candidate pairs, with OR logic
across signals (AND selectable).

Candidate pairs never come from all n² pairs: each node proposes its top-M neighbours per vector
signal (`ann_method`: exact where a side is small or a GPU is there, clustered search otherwise;
the same candidates whatever the thread count or device, `top_neighbours`) and every pair sharing
a not-too-common entity (inverted index with a document-frequency cap). Work is therefore O(n·M)
pairs.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Literal

import numpy as np
import scipy.sparse as sp

from sagegraph.config import EdgeConfig
from sagegraph.embed import pick_device
from sagegraph.model import DOC_CHUNK, ENTITY, NEXT_CHUNK, SAME_SOURCE, TABLE_CHUNK, Edge

log = logging.getLogger("sagegraph.edges")


@dataclass(frozen=True)
class Signal:
    name: str
    kind: Literal["vector", "entity"]
    field_a: str = ""
    field_b: str = ""


ENTITY_OVERLAP = Signal("entity", "entity")
PAIR_SIGNALS: dict[tuple[str, str], tuple[Signal, ...]] = {
    (DOC_CHUNK, DOC_CHUNK): (
        Signal("topic", "vector", "topic", "topic"),
        Signal("content", "vector", "content", "content"),
        ENTITY_OVERLAP,
    ),
    (TABLE_CHUNK, TABLE_CHUNK): (
        Signal("column", "vector", "columns", "columns"),
        Signal("title", "vector", "title", "title"),
        ENTITY_OVERLAP,
    ),
    (DOC_CHUNK, TABLE_CHUNK): (
        Signal("content_column", "vector", "content", "columns"),
        Signal("topic_title", "vector", "topic", "title"),
        ENTITY_OVERLAP,
    ),
    (ENTITY, ENTITY): (Signal("description", "vector", "content", "content"), ENTITY_OVERLAP),
}


@dataclass
class PairResult:
    """Candidates with their signal values, the thresholds and what was kept: stats read this."""

    pair: tuple[str, str]
    signals: list[str]
    a: np.ndarray
    b: np.ndarray
    values: np.ndarray  # (n_candidates, n_signals)
    thresholds: np.ndarray
    keep: np.ndarray
    seconds: dict[str, float] = field(default_factory=dict)

    @property
    def n_candidates(self) -> int:
        return len(self.a)


# ---- candidates -----------------------------------------------------------------------------------


def ann_method(n_queries: int, n_base: int, params: EdgeConfig) -> str:
    """auto: exact search when either side is small (n_queries x n_base is then cheaper than any
    index, e.g. 1,257 tables proposing among 29,698 passages); otherwise clustered search, whose
    cost stays linear in the input where HNSW's grew 7-8x for 4x the nodes on this machine."""
    if params.ann != "auto":
        return params.ann
    if gpu_available():
        return "exact-gpu"  # exact, and on a GPU faster than either index on the CPU
    return "flat" if min(n_queries, n_base) < params.flat_below else "cluster"


def gpu_available() -> bool:
    """Whether the search can run on a GPU, answered without importing torch (seconds, in a
    process that has not) on a machine with no GPU device nodes (`embed.pick_device`)."""
    return pick_device() == "cuda"


# A search ranks its neighbours by scores from a matrix product, whose last bits depend on the
# thread count, the BLAS kernel and the device; a neighbour at the top-M boundary (exact duplicates,
# common among tables' column lists, tie to the last bit) then falls either side of it. Where the
# M-th and the next score are that close, the proposals are re-scored pair by pair (`pair_cosine`,
# the same arithmetic as the signal values) and ranked by (score, node), so one machine gives one
# candidate set however many threads it runs, and a GPU's exact search the CPU's flat search's.
# A search answers (scores, base rows), both (n_queries, m), -1 rows padded with -inf scores.
Search = Callable[[np.ndarray, int], tuple[np.ndarray, np.ndarray]]
MAX_PROPOSALS = 16  # x m: a bound on memory where near-equal neighbours run on
SCORE_TOLERANCE = 1e-4  # well above fp32 rounding of a 384-d cosine (~1e-6), below the spacing of real scores


def exact_search(
    query: np.ndarray, base: np.ndarray, m: int, device: str = "cuda", block: int = 4096
) -> tuple[np.ndarray, np.ndarray]:
    """Exact top-m inner-product neighbours, (scores, base rows): blocks of queries against the
    whole base as one matrix product each, on `device` (a GPU; "cpu" in tests). The same rows as
    faiss's flat index, up to ties."""
    import torch

    base_t = torch.from_numpy(base).to(device)
    scores = np.empty((len(query), m), np.float32)
    rows = np.empty((len(query), m), np.int64)
    for start in range(0, len(query), block):
        part = torch.from_numpy(query[start : start + block]).to(device)
        top = torch.topk(part @ base_t.T, m, dim=1)
        scores[start : start + len(part)] = top.values.cpu().numpy()
        rows[start : start + len(part)] = top.indices.cpu().numpy()
    return scores, rows


class ClusterIndex:
    """Approximate inner-product search over `base`.

    Spherical k-means cuts the base into cells of about `size` nodes; every query is scored exactly
    against the members of its `probes` nearest cells. Work runs cell by cell: one matrix product
    of a cell's members with all queries that probe it, then a running top-m per query. Work per
    query is fixed (probes x size dot products), so the search grows linearly with the corpus, and
    it runs as cache-friendly GEMM blocks rather than a graph walk over the whole base. On OTT-QA
    passages (probes=16) it finds 95% of the exact top-50 in a third of HNSW's time.

    The cells are trained and assigned on one thread: a point near two centroids would otherwise
    join one or the other with the thread count, and change the candidates of every query there.
    """

    def __init__(
        self, base: np.ndarray, size: int = 256, probes: int = 16, seed: int = 0, trained_on: np.ndarray | None = None
    ) -> None:
        """`trained_on`: the vectors the cells are drawn from (the base by default; the rows behind
        a base of distinct vectors, so that the cells are those of the rows themselves)."""
        import faiss  # here, not at module top: chunk and embed workers import this module and never search

        self.base = base
        training = base if trained_on is None else trained_on
        self.n_cells = max(1, len(training) // size)
        self.probes = min(probes, self.n_cells)
        self.kmeans = None
        if self.n_cells == 1:
            self.cells = [np.arange(len(base))]
            return
        with _one_thread():
            self.kmeans = faiss.Kmeans(
                base.shape[1], self.n_cells, niter=10, spherical=True, seed=seed, max_points_per_centroid=64
            )
            self.kmeans.train(training)
            self.cells = _split_by(self.kmeans.index.search(base, 1)[1][:, 0], self.n_cells)

    def search(self, query: np.ndarray, m: int) -> tuple[np.ndarray, np.ndarray]:
        """(scores, base rows), both (n_queries, m), -1 padded where the probed cells hold fewer.
        Per cell, one matrix product of its askers with its members (numpy's BLAS over every
        core), then each asker whose best score there beats the worst of its m so far takes its
        new m from those and the cell's scores in one selection: at a PRIME-sized KB's shape this
        ran in about half the time of faiss's exact search per cell, which keeps a heap per query
        (docs/scale.md). torch is not imported for it: a rebuild's process that encodes in a child
        (`embed.EncoderProcess`) would import it for this alone."""
        if self.kmeans is None:
            askers = [np.arange(len(query))]
        else:
            with _one_thread():
                wanted = self.kmeans.index.search(query, self.probes)[1].reshape(-1)  # each query's nearest cells
            asking_row = np.repeat(np.arange(len(query)), self.probes)
            askers = [asking_row[i] for i in _split_by(wanted, self.n_cells)]
        best_s = np.full((len(query), m), -np.inf, np.float32)
        best_i = np.full((len(query), m), -1, np.int64)
        for members, rows in zip(self.cells, askers):
            if len(members) == 0 or len(rows) == 0:  # k-means can leave a cell empty
                continue
            scores = query[rows] @ self.base[members].T
            held = best_s[rows]
            better = scores.max(1) > held.min(1)  # an asker this cell cannot change is left as it is
            if not better.all():
                rows, scores, held = rows[better], scores[better], held[better]
            merged = np.concatenate([held, scores], 1)
            top = np.argpartition(-merged, m - 1, axis=1)[:, :m]
            from_cell = top >= m  # the rest are kept from the asker's m so far
            kept = np.take_along_axis(best_i[rows], np.where(from_cell, 0, top), 1)
            best_i[rows] = np.where(from_cell, members[np.where(from_cell, top - m, 0)], kept)
            best_s[rows] = np.take_along_axis(merged, top, 1)
        return best_s, best_i


def cluster_search(
    query: np.ndarray, base: np.ndarray, m: int, size: int = 256, probes: int = 16, seed: int = 0
) -> np.ndarray:
    """`ClusterIndex`'s approximate top-m neighbours, (n_queries, m) base rows, -1 padded."""
    return ClusterIndex(base, size, probes, seed).search(query, m)[1]


@contextmanager
def _one_thread() -> Iterator[None]:
    import faiss
    from threadpoolctl import threadpool_limits

    threads = faiss.omp_get_max_threads()
    faiss.omp_set_num_threads(1)
    try:
        with threadpool_limits(1):
            yield
    finally:
        faiss.omp_set_num_threads(threads)


def _split_by(labels: np.ndarray, n: int) -> list[np.ndarray]:
    order = np.argsort(labels, kind="stable")
    return np.split(order, np.searchsorted(labels[order], np.arange(1, n)))


def searcher(
    base: np.ndarray, method: str, params: EdgeConfig, rows: np.ndarray | None = None, device: str = "cuda"
) -> Search:
    """A search over `base` by `method`, its index made once and asked as often as ranking needs;
    `rows`: the vectors a base of distinct vectors stands for (the clusters are drawn from them);
    `device`: where `exact-gpu` runs ("cpu" in tests and checks)."""
    if method == "cluster":
        return ClusterIndex(base, params.cluster_size, params.cluster_probes, trained_on=rows).search
    if method == "exact-gpu":
        return lambda query, m: exact_search(query, base, m, device=device)
    import faiss

    index: faiss.Index
    if method == "hnsw":
        hnsw = faiss.IndexHNSWFlat(base.shape[1], params.hnsw_m, faiss.METRIC_INNER_PRODUCT)
        hnsw.hnsw.efConstruction = 80
        hnsw.add(base)

        def search_hnsw(query: np.ndarray, m: int) -> tuple[np.ndarray, np.ndarray]:
            hnsw.hnsw.efSearch = max(64, 2 * m)
            return hnsw.search(query, m)

        return search_hnsw
    index = faiss.IndexFlatIP(base.shape[1])
    index.add(base)
    return lambda query, m: index.search(query, m)


def top_neighbours(
    query: np.ndarray, base: np.ndarray, m: int, search: Search, tolerance: float = SCORE_TOLERANCE
) -> np.ndarray:
    """Each query's m best base rows, (n_queries, m), -1 padded.

    The search proposes a half more than m. Its own scores decide where its m-th and the next
    proposal are more than `tolerance` apart: no rounding can reorder them there. Elsewhere the
    proposals are re-scored and ranked by (score, row); where the last still scores within
    `tolerance` of the m-th (a run of near-equal neighbours that may go on past what was proposed),
    the query is asked again for twice as many, until the run ends inside the proposals, the base is
    exhausted or `MAX_PROPOSALS` x m were asked for (past that, ties within the run go by the
    proposals')."""
    k = min(len(base), m + max(8, m // 2))
    scores, found = search(query, k)
    scores = np.where(found >= 0, scores, -np.inf)
    order = np.argsort(-scores, axis=1, kind="stable")
    found, scores = np.take_along_axis(found, order, 1), np.take_along_axis(scores, order, 1)
    out = np.ascontiguousarray(found[:, :m])
    if k == m:  # the whole base proposed: nothing lies past the boundary
        return out
    rows = np.flatnonzero((found[:, m] >= 0) & (scores[:, m - 1] - scores[:, m] < tolerance))
    proposed = found[rows]  # a search proposes as cheaply a half more as one more (the clustered one)
    while len(rows):
        ranked, rescored = _rescored(query[rows], base, proposed)
        out[rows] = ranked[:, :m]
        if k >= min(len(base), MAX_PROPOSALS * m):
            break
        unsettled = (ranked[:, k - 1] >= 0) & (rescored[:, k - 1] >= rescored[:, m - 1] - tolerance)
        rows, k = rows[unsettled], min(len(base), MAX_PROPOSALS * m, 2 * k)
        if len(rows):
            proposed = search(query[rows], k)[1]
    return out


def _rescored(query: np.ndarray, base: np.ndarray, proposed: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Proposals (rows x k base rows) ordered per row by re-scored cosine, then row; pads last."""
    n, k = proposed.shape
    row = np.repeat(np.arange(n), k)
    node = proposed.reshape(-1)
    scores = np.full(n * k, -np.inf, np.float32)
    real = node >= 0
    scores[real] = pair_cosine(query, base, row[real], node[real])
    order = np.lexsort((node, -scores, row))
    return node[order].reshape(n, k), scores[order].reshape(n, k)


def ann_pairs(
    query: np.ndarray, q_ids: np.ndarray, base: np.ndarray, b_ids: np.ndarray, params: EdgeConfig
) -> tuple[np.ndarray, np.ndarray]:
    """Each query node's top-M base nodes (self excluded): (query ids, base ids).

    The search runs over the base's distinct vectors: nodes of one text share one vector (the
    embedding cache keeps the first), and a KB where thousands of nodes read alike would otherwise
    be one run of tied neighbours as long as the KB. A distinct vector stands for its nodes, taken
    in row order until M are taken."""
    if len(query) == 0 or len(base) == 0:
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    m = min(params.top_m + 1, len(base))
    nn = nearest(query, base, m, ann_method(len(query), len(base), params), params)
    qa = np.repeat(q_ids, m)
    nb = nn.reshape(-1)
    ok = nb >= 0
    qa, bb = qa[ok], b_ids[nb[ok]]
    ok = qa != bb
    return qa[ok], bb[ok]


def nearest(
    query: np.ndarray, base: np.ndarray, m: int, method: str, params: EdgeConfig, device: str = "cuda"
) -> np.ndarray:
    """Each query's m nearest base rows by `method`, (n_queries, m), -1 padded: the search over the
    base's distinct vectors, re-scored where near-equal (`top_neighbours`), as rows (`Alike`)."""
    query = np.ascontiguousarray(query, dtype=np.float32)
    base = np.ascontiguousarray(base, dtype=np.float32)
    alike = Alike.of(base)
    search = searcher(alike.vectors, method, params, rows=base, device=device)
    return alike.rows_of(top_neighbours(query, alike.vectors, min(m, len(alike.vectors)), search), m)


@dataclass(frozen=True)
class Alike:
    """A matrix's distinct rows, in the order of their first row, and the rows each stands for."""

    vectors: np.ndarray  # (n_distinct, dim)
    members: np.ndarray  # every row, grouped by its distinct vector, ascending within a group
    starts: np.ndarray  # where each distinct vector's rows begin in `members`
    counts: np.ndarray

    @classmethod
    def of(cls, matrix: np.ndarray) -> Alike:
        """Rows compared byte for byte, only among those whose two random projections coincide (a
        row's bytes sorted whole took a second at 129k rows; the projections, milliseconds). Two
        equal rows a projection happened to read apart stay two vectors, which ranks them alike."""
        projection = np.random.default_rng(0).standard_normal((matrix.shape[1], 2)).astype(matrix.dtype)
        keys = np.ascontiguousarray(matrix @ projection).view(np.dtype((np.void, 2 * matrix.dtype.itemsize))).ravel()
        _, key_of, key_counts = np.unique(keys, return_inverse=True, return_counts=True)
        maybe = np.flatnonzero(key_counts[key_of.reshape(-1)] > 1)
        first_row = np.arange(len(matrix))
        if len(maybe):
            flat = matrix[maybe].view(np.dtype((np.void, matrix.dtype.itemsize * matrix.shape[1]))).ravel()
            _, first, inverse = np.unique(flat, return_index=True, return_inverse=True)
            first_row[maybe] = maybe[first[inverse.reshape(-1)]]  # `maybe` ascends: the group's lowest row
        distinct = np.flatnonzero(first_row == np.arange(len(matrix)))
        if len(distinct) == len(matrix):
            return cls(matrix, first_row, first_row, np.ones(len(matrix), np.int64))
        group = np.searchsorted(distinct, first_row)
        members = np.argsort(group, kind="stable")
        counts = np.bincount(group, minlength=len(distinct))
        return cls(matrix[distinct], members, np.cumsum(counts) - counts, counts)

    def rows_of(self, neighbours: np.ndarray, m: int) -> np.ndarray:
        """(n_queries, m) rows: each query's distinct neighbours, in order, as their rows, the first m."""
        if len(self.vectors) == len(self.members):  # every row distinct: the search asked for m of them
            return neighbours
        found = neighbours >= 0
        counts = np.where(found, self.counts[np.maximum(neighbours, 0)], 0)
        before = np.cumsum(counts, axis=1) - counts
        take = np.clip(m - before, 0, counts).reshape(-1)
        starts = self.starts[np.maximum(neighbours, 0)].reshape(-1)
        query_row = np.repeat(np.arange(len(neighbours)), neighbours.shape[1])
        out = np.full((len(neighbours), m), -1, np.int64)
        out[np.repeat(query_row, take), ranges(before.reshape(-1), take)] = self.members[ranges(starts, take)]
        return out


def entity_matrix(entity_sets: list[set[str]]) -> tuple[sp.csr_matrix, list[str]]:
    vocab: dict[str, int] = {}
    rows, cols = [], []
    for i, ents in enumerate(entity_sets):
        for e in ents:
            rows.append(i)
            cols.append(vocab.setdefault(e, len(vocab)))
    m = sp.csr_matrix((np.ones(len(rows), np.float32), (rows, cols)), shape=(len(entity_sets), max(1, len(vocab))))
    m.data[:] = 1.0
    names = [""] * len(vocab)
    for k, v in vocab.items():
        names[v] = k
    return m, names


def ranges(starts: np.ndarray, counts: np.ndarray) -> np.ndarray:
    """The positions start, start+1, ..., start+count-1 of every (start, count), concatenated."""
    counts = np.asarray(counts, np.int64)
    return np.repeat(np.asarray(starts, np.int64) - (np.cumsum(counts) - counts), counts) + np.arange(counts.sum())


def entity_pairs(E: sp.csr_matrix, a_ids: np.ndarray, b_ids: np.ndarray, max_df: int) -> tuple[np.ndarray, np.ndarray]:
    """Pairs (a in A, b in B) sharing an entity whose postings are at most max_df long, i.e. the
    cross product of every such entity's A postings with its B postings, built for all entities
    at once (a corpus has ~120k of them; a Python loop over them took 0.25 s per modality pair)."""
    Ec = E.tocsc()
    df = np.diff(Ec.indptr)
    eligible = (df >= 2) & (df <= max_df)
    col = np.repeat(np.arange(Ec.shape[1]), df)  # each posting's entity
    keep = eligible[col]
    col, node = col[keep], Ec.indices[keep].astype(np.int64)  # ascending by entity, then node
    in_a = np.zeros(E.shape[0], bool)
    in_a[a_ids] = True
    in_b = np.zeros(E.shape[0], bool)
    in_b[b_ids] = True
    a_col, a_node = col[in_a[node]], node[in_a[node]]
    b_col, b_node = col[in_b[node]], node[in_b[node]]
    b_start = np.searchsorted(b_col, np.arange(Ec.shape[1] + 1))
    reps = (b_start[1:] - b_start[:-1])[a_col]  # each A posting meets every B posting of its entity
    a, b = np.repeat(a_node, reps), b_node[ranges(b_start[a_col], reps)]
    ok = a != b
    return a[ok], b[ok]


def canonical_pairs(a: np.ndarray, b: np.ndarray, same_modality: bool, n: int) -> tuple[np.ndarray, np.ndarray]:
    """Deduplicate; within one modality (i, j) and (j, i) are one undirected pair. Pairs come out
    sorted by (a, b), so later row gathers walk `a` in order. Below 65,536 nodes a pair fits a
    32-bit key, which sorts in 0.6x the time of a 64-bit one."""
    if same_modality:
        a, b = np.minimum(a, b), np.maximum(a, b)
    keys = a.astype(np.int64, copy=False) * n + b
    if n * n <= np.iinfo(np.uint32).max:
        keys = keys.astype(np.uint32)
    keys.sort()
    keys = keys[np.concatenate([[True], keys[1:] != keys[:-1]])] if len(keys) else keys
    first = (keys // n).astype(np.int64)
    return first, keys.astype(np.int64) - first * n


# ---- signals ----------------------------------------------------------------------------------


def pair_cosine(va: np.ndarray, vb: np.ndarray, a: np.ndarray, b: np.ndarray, chunk: int = 256) -> np.ndarray:
    """Small chunks keep the gathered rows in cache: on OTT-QA's 2-2.6M candidate pairs, 256 rows
    per chunk took 0.39-0.40 s per signal, 2,048 rows 0.63-0.70 s and 200k rows ~3x that."""
    out = np.empty(len(a), np.float32)
    for s in range(0, len(a), chunk):
        out[s : s + chunk] = np.einsum("ij,ij->i", va[a[s : s + chunk]], vb[b[s : s + chunk]])
    return out


def pair_jaccard(E: sp.csr_matrix, a: np.ndarray, b: np.ndarray, chunk: int = 200_000) -> np.ndarray:
    sizes = np.asarray(E.sum(axis=1)).ravel()
    out = np.empty(len(a), np.float32)
    for s in range(0, len(a), chunk):
        ia, ib = a[s : s + chunk], b[s : s + chunk]
        inter = np.asarray(E[ia].multiply(E[ib]).sum(axis=1)).ravel()
        union = sizes[ia] + sizes[ib] - inter
        out[s : s + chunk] = np.where(union > 0, inter / np.maximum(union, 1), 0.0)
    return out


def thresholds_for(values: np.ndarray, percentile: float) -> np.ndarray:
    if len(values) == 0:
        return np.full(values.shape[1], np.inf, np.float32)
    return np.percentile(values, percentile, axis=0).astype(np.float32)


def select(values: np.ndarray, thresholds: np.ndarray, logic: str) -> np.ndarray:
    """OR: any signal strictly above its threshold; AND: all of them."""
    above = values > thresholds[None, :]
    return above.any(axis=1) if logic == "or" else above.all(axis=1)


# ---- one modality pair ---------------------------------------------------------------------------


def similarity_pair(
    pair: tuple[str, str],
    modality: np.ndarray,
    source: np.ndarray,
    vectors: dict[str, np.ndarray],
    E: sp.csr_matrix,
    params: EdgeConfig,
) -> PairResult:
    """Candidates, signal values, thresholds and keep-mask for one modality pair."""
    ma, mb = pair
    signals = PAIR_SIGNALS[pair]
    a_ids = np.flatnonzero(modality == ma)
    b_ids = np.flatnonzero(modality == mb)
    same = ma == mb
    n = len(modality)
    t0 = time.perf_counter()
    cand_a, cand_b = [], []
    for sig in signals:
        if sig.kind != "vector":
            continue
        qa, qb = ann_pairs(vectors[sig.field_a][a_ids], a_ids, vectors[sig.field_b][b_ids], b_ids, params)
        cand_a.append(qa)
        cand_b.append(qb)
        if not same:  # cross-modal: both sides propose their neighbours
            qb2, qa2 = ann_pairs(vectors[sig.field_b][b_ids], b_ids, vectors[sig.field_a][a_ids], a_ids, params)
            cand_a.append(qa2)
            cand_b.append(qb2)
    ea, eb = entity_pairs(E, a_ids, b_ids, params.entity_max_df)
    cand_a.append(ea)
    cand_b.append(eb)
    a = np.concatenate(cand_a) if cand_a else np.zeros(0, np.int64)
    b = np.concatenate(cand_b) if cand_b else np.zeros(0, np.int64)
    a, b = canonical_pairs(a, b, same, n)  # cross-modal pairs were built A side first and stay so
    source_code = np.unique(source, return_inverse=True)[1]
    ok = source_code[a] != source_code[b]  # chunks of one source are linked structurally instead
    a, b = a[ok], b[ok]
    t1 = time.perf_counter()
    values = np.zeros((len(a), len(signals)), np.float32, order="F")  # a signal's column is contiguous
    for k, sig in enumerate(signals):
        if sig.kind == "vector":
            values[:, k] = pair_cosine(vectors[sig.field_a], vectors[sig.field_b], a, b)
        else:
            values[:, k] = pair_jaccard(E, a, b)
    thr = thresholds_for(values, params.percentile)
    keep = select(values, thr, params.logic)
    t2 = time.perf_counter()
    log.info("%s-%s: %d candidates, %d kept", ma, mb, len(a), int(keep.sum()))
    return PairResult(
        pair, [s.name for s in signals], a, b, values, thr, keep, {"candidates": t1 - t0, "signals": t2 - t1}
    )


# ---- structural -----------------------------------------------------------------------------------


def structural_edges(ids: list[str], sources: list[str], positions: list[int], max_same_source: int = 20) -> list[Edge]:
    """NEXT_CHUNK between consecutive chunks; SAME_SOURCE between all chunks of a source (a star on
    its first chunk when a source has more than max_same_source chunks, to stay linear)."""
    by_source: dict[str, list[tuple[int, str]]] = {}
    for nid, src, pos in zip(ids, sources, positions):
        by_source.setdefault(src, []).append((pos, nid))
    edges = []
    for src, items in by_source.items():
        items.sort()
        chunk_ids = [nid for _, nid in items]
        for x, y in zip(chunk_ids, chunk_ids[1:]):
            edges.append(Edge(x, y, NEXT_CHUNK, 1.0, {"source_id": src}))
        if len(chunk_ids) <= max_same_source:
            pairs = [(chunk_ids[i], chunk_ids[j]) for i in range(len(chunk_ids)) for j in range(i + 1, len(chunk_ids))]
        else:
            pairs = [(chunk_ids[0], other) for other in chunk_ids[1:]]
        edges.extend(Edge(x, y, SAME_SOURCE, 1.0, {"source_id": src}) for x, y in pairs)
    return edges
