"""A built graph opened for retrieval: node table, BM25 and dense indexes, CSR adjacency, and the
query encoder. Indexes load lazily; per-query BM25 scores and query vectors are memoised so that
several retrievers over the same question (a sweep) compute them once.

Contract: rows are positions in nodes.parquet, fixed for the life of the object; `ids`,
`source_ids`, `types` and every vector file are row-aligned; `rows_of_type` and `rows_for_ids`
map a store's answers (node ids or KB object ids) back to rows. Thread-safe for reads: the memo
is the only shared state, and a lost race only computes a value twice."""

from __future__ import annotations

import json
from collections import OrderedDict
from functools import cached_property, lru_cache
from pathlib import Path
from typing import Literal

import numpy as np
import pyarrow.parquet as pq

from sagegraph.embed import Encoder, cached_if_writable, make_encoder
from sagegraph.errors import SageGraphError
from sagegraph.graph import Adjacency
from sagegraph.index.bm25 import BM25Index
from sagegraph.index.dense import DenseIndex
from sagegraph.index.passages import PassageIndex
from sagegraph.runlock import GenerationGone, ReaderLease


@lru_cache(maxsize=4)
def open_graph(graph_dir: str) -> GraphIndex:
    """One GraphIndex per process (and per Dask worker) and graph: indexes load once per sweep."""
    return GraphIndex(Path(graph_dir))


class GraphIndex:
    def __init__(
        self,
        graph_dir: Path,
        encoder: Encoder | None = None,
        dense_kind: Literal["flat", "hnsw"] = "flat",
        memo: int = 4096,
    ):
        given = Path(graph_dir)
        # Pinned: a build's `out/graph` is a link to its published generation, and every file of
        # this index (some read lazily) comes from the one it named now, whatever a rebuild
        # publishes meanwhile. `out` stays the build's folder (its runs, its reply cache).
        # A reader's lease keeps a rebuild from deleting the generation (and its store graph)
        # while this object reads it; one retired in the instant before the lease is resolved again.
        self.dir = given.resolve()
        self.out = given.parent.parent if given.parent.name == "graphs" else given.parent
        if not (self.dir / "nodes.parquet").exists():
            raise SageGraphError(
                f"{self.dir}: no built graph here (nodes.parquet missing); run `sagegraph build` first"
            )
        try:
            self.lease = ReaderLease(self.dir)
        except GenerationGone:
            self.dir = given.resolve()
            self.lease = ReaderLease(self.dir)
        nodes = pq.read_table(
            self.dir / "nodes.parquet", columns=["id", "modality", "type", "source_id", "text", "title"]
        )
        self.ids = np.array(nodes.column("id").to_pylist(), dtype=object)
        self.source_ids = np.array(nodes.column("source_id").to_pylist(), dtype=object)
        self.modality = np.array(nodes.column("modality").to_pylist(), dtype=object)
        self.types = np.array(nodes.column("type").to_pylist(), dtype=object)
        self._texts = nodes.column("text").to_pylist()
        self._titles = nodes.column("title").to_pylist()
        self.row = {nid: i for i, nid in enumerate(self.ids)}
        # Integer rank of each id in sorted order: ties break by (-score, id) without string compares.
        self.id_rank = np.empty(len(self.ids), dtype=np.int64)
        self.id_rank[np.argsort(self.ids.astype(str), kind="stable")] = np.arange(len(self.ids))
        manifest = self.dir / "manifest.json"
        self.manifest = json.loads(manifest.read_text()) if manifest.exists() else {}
        self._encoder = encoder
        self.dense_kind = dense_kind
        self._memo: OrderedDict[tuple[str, str], np.ndarray] = OrderedDict()
        self._memo_size = memo

    def close(self) -> None:
        """Done reading: a later publication may retire this generation. (A reader that never calls
        this holds it until the object or the process goes.)"""
        self.lease.release()

    def __len__(self) -> int:
        return len(self.ids)

    def text(self, i: int) -> str:
        return self._texts[i]

    def title(self, i: int) -> str:
        return self._titles[i]

    @cached_property
    def _type_rows(self) -> dict[str, np.ndarray]:
        out: dict[str, list[int]] = {}
        for i, t in enumerate(self.types):
            out.setdefault(t, []).append(i)
        return {t: np.array(v, dtype=np.int64) for t, v in out.items()}

    def rows_of_type(self, node_type: str | None) -> np.ndarray:
        """Rows of one node type (a KB label); None or an unknown type: every row."""
        if node_type is None or node_type not in self._type_rows:
            return np.arange(len(self.ids), dtype=np.int64)
        return self._type_rows[node_type]

    def node_types(self) -> list[str]:
        return sorted(self._type_rows)

    @cached_property
    def _source_row(self) -> dict[str, int]:
        return {s: i for i, s in reversed(list(enumerate(self.source_ids)))}  # first chunk of each source

    def rows_for_ids(self, values) -> np.ndarray:
        """Rows of store answers, which may be node ids or KB object ids (a node's source id);
        unknown values are dropped, order and first occurrence kept."""
        out: dict[int, None] = {}
        for v in values:
            v = str(v)
            r = self.row.get(v)
            if r is None:
                r = self._source_row.get(v)
            if r is not None:
                out.setdefault(r, None)
        return np.fromiter(out, dtype=np.int64, count=len(out))

    @cached_property
    def title_vectors(self) -> np.ndarray | None:
        """Name/title embeddings (vectors/title.npy), for name searches; None when not built."""
        path = self.dir / "vectors" / "title.npy"
        return np.load(path) if path.exists() else None

    @property
    def name_vectors(self) -> np.ndarray:
        """The vectors a name is matched against: titles, or the content vectors for a graph built
        before title vectors existed (its names are its content's first words)."""
        return self.title_vectors if self.title_vectors is not None else self.vectors

    @property
    def embedding_model(self) -> str:
        return self.manifest.get("embedding_model", "all-MiniLM-L6-v2")

    @property
    def encoder(self) -> Encoder:
        if self._encoder is None:
            # Queries use the build's numerics (graphs built before precision existed were fp32).
            self._encoder = make_encoder(
                self.embedding_model, precision=self.manifest.get("embedding_precision", "fp32")
            )
        return self._encoder

    @cached_property
    def bm25(self) -> BM25Index:
        # Title plus text: a passage's title is often the entity a question names.
        docs = [f"{t}\n{x}" for t, x in zip(self._titles, self._texts)]
        return BM25Index.load_or_build(self.dir / "bm25", docs)

    @cached_property
    def vectors(self) -> np.ndarray:
        v = np.load(self.dir / "vectors" / "content.npy")
        if v.shape[0] != len(self.ids):
            raise SageGraphError(f"{self.dir}: vectors/content.npy has {v.shape[0]} rows for {len(self.ids)} nodes")
        return v

    @cached_property
    def passages(self) -> PassageIndex:
        """Sentence vectors of the long node texts (see `sagegraph.index.passages`), built on first
        use and kept beside the graph."""
        marker = self.dir / "nodes.fingerprint"
        nodes = marker.read_text() if marker.exists() else len(self.ids)
        built_from = f"{nodes}|{self.manifest.get('embedding_model', 'all-MiniLM-L6-v2')}"
        return PassageIndex.load_or_build(self.dir / "passages", self._texts, self.encoder.encode, built_from)

    def sentence_scores(self, text: str, rows: np.ndarray) -> np.ndarray:
        """How well `text` reads against each row: its best sentence's cosine where the row's text
        has several sentences, its node vector's otherwise."""
        rows = np.asarray(rows, dtype=np.int64)
        qv = self.query_vector(text)
        best = self.passages.best(qv, rows)
        whole = np.isnan(best)
        if whole.any():
            best[whole] = self.vectors[rows[whole]] @ qv
        return best

    @cached_property
    def dense(self) -> DenseIndex:
        return DenseIndex(self.vectors, kind=self.dense_kind)

    @cached_property
    def adjacency(self) -> Adjacency:
        edges = pq.read_table(self.dir / "edges.parquet", columns=["src", "dst", "type"])
        src = np.array([self.row[s] for s in edges.column("src").to_pylist()], dtype=np.int64)
        dst = np.array([self.row[d] for d in edges.column("dst").to_pylist()], dtype=np.int64)
        return Adjacency.from_edges(len(self.ids), src, dst, edges.column("type").to_pylist())

    def _memoised(self, kind: str, query: str, compute) -> np.ndarray:
        key = (kind, query)
        hit = self._memo.get(key)
        if hit is None:
            hit = compute()
            self._memo[key] = hit
            if len(self._memo) > self._memo_size:
                self._memo.popitem(last=False)
        return hit

    def query_vector(self, query: str) -> np.ndarray:
        vec = self._memoised("vec", query, lambda: self._query_encoder.encode([query])[0])
        if vec.shape[0] != self.vectors.shape[1]:
            raise SageGraphError(
                f"query encoder gives {vec.shape[0]}-d vectors, the graph was built with {self.vectors.shape[1]}-d"
            )
        return vec

    def bm25_scores(self, query: str) -> np.ndarray:
        return self._memoised("bm25", query, lambda: self.bm25.scores(query))

    def save_query_vectors(self, queries: list[str], path: Path) -> Path:
        """Encode questions once (before a fan-out) so workers never load the model for them."""
        self.encode_queries(queries)
        uniq = list(dict.fromkeys(queries))
        np.savez(
            path,
            texts=np.array(uniq, dtype=object),
            vectors=np.stack([self._memo[("vec", q)] for q in uniq]) if uniq else np.zeros((0, 1)),
        )
        return path

    def load_query_vectors(self, path: Path) -> None:
        z = np.load(path, allow_pickle=True)
        for q, v in zip(z["texts"].tolist(), z["vectors"]):
            self._memo[("vec", q)] = v

    def encode_queries(self, queries: list[str]) -> None:
        """Batch-encode questions up front (one model call instead of one per question)."""
        todo = [q for q in dict.fromkeys(queries) if ("vec", q) not in self._memo]
        if todo:
            for q, v in zip(todo, self._query_encoder.encode(todo)):
                self._memo[("vec", q)] = v

    @property
    def vector_cache(self) -> Path:
        """The build's embedding cache, where the vectors computed while answering are kept too."""
        return self.out / "cache" / "embeddings.sqlite"

    @cached_property
    def _query_encoder(self) -> Encoder:
        """The query encoder behind the build's embedding cache: the questions of a run and the
        texts retrievers read beside them (mentions, type names, plan steps) recur in every rerun,
        replay and sweep on the graph, which then loads no model for them."""
        return cached_if_writable(self.encoder, self.vector_cache)

    @cached_property
    def _exact_encoder(self) -> Encoder:
        """The query encoder in fp32 (the query encoder itself when it already is, or knows no
        precision, as a test's), behind the build's embedding cache: the chains and names it reads
        recur in every sweep and replay on this graph, and a process whose texts are all cached
        loads no model."""
        if getattr(self.encoder, "precision", "fp32") == "fp32":
            return self._query_encoder
        return cached_if_writable(make_encoder(self.embedding_model, precision="fp32"), self.vector_cache)

    def exact_vectors(self, texts: list[str]) -> np.ndarray:
        """Vectors for ranking short texts against each other where near ties decide (DGR's chains):
        in fp32, since bf16 vectors move with the texts batched beside them (cosines by up to ~1e-3
        on a CPU with native bf16, fp32's by ~1e-7), so a rank would follow which questions ran
        before. Memoised apart from the query vectors, which keep the build's numerics."""
        todo = [t for t in dict.fromkeys(texts) if ("exact", t) not in self._memo]
        if todo:
            for t, v in zip(todo, self._exact_encoder.encode(todo)):
                self._memoised("exact", t, lambda v=v: v)
        return np.stack([self._memoised("exact", t, lambda t=t: self._exact_encoder.encode([t])[0]) for t in texts])
