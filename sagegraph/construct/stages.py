"""The build stages as plain functions over files: each reads its inputs from disk, writes its
outputs atomically, and returns a small summary. Finished outputs are reused, so a rerun after a
crash resumes at the first unfinished piece and never repeats an LLM call (the reply cache) or an
encode (the embedding cache).

Prefect tasks in `tasks/` call these; tests call them directly.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import hashlib
import json
import logging
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from sagegraph.config import BuildConfig, EdgeConfig
from sagegraph.construct import differences, generations, relations_file, retention
from sagegraph.construct import edges as edge_construction
from sagegraph.construct.artifacts import Layout, move_aside, read_json, save_npz, versioned, write_json
from sagegraph.construct.batches import batch_name, content_spans, target_size
from sagegraph.construct.changes import RELATIONS as RELATION_HASHES
from sagegraph.construct.changes import (
    ChangeSet,
    Fingerprints,
    corpus_fingerprints,
    diff,
    digest,
    ingested_fingerprints,
    read_relations,
    write_fingerprints,
)
from sagegraph.construct.edge_records import extra_for, pair_edge_table, repeated
from sagegraph.construct.fields import FIELDS, entity_names, entity_set, field_texts
from sagegraph.construct.metadata import estimate_llm_tokens, extract_metadata
from sagegraph.construct.nodes import document_nodes, kb_nodes, table_nodes
from sagegraph.construct.reuse import Reused, combine_arrays, combine_tables, match_rows, retired_batches
from sagegraph.corpus import kb_edges, load_corpus
from sagegraph.corpus.kb import EDGES as KB_EDGES_FILE
from sagegraph.corpus.records import Corpus, Document, KBObject, Table
from sagegraph.embed import (
    CachedEncoder,
    Encoder,
    EncoderProcess,
    SentenceTransformerEncoder,
    encode_reporting,
    set_torch_threads_from_env,
)
from sagegraph.errors import ConfigError, InputError, StoreError, StoreUnavailable
from sagegraph.memory import releasing
from sagegraph.model import (
    EDGE_SCHEMA,
    ENTITY,
    TABLE_CHUNK,
    Node,
    content_id,
    edges_to_table,
    nodes_to_table,
    read_batch_table,
    read_nodes,
    shallow_dict,
    table_to_nodes,
    write_parquet,
)
from sagegraph.progress import ticker
from sagegraph.runfiles import replaced, write_text_whole
from sagegraph.store.base import GraphStore
from sagegraph.store.diff import DICTIONARY_COLUMNS, GraphDiff, decoded
from sagegraph.store.loaded import MULTI_GRAPH, load_mismatch, loaded_marker, loaded_place

log = logging.getLogger("sagegraph.construct")
_ENCODERS: dict[tuple, Encoder] = {}
_ENCODERS_MADE = threading.Lock()
_CHILDREN: dict[tuple, EncoderProcess] = {}  # one encoder process per model setting, for this process's life


def get_encoder(cfg: BuildConfig) -> Encoder:
    """One encoder per process (and per Dask worker): the model loads once, not once per batch;
    this process's encoder process (`start_encoder`) where it has one."""
    layout = Layout.of(cfg)
    key = (cfg.embedding.model, cfg.embedding.device, cfg.embedding.precision, str(layout.cache))
    with _ENCODERS_MADE:  # a warm-up thread (a Dask worker's) may ask at the same moment
        if key not in _ENCODERS:
            encoder = _CHILDREN.get(_child_key(_encoder_spec(cfg))) or _new_encoder(cfg)
            _ENCODERS[key] = (
                CachedEncoder(encoder, layout.cache / "embeddings.sqlite") if cfg.embedding.cache else encoder
            )
        return _ENCODERS[key]


def _encoder_spec(cfg: BuildConfig) -> SentenceTransformerEncoder:
    """The encoder the build config names, its model not loaded."""
    return SentenceTransformerEncoder(
        cfg.embedding.model, cfg.embedding.device, cfg.embedding.batch_size, cfg.embedding.precision
    )


def _child_key(spec: SentenceTransformerEncoder) -> tuple:
    return (spec.model_name, spec.device, spec.precision, spec.batch_size)


def _new_encoder(cfg: BuildConfig) -> SentenceTransformerEncoder:
    set_torch_threads_from_env()
    return _encoder_spec(cfg)


def warm_up(cfg: BuildConfig) -> int:
    """Load this process's encoder now. A Dask worker runs this while the API server starts, so its
    first batch does not wait ~6 s for imports and the model. Returns the embedding width."""
    return get_encoder(cfg).dim


def start_encoder(cfg: BuildConfig) -> None:
    """Start the encoder process a build in this process encodes through (`embed.EncoderProcess`):
    it imports torch and loads the model while the stages before the first encode run (ingest, the
    batches' chunks and metadata), a fixed cost of seconds, as large as a small rebuild's own
    work, which on a thread would hold this process's interpreter lock meanwhile. A stage that
    encodes first waits for it. It serves this process's later builds too and ends with the
    process."""
    spec = _encoder_spec(cfg)
    with _ENCODERS_MADE:
        if _child_key(spec) not in _CHILDREN:
            _CHILDREN[_child_key(spec)] = EncoderProcess(spec)


def stop_encoders() -> None:
    """Ends this process's encoder processes: a build that `start_encoder` began to prepare for
    turned out to need none (nothing to encode, or its batches run on workers)."""
    with _ENCODERS_MADE:
        for child in _CHILDREN.values():
            child.close()
        _CHILDREN.clear()


def _encode_seconds(enc: Encoder) -> float:
    return float(getattr(enc, "encode_seconds", 0.0))


def _encoded(enc: Encoder) -> int:
    return int(getattr(enc, "encoded", 0))


# ---- 1. ingest --------------------------------------------------------------------------------


def batch_file(stage_dir: Path, batch_path: str) -> Path:
    """A source batch keeps its name through chunk and metadata: sources/src-<hash>.json ->
    chunks/src-<hash>.parquet -> metadata/src-<hash>.parquet (ingests made before content batches:
    batch-00003)."""
    return stage_dir / (Path(batch_path).stem + ".parquet")


def preflight(cfg: BuildConfig) -> None:
    """What a build takes from outside (the corpus files, an LLM key), checked before a server,
    workers or any stage start, on a config `resolve_corpus` returned. A finished stage needs neither again, so
    a resumed build whose
    corpus files are gone since ingest, or whose LLM metadata is all written, still runs."""
    from sagegraph.corpus.load import check_corpus
    from sagegraph.llm import require_credentials

    layout = Layout.of(cfg)
    manifest = layout.stage_path("sources") / "manifest.json"
    if not manifest.exists():
        check_corpus(cfg.corpus)  # its records were read and validated by `resolve_corpus`, which runs first
    if cfg.metadata.mode == "llm":
        batches = read_json(manifest)["batches"] if manifest.exists() else None
        written = batches is not None and all(batch_file(layout.stage_path("metadata"), b).exists() for b in batches)
        if not written:
            require_credentials(cfg.llm)


def _previous_sources(cfg: BuildConfig) -> Path | None:
    """The sources stage of the graph last built in cfg.out (None: none was)."""
    manifest = Layout.of(cfg).published / "manifest.json"
    if not manifest.exists():
        return None
    built = read_json(manifest)
    if built.get("sources"):
        return cfg.out / "stages" / built["sources"]
    version = (built.get("config") or {}).get("corpus_version", "")  # a graph built before change sets
    return Layout.of(cfg.model_copy(update={"corpus_version": version})).stage_path("sources")


def resolve_corpus(cfg: BuildConfig, keep_read: bool = False) -> tuple[BuildConfig, ChangeSet | None]:
    """The config with `corpus_version` set from the corpus as it is now, and what changed since
    the graph last built in cfg.out. Reads (and so validates) the whole corpus: a bad record stops
    the build here, with its file and line, before anything is written. With the corpus files gone,
    a finished ingest of the last build still builds (None: nothing to compare). `keep_read`: the
    corpus read is kept for this process's `ingest` of the build that follows."""
    from sagegraph.corpus.load import check_corpus

    previous_dir = _previous_sources(cfg)
    try:
        check_corpus(cfg.corpus)
    except ConfigError:
        if previous_dir is not None and (previous_dir / "manifest.json").exists():
            version = (read_json(Layout.of(cfg).published / "manifest.json").get("config") or {}).get(
                "corpus_version", ""
            )
            log.warning("corpus files are missing; building from the last build's ingest")
            return cfg.model_copy(update={"corpus_version": version}), None
        raise
    # Read and validated here, before Prefect and Dask start: a bad line stops the build with its
    # file, line and field (0.7 s for OTT-QA dev), and `preflight` need not read it again.
    relations_digest = _relations_digest(cfg, previous_dir)  # before the read: a file changed meanwhile never matches
    earlier = relations_file.read_before(previous_dir, relations_digest.digest) if relations_digest else None
    corpus = load_corpus(cfg.corpus, cfg.max_sources, cfg.subset, earlier.table if earlier else None)
    if len(corpus) == 0:
        raise InputError(cfg.corpus.path or "corpus", None, None, f"corpus {cfg.corpus.kind} has no usable sources")
    taken = earlier if earlier is not None and corpus.kb_edges is earlier.table else None
    now = corpus_fingerprints(corpus, taken.hashes if taken else None)
    first = cfg.model_copy(update={"corpus_version": ""})
    first_read = ingested_fingerprints(Layout.of(first).stage_path("sources"))
    version = "" if first_read is None or first_read.same_as(now) else digest(now)
    before = ingested_fingerprints(previous_dir) if previous_dir is not None else None
    resolved = cfg.model_copy(update={"corpus_version": version})
    _READ.clear()
    if keep_read:
        _READ[_read_key(resolved)] = (corpus, now, _RelationsRead(relations_digest, taken.parquet if taken else None))
    return resolved, diff(before, now)


# The corpus `resolve_corpus` read last, for the `ingest` of the same build in this process: the
# state it fingerprinted is the state ingested, and a large KB (millions of relations) is not
# parsed twice. One entry; `ingest` takes it, and a build that ends without one releases it.
_READ: dict[str, tuple[Corpus, Fingerprints, _RelationsRead]] = {}


@dataclasses.dataclass(frozen=True)
class _RelationsRead:
    """The digest of the relations file as it was read (None: the corpus has none), and the last
    ingest's relations file where the table read was taken from it."""

    digest: relations_file.FileDigest | None
    taken_from: Path | None


def _relations_digest(cfg: BuildConfig, previous_sources: Path | None) -> relations_file.FileDigest | None:
    """The digest an ingest of `cfg` records for its relations file: none where the ingest holds
    only part of the file (`max_sources` keeps the relations between the first sources), which
    must then never stand for the whole file."""
    if cfg.corpus.kind != "kb" or cfg.corpus.path is None or cfg.max_sources is not None:
        return None
    path = cfg.corpus.resolved_path() / KB_EDGES_FILE
    return relations_file.digest_of(path, previous_sources) if path.is_file() else None


def _read_key(cfg: BuildConfig) -> str:
    return f"{cfg.corpus.model_dump_json()}|{cfg.max_sources}|{cfg.subset}|{cfg.corpus_version}"


@contextlib.contextmanager
def corpus_read_once() -> Iterator[None]:
    """Around a build that resolves with `keep_read`: the corpus kept for its ingest is released
    when the build ends, ingested or not (an up-to-date graph, a failure)."""
    try:
        yield
    finally:
        _READ.clear()


def up_to_date(cfg: BuildConfig) -> dict[str, Any] | None:
    """The last build's counts when a build of `cfg` (resolved by `resolve_corpus`) would redo
    nothing: its graph, statistics and store load are all of this config and corpus state, and the
    store opens and holds what was loaded. Then a scheduled rebuild of an unchanged corpus starts
    no server and no worker. None when anything is missing or stale (the build then resumes)."""
    layout = Layout.of(cfg)
    manifest, stats = layout.graph / "manifest.json", layout.stats / "graph_stats.json"
    if not (manifest.exists() and stats.exists() and (layout.graph / "edges.parquet").exists()):
        return None
    built = read_json(manifest)
    if built.get("fingerprint") != layout.cfg_fp["edges"] or generations.published(cfg.out) != layout.graph.resolve():
        return None  # another build's graph, or this one not published (a build stopped, or a rollback)
    store: dict[str, Any] | None = {"backend": "none"}
    if cfg.store.backend != "none":
        store = _current_load(cfg, *_store_place(cfg, layout))
        if store is None:
            return None
    summary = read_json(stats)
    return {
        "graph": str(layout.published),
        "stats": str(stats),
        "plots": summary.get("plots", []),
        "store": store,
        "edges": built["edges"],
        "counts": {k: summary[k] for k in ("nodes", "nodes_by_modality", "edges", "edges_by_type")},
        "up_to_date": True,
        "stage_seconds": {},
        "task_seconds": {},
        "encode_seconds": 0.0,
        "seconds": 0.0,
        "llm_estimate": None,
        "llm_usage": None,
        "skipped_records": {},
        "resumed_batches": 0,
    }


@releasing
def ingest(cfg: BuildConfig) -> dict[str, Any]:
    """Load and validate the corpus, then split it into source batches for the fan-out."""
    read = _READ.pop(_read_key(cfg), None)
    _READ.clear()
    d = Layout.of(cfg).stage_dir("sources")
    manifest = d / "manifest.json"
    if manifest.exists():
        return {**read_json(manifest), "resumed": True}
    t0 = time.perf_counter()
    relations_read = read[2] if read else _RelationsRead(_relations_digest(cfg, _previous_sources(cfg)), None)
    corpus = read[0] if read else load_corpus(cfg.corpus, cfg.max_sources, cfg.subset)
    if len(corpus) == 0:
        raise ValueError(f"corpus {cfg.corpus.kind} at {cfg.corpus.path} has no usable sources")
    items: list[tuple[str, Any]] = (
        [("tables", t) for t in corpus.tables]
        + [("documents", x) for x in corpus.documents]
        + [("kb_nodes", k) for k in corpus.kb_nodes]
    )
    fingerprints = read[1] if read else corpus_fingerprints(corpus)
    keys = [f"{kind}:{rec.id}={fingerprints.records[f'{kind}:{rec.id}']}" for kind, rec in items]
    batches = []
    for start, end in content_spans(keys, target_size(len(items), cfg.runner.batch_size)):
        payload: dict[str, list] = {"tables": [], "documents": [], "kb_nodes": []}
        for kind, rec in items[start:end]:
            payload[kind].append(shallow_dict(rec))
        batches.append(str(write_json(d / f"{batch_name(keys[start:end])}.json", payload, indent=None)))
    if relations_read.taken_from is not None:  # the same table as the last ingest's file
        relations_file.link(relations_read.taken_from, d / relations_file.TABLE)
    else:
        write_parquet(corpus.kb_edges, d / relations_file.TABLE)
    write_fingerprints(d, fingerprints)  # before the manifest: a finished ingest has both
    if relations_read.digest is not None:
        relations_file.record(d, relations_read.digest)
    summary = {
        "batches": batches,
        "kb_edges": str(d / relations_file.TABLE),
        "counts": {
            "tables": len(corpus.tables),
            "documents": len(corpus.documents),
            "kb_nodes": len(corpus.kb_nodes),
            "kb_edges": corpus.kb_edges.num_rows,
        },
        "skipped_records": corpus.skipped,
        "seconds": time.perf_counter() - t0,
    }
    write_json(manifest, summary)
    return {**summary, "resumed": False}


def _load_batch(path: Path) -> tuple[list[Table], list[Document], list[KBObject]]:
    raw = read_json(Path(path))
    return (
        [Table(**t) for t in raw["tables"]],
        [Document(**x) for x in raw["documents"]],
        [KBObject(**k) for k in raw["kb_nodes"]],
    )


# ---- 2. chunk ---------------------------------------------------------------------------------


def chunk_batch(cfg: BuildConfig, batch_path: str, report: Callable[[str], None] | None = None) -> dict[str, Any]:
    """`report` gets progress lines while the batch's windows are encoded (a task's logger)."""
    out = batch_file(Layout.of(cfg).stage_dir("chunks"), batch_path)
    if out.exists():
        return {"path": str(out), "resumed": True, "seconds": 0.0, "encode_seconds": 0.0}
    t0 = time.perf_counter()
    tables, docs, kb = _load_batch(Path(batch_path))
    enc = get_encoder(cfg)
    e0, n0 = _encode_seconds(enc), _encoded(enc)
    nodes = table_nodes(tables, cfg.tables.rows_per_segment, cfg.tables.link_entities)
    encode = encode_reporting(enc.encode, report, f"chunk {Path(batch_path).stem}", getattr(enc, "batch_size", 64))
    nodes += document_nodes(docs, encode, cfg.chunking)
    nodes += kb_nodes(kb)
    write_parquet(nodes_to_table(nodes), out)
    return {
        "path": str(out),
        "nodes": len(nodes),
        "resumed": False,
        "seconds": time.perf_counter() - t0,
        "encode_seconds": _encode_seconds(enc) - e0,
        "encoded": _encoded(enc) - n0,
    }


# ---- 3. metadata ------------------------------------------------------------------------------


def llm_client(cfg: BuildConfig):
    from sagegraph.llm import LLMClient

    cache = cfg.llm.cache_dir or Layout.of(cfg).cache
    return LLMClient(cfg.llm, Path(cache) / "llm.sqlite")


def estimate_metadata_cost(cfg: BuildConfig, chunk_paths: list[str]) -> dict[str, Any]:
    """What an LLM metadata run would cost before it starts (cached replies are free and counted)."""
    nodes = [n for p in chunk_paths for n in read_nodes(Path(p))]
    prompt, completion = estimate_llm_tokens(nodes)
    cost = (prompt * cfg.llm.price_input_per_mtok + completion * cfg.llm.price_output_per_mtok) / 1e6
    return {
        "calls": len(nodes),
        "prompt_tokens": prompt,
        "completion_tokens": completion,
        "estimated_usd": round(cost, 4),
        "model": cfg.llm.model,
    }


def metadata_batch(cfg: BuildConfig, chunks_path: str, report: Callable[[str], None] | None = None) -> dict[str, Any]:
    layout = Layout.of(cfg)
    out = batch_file(layout.stage_dir("metadata"), chunks_path)
    usage_path = out.with_suffix(".usage.json")
    if out.exists():
        usage = read_json(usage_path) if usage_path.exists() else {}
        return {"path": str(out), "resumed": True, "seconds": 0.0, "llm": usage}
    t0 = time.perf_counter()
    inputs = read_batch_table(Path(chunks_path))
    # An LLM's fallback row is made again (its call retried), never kept: only heuristic rows are reused.
    metadata_of = functools.partial(batch_file, layout.stage_path("metadata"))
    reused = _reusable(cfg, inputs, "chunks", metadata_of) if cfg.metadata.mode == "heuristic" else None
    nodes = table_to_nodes(inputs.take(pa.array(reused.fresh)) if reused else inputs)
    client = llm_client(cfg) if cfg.metadata.mode == "llm" else None
    tick = ticker(f"metadata {Path(chunks_path).stem}", len(nodes), "nodes", report) if client else None
    metas, fallbacks = extract_metadata(
        nodes, cfg.metadata.mode, client, cfg.metadata.llm_fallback, cfg.llm.concurrency, on_done=tick
    )
    for n, m in zip(nodes, metas):
        keep: dict[str, Any] = {
            k: n.metadata[k]
            for k in ("header", "rows", "row_start", "row_end", "section_title", "page_title", "fields")
            if k in n.metadata
        }
        n.metadata = {**m, **keep}
    usage = {**(client.usage.as_dict() if client else {}), "fallbacks": fallbacks}
    write_json(usage_path, usage)
    table = nodes_to_table(nodes)
    if reused:
        table = combine_tables(reused, lambda name: read_batch_table(metadata_of(name)), table)
    write_parquet(table, out)
    return _made(out, table.num_rows, reused, t0, llm=usage)


# ---- 4. embed ---------------------------------------------------------------------------------


def embed_batch(cfg: BuildConfig, metadata_path: str, report: Callable[[str], None] | None = None) -> dict[str, Any]:
    out = _vectors_file(cfg, Path(metadata_path).stem)
    if out.exists():
        return {"path": str(out), "resumed": True, "seconds": 0.0, "encode_seconds": 0.0}
    return _write_vectors(cfg, _plan_vectors(cfg, metadata_path), report)


# Texts handed to the encoder at a time while an in-process build plans its batches: enough for
# full model batches sorted by length (2,857 texts: 6.3 s in one call against 10.9 s in calls of
# ten, 2-core AMD EPYC), few enough that encoding starts while the batches are still planned.
ENCODE_WINDOW = 512


class BatchVectors:
    """The vectors of the batches a build in one process makes, planned batch by batch as each
    batch's metadata is written (`add`), then written (`written`).

    A small change touches nearly every batch of a large KB with a few texts each. The texts no
    batch can take from the build before go to the encoder in windows of `ENCODE_WINDOW`, on a
    thread, while the next batches are chunked, described and planned: the encoder runs in its own
    process (`embed.EncoderProcess`), so it can work while this process does the batches' Python
    work, where one call after the last plan could only follow it. The batches then take their
    vectors from those calls' answers:
    the embedding cache gives every caller the first vector stored for a text, so they are the
    vectors a batch-by-batch build reads from the same cache."""

    def __init__(self, cfg: BuildConfig) -> None:
        self.cfg = cfg
        self.plans: dict[str, _VectorsPlan] = {}
        self.order: list[str] = []
        self.encoder: Encoder | None = None
        self.pool: ThreadPoolExecutor | None = None
        self.asked: list[tuple[list[str], Future[np.ndarray]]] = []
        self.waiting: list[str] = []
        self.seen: set[str] = set()
        self.counters: tuple[float, int] = (0.0, 0)

    def __enter__(self) -> BatchVectors:
        return self

    def __exit__(self, *exc: object) -> None:
        """A build that stops before `written` leaves no encoding behind it."""
        if self.pool is not None:
            self.pool.shutdown(cancel_futures=True)

    def add(self, metadata_path: str) -> None:
        self.order.append(metadata_path)
        if _vectors_file(self.cfg, Path(metadata_path).stem).exists():
            return
        plan = self.plans[metadata_path] = _plan_vectors(self.cfg, metadata_path)
        for text in plan.texts:
            if text not in self.seen:
                self.seen.add(text)
                self.waiting.append(text)
        if len(self.waiting) >= ENCODE_WINDOW:
            self._ask()

    def _ask(self) -> None:
        if not self.waiting:
            return
        if self.encoder is None:
            self.encoder = get_encoder(self.cfg)
            self.counters = (_encode_seconds(self.encoder), _encoded(self.encoder))
            self.pool = ThreadPoolExecutor(1, thread_name_prefix="encode")
        assert self.pool is not None
        texts, self.waiting = self.waiting, []
        self.asked.append((texts, self.pool.submit(self.encoder.encode, texts)))

    def written(self) -> list[dict[str, Any]]:
        """Each batch's summary, in the order added; the encoding paid is counted once, with the
        first batch written."""
        self._ask()
        encoded = {text: vector for texts, answer in self.asked for text, vector in zip(texts, answer.result())}
        paid = {}
        if self.encoder is not None:
            paid = {
                "encode_seconds": _encode_seconds(self.encoder) - self.counters[0],
                "encoded": _encoded(self.encoder) - self.counters[1],
            }
        results = []
        for path in self.order:
            if path not in self.plans:
                results.append(embed_batch(self.cfg, path))
                continue
            made = _write_vectors(self.cfg, self.plans[path], encoded=encoded)
            if paid:
                made.update(encode_seconds=made["encode_seconds"] + paid["encode_seconds"], encoded=paid["encoded"])
                paid = {}
            results.append(made)
        return results


@dataclasses.dataclass(frozen=True)
class _VectorsPlan:
    """A batch's vectors to make: the rows it takes from the build before (`reused`), and the
    texts of the others, every field of each row in turn (`FIELDS`)."""

    metadata_path: str
    rows: int
    reused: Reused | None
    texts: list[str]
    seconds: float  # spent making the plan


def _vectors_file(cfg: BuildConfig, batch: str) -> Path:
    """The vectors of the batch named `batch` (its metadata file's stem)."""
    return Layout.of(cfg).stage_dir("vectors") / f"{batch}.npz"


def _plan_vectors(cfg: BuildConfig, metadata_path: str) -> _VectorsPlan:
    started = time.perf_counter()
    inputs = read_batch_table(Path(metadata_path))
    reused = _reusable(cfg, inputs, "metadata", functools.partial(_vectors_file, cfg))
    nodes = table_to_nodes(inputs.take(pa.array(reused.fresh)) if reused else inputs)
    texts = [node_texts[field] for node_texts in map(field_texts, nodes) for field in FIELDS]
    return _VectorsPlan(metadata_path, inputs.num_rows, reused, texts, time.perf_counter() - started)


def _write_vectors(
    cfg: BuildConfig,
    plan: _VectorsPlan,
    report: Callable[[str], None] | None = None,
    encoded: Mapping[str, np.ndarray] | None = None,
) -> dict[str, Any]:
    """`encoded`: vectors already taken from the embedding cache for some texts (`BatchVectors`)."""
    started = time.perf_counter() - plan.seconds
    out = _vectors_file(cfg, Path(plan.metadata_path).stem)
    enc = get_encoder(cfg)
    e0, n0 = _encode_seconds(enc), _encoded(enc)
    # One encode call over all fields: duplicates (a title shared by a table's segments) hit the cache.
    label = f"embed {Path(plan.metadata_path).stem}"
    encode = encode_reporting(enc.encode, report, label, getattr(enc, "batch_size", 64))
    width = len(FIELDS)
    if not plan.texts:  # every row reused: no text to encode, so the model is not asked, even for its width
        vecs = np.zeros((0, 0 if plan.reused else enc.dim), np.float32)
    elif encoded is not None and all(text in encoded for text in plan.texts):
        vecs = np.stack([encoded[text] for text in plan.texts])
    else:
        vecs = encode(plan.texts)
    arrays = {f: vecs[k::width] for k, f in enumerate(FIELDS)}
    if plan.reused:
        arrays = combine_arrays(plan.reused, lambda name: dict(np.load(_vectors_file(cfg, name))), arrays, FIELDS)
    save_npz(out, **arrays)
    return _made(
        out,
        plan.rows,
        plan.reused,
        started,
        encode_seconds=_encode_seconds(enc) - e0,
        encoded=_encoded(enc) - n0,
    )


def _made(out: Path, rows: int, reused: Reused | None, started: float, **extra: Any) -> dict[str, Any]:
    """A batch stage's summary of a batch it made (its rows, how many it took from the build before)."""
    return {
        "path": str(out),
        "nodes": rows,
        "reused": reused.count() if reused else 0,
        "resumed": False,
        "seconds": time.perf_counter() - started,
        **extra,
    }


def _reusable(cfg: BuildConfig, inputs: pa.Table, input_stage: str, output: Callable[[str], Path]) -> Reused | None:
    """Rows of a batch's input that a batch of the previous build had, this build has not, and
    whose output is there (`construct.reuse`); None where there are none."""
    layout = Layout.of(cfg)
    retired = retired_batches(layout, _previous_sources(cfg))
    if not retired:
        return None
    reused = match_rows(inputs, retired, layout.stage_path(input_stage), output)
    return reused if reused.count() else None


# ---- 5. assemble ------------------------------------------------------------------------------


@releasing
def assemble(cfg: BuildConfig, metadata_paths: list[str], vector_paths: list[str]) -> dict[str, Any]:
    """Concatenate batches into graph/nodes.parquet and graph/vectors/<field>.npy (row-aligned)."""
    layout = Layout.of(cfg)
    g = layout.graph
    marker = g / "nodes.fingerprint"
    if marker.exists() and marker.read_text() == layout.cfg_fp["nodes"] and (g / "nodes.parquet").exists():
        return {"path": str(g), "resumed": True, "seconds": 0.0}
    t0 = time.perf_counter()
    tables = [read_batch_table(Path(p)) for p in sorted(metadata_paths)]
    import pyarrow as pa

    nodes_tbl = pa.concat_tables(tables)
    seen, keep = set(), []
    for i, nid in enumerate(nodes_tbl.column("id").to_pylist()):
        if nid not in seen:  # identical chunks (same source, same text) collapse: ids are content hashes
            seen.add(nid)
            keep.append(i)
    # Where nothing collapsed, `keep` is every row in order: gathering 129k x 384 vectors per field
    # by it cost 0.7 s a field at STaRK-PRIME's size for the copy it makes.
    collapsed = len(keep) < nodes_tbl.num_rows
    if collapsed:
        nodes_tbl = nodes_tbl.take(keep)
    write_parquet(nodes_tbl, g / "nodes.parquet")
    (g / "vectors").mkdir(parents=True, exist_ok=True)
    loaded = [np.load(p) for p in sorted(vector_paths)]
    for f in FIELDS:
        arr = np.concatenate([x[f] for x in loaded])
        arr = (arr[keep] if collapsed else arr).astype(np.float32, copy=False)
        with replaced(g / "vectors" / f"{f}.npy", suffix=".npy") as tmp:
            np.save(tmp, arr)
    write_text_whole(marker, layout.cfg_fp["nodes"])
    return {"path": str(g), "nodes": len(keep), "resumed": False, "seconds": time.perf_counter() - t0}


def load_graph_inputs(graph_dir: Path) -> tuple[list[Node], dict[str, np.ndarray]]:
    return read_nodes(graph_dir / "nodes.parquet"), graph_vectors(graph_dir)


def graph_vectors(graph_dir: Path) -> dict[str, np.ndarray]:
    """Each field's vectors, memory-mapped: pages are read as the search touches them."""
    return {f: np.load(graph_dir / "vectors" / f"{f}.npy", mmap_mode="r") for f in FIELDS}


@dataclasses.dataclass(frozen=True)
class _PairInputs:
    """What one modality pair's edges read of the graph's nodes, row by row."""

    ids: list[str]
    modality: np.ndarray
    source: np.ndarray
    entity_sets: list[set[str]]
    nodes: list[Node] | None  # whole nodes, for the pairs whose edges carry extras (`extra_for`)


def _pair_inputs(graph_dir: Path, pair: tuple[str, str]) -> _PairInputs:
    """Columns, not Node objects, unless the pair's extras need them (those with table chunks):
    making 129k Nodes was most of the edge stage outside the search at a PRIME-sized KB's size.
    Where the Nodes are made, the columns are taken from them, so no node is parsed twice."""
    path = graph_dir / "nodes.parquet"
    if TABLE_CHUNK in pair:
        nodes = read_nodes(path)
        return _PairInputs(
            [n.id for n in nodes],
            np.array([n.modality for n in nodes]),
            np.array([n.source_id for n in nodes]),
            [entity_set(n) for n in nodes],
            nodes,
        )
    cols = pq.read_table(path, columns=["id", "modality", "source_id", "title", "metadata"]).to_pydict()
    entity_sets = [
        entity_names(modality, title, json.loads(metadata or "{}"))
        for modality, title, metadata in zip(cols["modality"], cols["title"], cols["metadata"])
    ]
    return _PairInputs(cols["id"], np.array(cols["modality"]), np.array(cols["source_id"]), entity_sets, None)


# ---- 6. edges ---------------------------------------------------------------------------------


def edge_params(cfg: BuildConfig) -> EdgeConfig:
    """The edge settings, as validated with the rest of the build config: one model, no copy."""
    return cfg.edges


def present_pairs(modalities: set[str]) -> list[tuple[str, str]]:
    return [p for p in edge_construction.PAIR_SIGNALS if p[0] in modalities and p[1] in modalities]


def modalities_of(counts: dict[str, int]) -> set[str]:
    """Node modalities an ingest summary's source counts will produce."""
    made_by = {"documents": "doc_chunk", "tables": "table_chunk", "kb_nodes": "entity"}
    return {m for key, m in made_by.items() if counts.get(key)}


@releasing
def edges_for_pair(cfg: BuildConfig, pair: tuple[str, str], nodes_dir: Path | None = None) -> dict[str, Any]:
    """One modality pair's similarity edges, over the nodes in nodes_dir (an edge variant's: its
    base build's graph) or this build's graph."""
    layout = Layout.of(cfg)
    d = layout.stage_dir("edges")
    name = f"pair-{pair[0]}-{pair[1]}"
    out, stats_path = d / f"{name}.parquet", d / f"{name}.npz"
    if out.exists() and stats_path.exists():
        return {"path": str(out), "stats": str(stats_path), "resumed": True, "seconds": 0.0}
    t0 = time.perf_counter()
    graph = nodes_dir or layout.graph
    inputs = _pair_inputs(graph, pair)
    Emat, names = edge_construction.entity_matrix(inputs.entity_sets)
    vec = {f: np.asarray(v) for f, v in graph_vectors(graph).items()}
    res = edge_construction.similarity_pair(pair, inputs.modality, inputs.source, vec, Emat, edge_params(cfg))
    extra = extra_for(pair, inputs.nodes) if inputs.nodes is not None else None
    table = pair_edge_table(res, inputs.ids, Emat, names, extra)
    write_parquet(table, out)
    save_npz(stats_path, values=res.values, thresholds=res.thresholds, keep=res.keep, signals=np.array(res.signals))
    return {
        "path": str(out),
        "stats": str(stats_path),
        "pair": list(pair),
        "candidates": res.n_candidates,
        "edges": table.num_rows,
        "resumed": False,
        "seconds": time.perf_counter() - t0,
        "phase_seconds": res.seconds,
    }


@releasing
def finalize_edges(
    cfg: BuildConfig, pair_paths: list[str], kb_edges_path: str, graph_dir: Path | None = None
) -> dict[str, Any]:
    """Similarity edges + structural edges + native KB edges -> graph/edges.parquet (or into
    graph_dir, an edge variant that holds the same nodes)."""
    import pyarrow as pa

    layout = Layout.of(cfg)
    graph = graph_dir or layout.graph
    t0 = time.perf_counter()
    # Four columns, not Node objects: parsing every node's metadata JSON was 1.6 s of 2.2 here.
    cols = pq.read_table(graph / "nodes.parquet", columns=["id", "modality", "source_id", "position"]).to_pydict()
    ids, modality, source, position = cols["id"], cols["modality"], cols["source_id"], cols["position"]
    chunked = [i for i, m in enumerate(modality) if m != ENTITY]
    structural = edge_construction.structural_edges(
        [ids[i] for i in chunked], [source[i] for i in chunked], [position[i] for i in chunked]
    )
    # The KB's relations joined to their nodes by column, never one object per relation.
    entities = [i for i, m in enumerate(modality) if m == ENTITY]
    entity_sources = pa.array([source[i] for i in entities], pa.string())
    entity_ids = pa.array([ids[i] for i in entities], pa.string())
    relations = read_relations(Path(kb_edges_path))
    src_at = kb_edges.index_of(relations["src"], entity_sources)
    dst_at = kb_edges.index_of(relations["dst"], entity_sources)
    keep = (src_at >= 0) & (dst_at >= 0)
    kept = int(keep.sum())
    native = pa.table(
        {
            "src": entity_ids.take(pa.array(src_at[keep])),
            "dst": entity_ids.take(pa.array(dst_at[keep])),
            "type": relations["type"].filter(pa.array(keep)).cast(pa.string()),
            "weight": pa.array(np.ones(kept, np.float32)),
            "metadata": repeated("{}", kept),
        },
        schema=EDGE_SCHEMA,
    )
    parts = [pq.read_table(p) for p in pair_paths] + [edges_to_table(structural), native]
    table = pa.concat_tables(parts)
    write_parquet(table, graph / "edges.parquet")
    manifest = {
        "nodes": len(ids),
        "edges": table.num_rows,
        **_relations_block(Path(kb_edges_path), table.num_rows - kept, kept, entity_ids, entity_sources),
        "embedding_model": cfg.embedding.model,
        "embedding_precision": cfg.embedding.resolved_precision(),
        "dim": int(np.load(graph / "vectors" / "content.npy", mmap_mode="r").shape[1]),
        "fingerprint": layout.cfg_fp["edges"],
        "sources": layout.stage_path("sources").name,  # the corpus state this graph was built from
        "config": cfg.model_dump(mode="json"),
    }
    write_json(graph / "manifest.json", manifest)
    return {"path": str(graph / "edges.parquet"), "edges": table.num_rows, "seconds": time.perf_counter() - t0}


# The manifest's entry for where the KB relation edges sit in edges.parquet (`_relations_block`).
RELATIONS_BLOCK = "relations_block"


def _relations_block(
    kb_edges_path: Path, first_row: int, rows: int, entity_ids: pa.Array, entity_sources: pa.Array
) -> dict[str, Any]:
    """Where a graph's KB relations sit in its edges.parquet (its last `rows` rows) and a digest of
    what makes them: the ingest's relation hashes and each KB object's node id, in no row order.
    Two generations with the same digest hold the same relation edges, so their difference need
    not read or key those millions of rows (`generation_diff`). Nothing where the ingest kept no
    relation hashes."""
    hashes = kb_edges_path.with_name(RELATION_HASHES)
    if not hashes.exists():
        return {}
    digest = hashlib.blake2b(digest_size=16)
    digest.update(np.ascontiguousarray(np.load(hashes)["hashes"], dtype=np.uint64).tobytes())
    for source, node in sorted(zip(entity_sources.to_pylist(), entity_ids.to_pylist())):  # rows follow the batches
        digest.update(f"{source}\x1f{node}\x1e".encode())
    return {RELATIONS_BLOCK: {"first_row": first_row, "rows": rows, "digest": digest.hexdigest()}}


# ---- 7. store ---------------------------------------------------------------------------------


@contextlib.contextmanager
def store_kept_open(cfg: BuildConfig) -> Iterator[None]:
    """The embedded store's server started once for a whole build, in the background while the
    first stages run: each stage that opens the store (the load, the up-to-date check, the
    publication's clean-up) then joins it instead of starting one that replays the store's
    append-only file (25 s for the 0.3x PRIME-shaped store's two graphs here). Other backends are
    servers already."""
    if cfg.store.backend != "falkordb":
        yield
        return
    import threading

    from sagegraph.store import open_store
    from sagegraph.store.falkor import import_client

    import_client()  # here, not in the thread: its first import swaps sys.path under other imports
    path = Path(cfg.store.path or Layout.of(cfg).out / "store")
    held: list[GraphStore] = []

    def start() -> None:
        with contextlib.suppress(StoreError):  # the stage that needs the store says why it cannot open
            held.append(open_store(cfg.store.backend, path, cfg.store.graph))

    starter = threading.Thread(target=start, name="store-start", daemon=True)
    starter.start()
    try:
        yield
    finally:
        starter.join()
        for store in held:
            store.close()


# A difference's writes stay in the store's log (replayed at each server start) until they reach
# this share of the snapshot; a whole load is folded at once (`GraphStore.compact`). At
# STaRK-PRIME's size a 1% rebuild adds about 8 MB to a 690 MB snapshot: six rounds' increments
# (7%) opened in 6.3-7.5 s against 6.1-6.3 s once folded, and a fold takes 3.6 s of a ~45 s rebuild.
LOG_SHARE_TO_FOLD = 0.1


@releasing
def load_store(cfg: BuildConfig) -> dict[str, Any]:
    """Load the graph into the configured store, beside the graph readers use now (a FalkorDB graph
    per build generation: `store_key`); a repeated load of the same graph is skipped. When the
    store holds the published generation whole and this graph differs from it a little, only the
    difference is written (`_load_difference`)."""
    from sagegraph.store import open_store

    if cfg.store.backend == "none":
        return {"backend": "none", "seconds": 0.0}
    layout = Layout.of(cfg)
    path, key, marker, fp = _store_place(cfg, layout)
    previous = read_json(marker).get("fingerprint") if marker.exists() else None
    reused = _current_load(cfg, path, key, marker, fp)
    if reused is not None:
        return reused
    t0 = time.perf_counter()
    node_table, vectors, edges = read_generation(layout.graph)
    intent = marker.with_name(marker.name + ".loading")
    expected = {"nodes": node_table.num_rows, "edges": len(edges)}
    with open_store(cfg.store.backend, Path(path), key, url=cfg.store.url) as store:
        try:
            how = _load_difference(cfg, layout, store, path, intent, node_table, vectors, edges)
        except StoreUnavailable:
            raise
        except StoreError as exc:  # the engine refused a write of the difference (a bound): load whole
            log.warning("store graph %s: the difference could not be written (%s); loading it whole", key, exc)
            how = None
        counts: dict[str, int] | None = {"nodes": store.count_nodes(), "edges": store.count_edges()} if how else None
        if how and counts != expected:
            log.warning(
                "store graph %s holds %s after its difference was applied, not %s; loading it whole",
                key,
                counts,
                expected,
            )
            how = None
        if how is None:
            if (
                previous is not None or intent.exists()
            ):  # another graph (or a half-applied difference) is here: replace it, do not mix
                store.clear()
            write_json(intent, {"mode": "full"})
            counts = _load_whole(store, node_table, vectors, edges, cfg.store.batch_size)
            if counts != expected:  # the graph held rows no marker here accounts for (its out dir made anew)
                log.warning(
                    "store graph %s held %s after a whole load, not %s; cleared and loaded again", key, counts, expected
                )
                store.clear()
                counts = _load_whole(store, node_table, vectors, edges, cfg.store.batch_size)
            how = {"mode": "full"}
        _declare_indexes(cfg, store, node_table, vectors)
        compacted = store.compact(0.0 if how["mode"] == "full" else LOG_SHARE_TO_FOLD)
    assert counts is not None  # a difference applied or a full load: either counted the store
    summary = {
        "backend": cfg.store.backend,
        "path": str(path),
        "graph": key,
        "fingerprint": fp,
        "graph_fingerprint": layout.cfg_fp["edges"],
        **counts,
        **how,
        "compact_seconds": round(compacted, 2) if compacted is not None else None,
        "seconds": time.perf_counter() - t0,
    }
    write_json(marker, summary)
    intent.unlink(missing_ok=True)
    return {**summary, "resumed": False}


# Rows of nodes.parquet made into `Node`s at a time by a whole load: the Python objects of a
# STaRK-PRIME-sized graph's nodes at once took hundreds of MB beside the tables.
NODE_SPAN = 20_000


def _load_whole(
    store: GraphStore, node_table: pa.Table, vectors: np.ndarray, edges: pa.Table, batch_size: int
) -> dict[str, int]:
    """The graph written whole into `store`'s graph, a span of nodes at a time; the counts the
    store holds then."""
    store.ensure_indexes(None)
    # An empty graph gets CREATE, which skips MERGE's lookup per row; one left half-loaded by a
    # crashed full load is completed by MERGE, so nothing is doubled.
    create = store.count_nodes() == 0
    for start in range(0, node_table.num_rows, NODE_SPAN):
        span = table_to_nodes(node_table.slice(start, NODE_SPAN))
        store.load_nodes(span, vectors[start : start + len(span)], batch_size, create=create)
    store.load_edge_table(decoded(edges), batch_size, create=store.count_edges() == 0)
    return {"nodes": store.count_nodes(), "edges": store.count_edges()}


def _declare_indexes(cfg: BuildConfig, store: GraphStore, nodes: pa.Table, vectors: np.ndarray) -> None:
    """The vector index only where `store.vector_index` asks for it: FalkorDB keeps no HNSW on
    disk and rebuilds it whenever its server loads the graph, for queries sagegraph never makes.
    Declared, not awaited: both engines fill it in the background, so a build that waited would
    only wait for one it drops on close; vector queries wait for it (`vector_search`). KB entities
    get the full-text index."""
    if cfg.store.vector_index:  # the id index is there: both loads declare it before writing
        store.ensure_indexes(vectors.shape[1], wait=False)
    else:
        store.drop_vector_index()  # one a single-graph store (Neo4j) kept through a whole reload
    if ENTITY in set(nodes.column("modality").unique().to_pylist()):
        store.ensure_fulltext()


def _diff_base(cfg: BuildConfig, layout: Layout, path: Path) -> tuple[Path, str] | None:
    """(generation dir, store graph) of a generation the store holds whole, loaded by this store
    code, that this build's graph may be written as a difference from. FalkorDB: the generation
    kept for a rollback, whose store graph this build takes over (`_take_spare`), else (`update:
    difference`) the published one, copied. A single-graph store (Neo4j): the one it holds now."""
    record = generations.record(layout.out)
    spare = layout.out / generations.GRAPHS / record["previous"] if record.get("previous") else None
    candidates = (
        [spare, generations.published(layout.out)]
        if cfg.store.backend in MULTI_GRAPH
        else [generations.published(layout.out)]
    )
    if cfg.store.backend not in MULTI_GRAPH:
        marker = loaded_marker(cfg.store.backend, layout.out, path, cfg.store.graph)
        if marker.exists() and (held := read_json(marker).get("graph_fingerprint")):
            candidates.append(layout.out / generations.GRAPHS / held[:16])
    for gen in candidates:
        if gen is None or not (gen / "manifest.json").exists() or gen.resolve() == layout.graph.resolve():
            continue
        gen_fp = read_json(gen / "manifest.json").get("fingerprint", "")
        key, marker = loaded_place(cfg.store.backend, layout.out, path, cfg.store.graph, gen_fp)
        held = read_json(marker) if marker.exists() else {}
        if held.get("graph_fingerprint") == gen_fp and held.get("fingerprint") == store_fingerprint(
            cfg, gen_fp
        ):  # loaded by this store code, with the index this build declares
            return gen, key
    return None


def read_generation(gen: Path) -> tuple[pa.Table, np.ndarray, pa.Table]:
    """A generation's nodes.parquet table, content vectors (row-aligned) and edges.parquet table
    (its string columns dictionary-encoded: `store.diff.DICTIONARY_COLUMNS`): what a store holds
    of it."""
    return (
        pq.read_table(gen / "nodes.parquet"),
        np.load(gen / "vectors" / "content.npy"),
        pq.read_table(gen / "edges.parquet", read_dictionary=list(DICTIONARY_COLUMNS)),
    )


def generation_diff(base: Path, this: Path, nodes: pa.Table, vectors: np.ndarray, edges: pa.Table) -> GraphDiff | None:
    """The difference from generation `base`'s graph to graph `this` (its nodes.parquet table, vectors
    and edges), or None where a difference cannot stand for the graph (an edge repeated under one
    key, a different vector size)."""
    from sagegraph.store.diff import graph_diff

    old_nodes, old_vectors, old_edges = read_generation(base)
    if old_vectors.shape[1:] != vectors.shape[1:]:
        return None
    same = _same_relations(base, this)
    if same is not None:  # the relation edges are the same rows in both: only the rows before them differ
        old_edges, edges = old_edges.slice(0, same[0]), edges.slice(0, same[1])
    return graph_diff(old_nodes, old_vectors, old_edges, nodes, vectors, edges)


def _same_relations(base: Path, this: Path) -> tuple[int, int] | None:
    """Where the KB relation edges start in generation `base`'s edges.parquet and in graph `this`'s,
    when both hold the same ones (`_relations_block`) and nothing follows them; else None."""
    blocks = []
    for gen in (base, this):
        manifest = read_json(gen / "manifest.json") if (gen / "manifest.json").exists() else {}
        block = manifest.get(RELATIONS_BLOCK)
        if not block or block["first_row"] + block["rows"] != manifest.get("edges"):
            return None
        blocks.append(block)
    old, new = blocks
    if old["digest"] != new["digest"] or old["rows"] != new["rows"]:
        return None
    return old["first_row"], new["first_row"]


def graph_delta_of(store: dict[str, Any], against_published: dict[str, int] | None) -> dict[str, int] | None:
    """The graph's change against the published generation, for the build's report: the store's
    own difference when it was written from the published graph (one written from the rollback
    generation's graph spans two builds' changes), else `graph_changes`, which a build computes
    while the store loads."""
    if store.get("mode") == "difference" and store.get("base_published"):
        return store.get("difference")
    return against_published


def graph_changes(cfg: BuildConfig) -> dict[str, int] | None:
    """Nodes and edges added, changed and removed against the published generation, for the
    build's report (the store's difference gives the same when it was written as one); None on a
    first build."""
    latest = published_difference(Layout.of(cfg))
    return latest.diff.counts if latest is not None else None


_LATEST_LOCK = threading.Lock()
_latest: dict[str, Any] = {}


def published_difference(
    layout: Layout, graph: tuple[pa.Table, np.ndarray, pa.Table] | None = None
) -> differences.Difference | None:
    """The difference from the published generation to this build's graph (`graph`: its
    `read_generation`, where the caller has it), kept in the build's generation folder: computed
    once per build however many ask (the report and the store load ask at once, from two threads),
    read back where a build before computed it. None on a first build, or where a difference cannot
    stand for the graph."""
    base = generations.published(layout.out)
    if base is None or not (base / "manifest.json").exists() or base.resolve() == layout.graph.resolve():
        return None
    key = f"{layout.graph.resolve()} from {base.resolve()}"
    with _LATEST_LOCK:
        if _latest.get("key") == key:
            return _latest["difference"]
        latest = differences.load(layout.graph, base.name)
        if latest is None:
            node_table, vectors, edges = graph or read_generation(layout.graph)
            diff = generation_diff(base, layout.graph, node_table, vectors, edges)
            if diff is not None:
                latest = differences.compact(differences.Difference(base.name, diff, node_table, vectors))
                differences.keep(layout.graph, latest, node_table.num_rows + edges.num_rows)
        _latest.clear()
        _latest.update(key=key, difference=latest)
        return latest


def _difference_steps(
    layout: Layout, base_dir: Path, node_table: pa.Table, vectors: np.ndarray, edges: pa.Table
) -> list[differences.Difference] | None:
    """The differences that take the store graph of generation `base_dir` to this build's graph,
    in order: the difference from the published generation where `base_dir` is it; where
    `base_dir` is the generation before it, the published generation's kept difference from
    `base_dir` and then that one; else the difference from `base_dir`, computed here. None where a
    difference cannot stand for the graph."""
    published = generations.published(layout.out)
    latest = published_difference(layout, (node_table, vectors, edges))
    if latest is not None and published is not None:
        if base_dir.resolve() == published.resolve():
            return [latest]
        if (kept := differences.load(published, base_dir.name)) is not None:
            return [kept, latest]
    diff = generation_diff(base_dir, layout.graph, node_table, vectors, edges)
    return None if diff is None else [differences.Difference(base_dir.name, diff, node_table, vectors)]


def _load_difference(
    cfg: BuildConfig,
    layout: Layout,
    store: GraphStore,
    path: Path,
    intent: Path,
    node_table: pa.Table,
    vectors: np.ndarray,
    edges: pa.Table,
) -> dict[str, Any] | None:
    """Write this graph into `store` as the difference from a generation the store holds. None
    when `store.update` says whole, or there is no such generation; the caller loads the graph
    whole.

    FalkorDB holds a graph per generation, and keeps the one before the published one for a
    rollback until the next publication retires it: this build takes that graph over under its
    own name (a RENAME, indexes kept) and writes the difference into it, so nothing is copied and
    the store holds two graphs, not three, while it loads. Where no reader holds that generation.
    Otherwise `auto` loads whole beside the published graph, and `difference` copies the published
    one (GRAPH.COPY, which rebuilds the vector index). A single-graph store (Neo4j) is written in
    place, in one transaction."""
    if cfg.store.update == "whole":
        return None
    base = _diff_base(cfg, layout, path)
    if base is None:
        return None
    base_dir, base_key = base
    spare = cfg.store.backend in MULTI_GRAPH and base_dir.resolve() != generations.published(layout.out)
    if cfg.store.backend in MULTI_GRAPH and not spare and cfg.store.update == "auto":
        return None
    steps = _difference_steps(layout, base_dir, node_table, vectors, edges)
    if steps is None:
        return None
    write_json(intent, {"mode": "difference", "base": base_dir.name})
    if spare:
        if not _take_spare(cfg, layout, store, path, base_dir, base_key):
            return None
    elif cfg.store.backend in MULTI_GRAPH:  # the published graph stays as it is for its readers; a copy is changed
        store.copy_graph(base_key)
    store.ensure_indexes(None)
    # Re-declared after the writes where the build asks for it: FalkorDB grows a vector index inside
    # the write that crosses its capacity, and that growth alone exceeds the per-query memory bound.
    store.drop_vector_index()
    for step in steps:
        _apply_diff(store, step, cfg.store.batch_size)
    log.info(
        "store graph written as the difference from %s: %s",
        " then ".join(step.base for step in steps),
        steps[-1].diff.counts,
    )
    return {
        "mode": "difference",
        "base": base_dir.name,
        "through": [step.base for step in steps[1:]],
        "base_published": not spare,
        "difference": steps[-1].diff.counts,
        "rows_written": sum(step.diff.writes for step in steps),
    }


def _apply_diff(store: GraphStore, difference: differences.Difference, batch_size: int) -> None:
    """`store.apply_diff` with only the nodes it writes made into `Node`s (`differences.compact`): a
    small change to a large graph then never turns every row into a Python object."""
    small = differences.compact(difference)
    store.apply_diff(small.diff, table_to_nodes(small.nodes), small.vectors, batch_size)


def _take_spare(cfg: BuildConfig, layout: Layout, store: GraphStore, path: Path, base_dir: Path, key: str) -> bool:
    """Moves the store graph of `base_dir` (the generation kept for a rollback) under this build's
    name, when no reader holds that generation; False when one does. Its load marker goes first,
    so nothing trusts the graph once it moves; `rollback_graph` loads it again if it is ever
    published after all."""
    from sagegraph.runlock import retiring

    with retiring(base_dir) as free:
        if not free:
            log.info("generation %s is still read: loading the new graph whole beside it", base_dir.name)
            return False
        gen_fp = read_json(base_dir / "manifest.json").get("fingerprint", "")
        loaded_place(cfg.store.backend, layout.out, path, cfg.store.graph, gen_fp)[1].unlink(missing_ok=True)
        store.take_graph(key)
    return True


def _store_place(cfg: BuildConfig, layout: Layout) -> tuple[Path, str, Path, str]:
    """Where cfg's store lives, the store graph this build generation is loaded into, the marker of
    what a build loaded there, and the fingerprint a load of this graph records in it."""
    path = Path(cfg.store.path or layout.out / "store")
    key, marker = loaded_place(cfg.store.backend, layout.out, path, cfg.store.graph, layout.cfg_fp["edges"])
    return path, key, marker, store_fingerprint(cfg, layout.cfg_fp["edges"])


def store_fingerprint(cfg: BuildConfig, graph_fingerprint: str) -> str:
    """What a load of the graph with `graph_fingerprint` records: the graph, the store code, and
    whether the engine's vector index was declared (a load made the other way is not reused)."""
    fingerprint = versioned(graph_fingerprint, "store")
    return content_id(fingerprint, "vector-index") if cfg.store.vector_index else fingerprint


def _current_load(cfg: BuildConfig, path: Path, key: str, marker: Path, fp: str) -> dict[str, Any] | None:
    """The marker's summary when this graph's load is recorded there and the store holds it
    (`_verified_reuse`); None when it must be loaded. The store load and the up-to-date check
    decide alike."""
    if not marker.exists() or read_json(marker).get("fingerprint") != fp:
        return None
    return _verified_reuse(cfg, path, key, marker)


def _verified_reuse(cfg: BuildConfig, path: Path, key: str, marker: Path) -> dict[str, Any] | None:
    """The marker's summary when the store opens and holds what the marker says was loaded
    (`load_mismatch`, as a reader checks it); None (and the marker removed, so the load below
    starts over) when it does not: a dead store was once reported as reused."""
    from sagegraph.store import open_store

    summary = read_json(marker)
    try:
        with open_store(cfg.store.backend, path, key, url=cfg.store.url) as store:
            mismatch = load_mismatch(store, marker, {"fingerprint": Layout.of(cfg).cfg_fp["edges"]})
    except StoreError as exc:
        log.warning("store at %s does not open (%s); loading it again", path, exc)
        marker.unlink(missing_ok=True)
        if cfg.store.backend == "falkordb" and (path / "graph.db").exists():  # moved aside whole, never deleted
            log.warning("moved the store that does not open to %s", move_aside(path, "broken"))
        return None
    if mismatch is not None:
        log.warning("%s; loading it again", mismatch)
        marker.unlink(missing_ok=True)
        return None
    return {**summary, "resumed": True, "seconds": 0.0}


# ---- 8. publication ---------------------------------------------------------------------------


def publish_graph(cfg: BuildConfig) -> dict[str, Any]:
    """Makes this build's graph the one readers get (`generations.publish`), once it is complete and
    loaded; then deletes the generations older than the one kept for a rollback, on disk and in
    the store, and the stage files no kept generation reads. Returns the publication record, with
    what the clean-up deleted (`stage_files_deleted`) where it deleted anything."""
    layout = Layout.of(cfg)
    rec = generations.publish(cfg.out, layout.graph)
    generations.keep_stats(cfg.out, layout.graph)
    retire_unread(cfg)
    if pruned := prune_stage_files(cfg):
        rec = {**rec, "stage_files_deleted": pruned}
    with _LATEST_LOCK:  # its difference is kept on disk; a long-lived process holds no copy past the build
        _latest.clear()
    return rec


def retire_unread(cfg: BuildConfig) -> None:
    """Deletes the retired generations no reader holds (`runlock.retiring`), on disk and in the
    store; one a running evaluation still reads is kept, and goes at a later publication."""
    from sagegraph.runlock import retiring

    old = generations.retired(cfg.out)
    with contextlib.ExitStack() as stack:
        free = [d for d in old if stack.enter_context(retiring(d))]
        if held := sorted(set(old) - set(free)):
            log.info("kept retired generations a reader still holds: %s", ", ".join(d.name for d in held))
        if free and cfg.store.backend in MULTI_GRAPH:
            _drop_store_graphs(cfg, [d for d in free if (d / "manifest.json").exists()])
        generations.drop(free)


def kept_stage_files(cfg: BuildConfig) -> retention.Kept | None:
    """What `retention.prune` keeps once `cfg`'s graph is published: the stage folders and batches
    of the published generation and of the one kept for a rollback, the ingest of the corpus as
    first built, the edge variants' folders. None where a kept generation cannot be traced to its
    stage folders (a graph built before its manifest named its ingest, or whose config no longer
    loads): then nothing is deleted."""
    record = generations.record(cfg.out)
    traced = [_stage_folders_of(cfg, name) for name in (record.get("current"), record.get("previous")) if name]
    found = [kept for kept in traced if kept is not None]
    if not found or len(found) != len(traced):
        return None
    folders: set[str] = set()
    batches: set[str] = set()
    for names, sources in found:
        if (listed := retention.ingest_batches(cfg.out / retention.STAGES / sources)) is None:
            return None
        folders |= names
        batches |= listed
    folders.add(Layout.of(cfg.model_copy(update={"corpus_version": ""})).stage_path("sources").name)
    return retention.Kept(frozenset(folders | retention.variant_folders(cfg.out)), frozenset(batches))


def _stage_folders_of(cfg: BuildConfig, generation: str) -> tuple[set[str], str] | None:
    """The stage folders a generation in cfg.out was built from, and its ingest's: the ingest and
    the edges its manifest names, the batch folders its config names."""
    path = cfg.out / generations.GRAPHS / generation / "manifest.json"
    manifest = read_json(path) if path.is_file() else {}
    sources, fingerprint = manifest.get("sources"), manifest.get("fingerprint")
    if not sources or not fingerprint:
        return None
    try:
        layout = Layout.of(BuildConfig.model_validate({**manifest["config"], "out": str(cfg.out)}))
    except (KeyError, TypeError, ValueError):  # pydantic's ValidationError is a ValueError
        return None
    return {
        sources,
        f"edges-{fingerprint}",
        *(layout.stage_path(stage).name for stage in retention.BATCH_STAGES),
    }, sources


def prune_stage_files(cfg: BuildConfig) -> dict[str, int] | None:
    """Deletes the stage files no kept generation, later build or variant reads (`retention`):
    what went (folders, batch files, MB), or None where nothing did."""
    kept = kept_stage_files(cfg)
    if kept is None:
        log.info("stage files kept whole: the generation kept for a rollback is not traced to its stage folders")
        return None
    try:
        pruned = retention.prune(cfg.out / retention.STAGES, kept).as_dict()
    except OSError as exc:  # the graph is published: a clean-up that cannot finish costs only disk
        log.warning("stage files not cleaned up at %s: %s", cfg.out / retention.STAGES, exc)
        return None
    if not (pruned["folders"] or pruned["files"]):
        return None
    log.info(
        "deleted stage files no kept generation reads: %d folders, %d batch files, %d MB",
        pruned["folders"],
        pruned["files"],
        pruned["mb"],
    )
    return pruned


def _drop_store_graphs(cfg: BuildConfig, dirs: list[Path]) -> None:
    from sagegraph.store import open_store

    layout = Layout.of(cfg)
    path = Path(cfg.store.path or layout.out / "store")
    places = [
        loaded_place(
            cfg.store.backend, layout.out, path, cfg.store.graph, read_json(d / "manifest.json").get("fingerprint", "")
        )
        for d in dirs
    ]
    keep = _store_place(cfg, layout)[1]
    try:
        with open_store(cfg.store.backend, path, keep, url=cfg.store.url) as store:
            for key, marker in places:
                if key != keep:
                    marker.unlink(missing_ok=True)  # first: a reader never trusts a graph being deleted
                    store.drop_graph(key)
    except StoreError as exc:  # the new graph is published; an old one left behind costs only disk
        log.warning("could not drop retired store graphs at %s: %s", path, exc)


def rollback_graph(cfg: BuildConfig) -> dict[str, Any]:
    """Publishes the generation published before the current one again, once its store load is
    checked to be there whole; the current one is kept, so a second rollback undoes the first."""
    rec = generations.record(cfg.out)
    previous = cfg.out / generations.GRAPHS / rec["previous"] if rec.get("previous") else None
    if previous is not None and (previous / "manifest.json").exists() and cfg.store.backend != "none":
        manifest = read_json(previous / "manifest.json")
        path = Path(cfg.store.path or cfg.out / "store")
        key, marker = loaded_place(cfg.store.backend, cfg.out, path, cfg.store.graph, manifest.get("fingerprint", ""))
        from sagegraph.store import open_store

        with open_store(cfg.store.backend, path, key, url=cfg.store.url) as store:
            if cfg.store.backend not in MULTI_GRAPH:
                _restore_in_place(cfg, store, marker, previous)
            elif load_mismatch(store, marker, manifest) is not None:
                _reload(cfg, store, key, marker, previous)
            if (why := load_mismatch(store, marker, manifest)) is not None:
                raise ConfigError(f"{cfg.out}: cannot roll back to {previous.name}: {why}")
    rec = generations.rollback(cfg.out)
    generations.restore_stats(cfg.out, cfg.out / generations.GRAPHS / rec["current"])
    return rec


def _reload(cfg: BuildConfig, store: GraphStore, key: str, marker: Path, target: Path) -> None:
    """The store graph of generation `target` loaded whole again from its files: a rebuild that
    stopped after taking that graph over (`_take_spare`) left the generation without one."""
    log.warning("the store holds no whole load of %s: loading it again before rolling back to it", target.name)
    marker.unlink(missing_ok=True)
    store.clear()
    node_table, vectors, edges = read_generation(target)
    counts = _load_whole(store, node_table, vectors, edges, cfg.store.batch_size)
    _declare_indexes(cfg, store, node_table, vectors)
    fingerprint = read_json(target / "manifest.json").get("fingerprint", "")
    write_json(
        marker,
        {
            "backend": cfg.store.backend,
            "graph": key,
            "fingerprint": store_fingerprint(cfg, fingerprint),
            "graph_fingerprint": fingerprint,
            **counts,
            "mode": "full",
        },
    )


def _restore_in_place(cfg: BuildConfig, store: GraphStore, marker: Path, target: Path) -> None:
    """A single-graph store (Neo4j Community) holds only the generation published now: rolling
    back writes the difference to `target` in one transaction, so readers see one graph or the
    other."""
    want = read_json(target / "manifest.json").get("fingerprint", "")
    held = read_json(marker).get("graph_fingerprint") if marker.exists() else None
    if held == want:
        return
    current = cfg.out / generations.GRAPHS / (held or "")[:16]
    if not held or not (current / "manifest.json").exists():
        raise ConfigError(
            f"{cfg.out}: cannot roll back to {target.name}: the store holds no graph this build knows ({marker.name})"
        )
    node_table, vectors, edges = read_generation(target)
    diff = generation_diff(current, target, node_table, vectors, edges)
    if diff is None:
        raise ConfigError(
            f"{cfg.out}: cannot roll back to {target.name} in place (its edges repeat a key); rebuild instead"
        )
    _apply_diff(store, differences.Difference(current.name, diff, node_table, vectors), cfg.store.batch_size)
    write_json(
        marker,
        {
            **read_json(marker),
            "fingerprint": store_fingerprint(cfg, want),
            "graph_fingerprint": want,
            "nodes": store.count_nodes(),
            "edges": store.count_edges(),
            "mode": "difference",
            "base": current.name,
            "difference": diff.counts,
            "rows_written": diff.writes,
        },
    )


__all__ = [
    "ingest",
    "chunk_batch",
    "metadata_batch",
    "embed_batch",
    "BatchVectors",
    "assemble",
    "edges_for_pair",
    "finalize_edges",
    "load_store",
    "publish_graph",
    "rollback_graph",
    "graph_stats",
    "present_pairs",
    "warm_up",
    "modalities_of",
    "estimate_metadata_cost",
    "content_id",
    "resolve_corpus",
    "up_to_date",
    "graph_changes",
    "corpus_read_once",
    "start_encoder",
    "stop_encoders",
]


# ---- 9. statistics ----------------------------------------------------------------------------


@releasing
def graph_stats(cfg: BuildConfig, pair_stats: list[str], graph_dir: Path | None = None) -> dict[str, Any]:
    """Statistics JSON + plots into <out>/stats (an edge variant's: beside its graph dir)."""
    from sagegraph.construct.stats import compute_stats, plot_stats

    layout = Layout.of(cfg)
    graph = graph_dir or layout.graph
    stats_dir = graph.parent / "stats" if graph_dir else layout.stats
    t0 = time.perf_counter()
    named = {Path(p).stem.removeprefix("pair-"): Path(p) for p in pair_stats}
    stats = compute_stats(graph, named)
    plots = plot_stats(stats, named, stats_dir)
    stats["plots"] = [str(p) for p in plots]
    write_json(stats_dir / "graph_stats.json", stats)
    return {
        "path": str(stats_dir / "graph_stats.json"),
        "plots": stats["plots"],
        "seconds": time.perf_counter() - t0,
        "summary": {k: stats[k] for k in ("nodes", "nodes_by_modality", "edges", "edges_by_type")},
    }
