"""A sentence encoder tuned to read relation-chain phrases against questions of one KB: the
`similar` selector's trained variant in GraphRAFT (not the paper's, whose selector is a fine-tuned
LLM), and what DGR's `fallback: chain` can rank its walks' chains with (`chain_encoder`). Both
read chains the same way (`chains.py`), so one encoder serves both.

Why: the untuned encoder cannot count hops ("X's child's mother" and "X's child's mother's
mother" read almost alike), which is most of `similar`'s misses. The paper's answer is a selector
fine-tuned on the KB's training questions, labelled by gold (GraphRAFT's `labels.py`); an LLM needs
a GPU for that, while all-MiniLM-L6-v2 tunes on two CPU cores (or in seconds on a GPU). Training
pairs are each kept label's masked question and its best template's phrase, with a hard negative
from the templates around the same entities that hold fewer gold answers (a chain one hop short or
long), under sentence-transformers' MultipleNegativesRankingLoss (in-batch negatives as well). The
loop is ours because the library's trainer needs Hugging Face `datasets`; the loss and model are
its.
"""

from __future__ import annotations

import functools
import json
import os
import random
import shutil
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from sagegraph.errors import ConfigError
from sagegraph.progress import ticker
from sagegraph.runlock import hold

RECORD = "selector_training.json"
# `sagegraph adapt` writes a graph generation's own encoder here; `selector_encoder: adapted` reads it.
ADAPTED = "adapted"
ADAPTED_DIR = Path("adapt") / "selector-encoder"


def training_triplets(labels: list[dict[str, Any]], negatives: int = 3, seed: int = 0) -> list[tuple[str, str, str]]:
    """(masked question, best phrase, a worse phrase) for each kept label and up to `negatives`
    of its hard negatives; labels without a phrase (written before phrases were labelled), without
    a negative, or whose annotated relation path no template walks are skipped."""
    rng = random.Random(seed)
    out: list[Any] = []
    for x in labels:
        if not x.get("kept") or not x.get("phrase") or not x.get("negatives") or x.get("label_by") == "hits_unwalked":
            continue
        worse = list(x["negatives"])
        rng.shuffle(worse)
        out.extend((x["masked"], x["phrase"], n) for n in worse[:negatives])
    return out


def hardest_negatives(labels: list[dict[str, Any]], encoder: SelectorEncoder, keep: int) -> list[dict[str, Any]]:
    """Each label's negatives cut to the `keep` that `encoder` reads closest to its question: a
    second round trains on the first tuned encoder's own near-misses instead of random ones."""
    out = []
    for x in labels:
        if x.get("negatives") and x.get("masked"):
            v = encoder.vectors([x["masked"], *x["negatives"]])
            order = np.argsort(-(v[1:] @ v[0]), kind="stable")[:keep]
            x = {**x, "negatives": [x["negatives"][i] for i in order]}
        out.append(x)
    return out


def train_selector_encoder(
    labels: list[dict[str, Any]],
    out: Path,
    base: str | None = None,
    epochs: int = 1,
    batch_size: int = 32,
    lr: float = 2e-5,
    negatives: int = 3,
    seed: int = 0,
    report: Callable[[str], None] | None = None,
    mine_with: str | None = None,
    note: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """Tune `base` (default: the graph encoder all-MiniLM-L6-v2) and save it under `out` as a
    sentence-transformers directory that `selector_encoder` (the retriever param) loads; with
    `mine_with` (a tuned encoder), on the negatives that encoder reads closest. The encoder appears
    under `out` whole or not at all (see `publish_folder`), and a folder that holds something other than
    an encoder is refused before any training is paid for. One run at a time writes `out` (the
    project's directory lock, as builds and sweeps hold theirs): a second is refused at once.
    `note` joins the training record (what the labels were drawn from)."""
    out = Path(out)
    _check_destination(out)
    with hold(out, "train-selector", owned=False):
        return _train(labels, out, base, epochs, batch_size, lr, negatives, seed, report, mine_with, note or {})


def _train(
    labels: list[dict[str, Any]],
    out: Path,
    base: str | None,
    epochs: int,
    batch_size: int,
    lr: float,
    negatives: int,
    seed: int,
    report: Callable[[str], None] | None,
    mine_with: str | None,
    note: dict[str, Any],
) -> dict[str, Any]:
    if mine_with:
        labels = hardest_negatives(labels, SelectorEncoder(mine_with), negatives)
    import torch
    from sentence_transformers import SentenceTransformer
    from sentence_transformers.sentence_transformer.losses import MultipleNegativesRankingLoss

    from sagegraph.embed import MINILM, _model_path, pick_device

    triplets = training_triplets(labels, negatives, seed)
    if not triplets:
        raise ConfigError(
            "no training pairs: the labels hold no kept label with a phrase and a worse template "
            "(make them with `sagegraph graphraft labels` on training questions)"
        )
    torch.manual_seed(seed)
    rng = random.Random(seed)
    device = pick_device("auto")
    model = SentenceTransformer(_model_path(base or MINILM), device=device)
    loss = MultipleNegativesRankingLoss(model)
    optim = torch.optim.AdamW(model.parameters(), lr=lr)
    t0, steps, last = time.perf_counter(), 0, 0.0
    model.train()
    tick = ticker("train-selector", len(triplets) * epochs, "triplets", report, every_s=30.0)
    for _ in range(epochs):
        order = list(range(len(triplets)))
        rng.shuffle(order)
        for batch in _batches_without_repeats([triplets[i] for i in order], batch_size):
            features = [_on(model.preprocess([t[c] for t in batch]), device) for c in range(3)]
            value = loss(features, torch.zeros(len(batch), device=device))
            optim.zero_grad()
            value.backward()
            optim.step()
            steps, last = steps + 1, float(value.detach())
            if tick:
                tick(len(batch))
    model.eval()
    info = {
        "base": base or MINILM,
        "mined_with": mine_with,
        "triplets": len(triplets),
        "questions": len({t[0] for t in triplets}),
        "epochs": epochs,
        "steps": steps,
        "batch_size": batch_size,
        "lr": lr,
        "final_loss": round(last, 4),
        "seconds": round(time.perf_counter() - t0, 1),
        "device": device,
        **note,
    }

    def write(folder: Path) -> None:
        model.save(str(folder))
        (folder / RECORD).write_text(json.dumps(info, indent=1))

    publish_folder(out, write)
    return info


def _check_destination(out: Path) -> None:
    if out.exists() and (not out.is_dir() or (any(out.iterdir()) and not (out / "modules.json").exists())):
        raise ConfigError(
            f"--out {out}: exists and is not a selector encoder; give a new folder (it would be replaced)"
        )


def publish_folder(out: Path, write: Callable[[Path], Any]) -> None:
    """Write into a folder beside `out`, then rename it into place, the previous encoder moved
    aside first: a run killed while saving leaves the old encoder and that folder (cleared by the
    next run, which holds the lock), and a reader sees the old weights or the new ones, never a mix
    (for the instant between the two renames it sees none, and `_require_encoder` says so)."""
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp, old = out.parent / f".{out.name}.new", out.parent / f".{out.name}.old"
    for leftover in (tmp, old):
        shutil.rmtree(leftover, ignore_errors=True)
    tmp.mkdir()
    write(tmp)
    if out.exists():
        os.rename(out, old)
    os.rename(tmp, out)
    shutil.rmtree(old, ignore_errors=True)


def _on(features: dict[str, Any], device: str) -> dict[str, Any]:
    """Tensors to the device; the rest (sentence-transformers' `modality` tag) as it is."""
    return {k: v.to(device) if hasattr(v, "to") else v for k, v in features.items()}


def _batches_without_repeats(triplets: list[tuple[str, str, str]], size: int):
    """No two rows of a batch share a question or a positive phrase, so another row's positive is
    never the right answer read as a wrong one. A row's hard negative may still be another row's
    positive (sentence-transformers' NO_DUPLICATES sampler checks every text; this checks two)."""
    pending = list(triplets)
    while pending:
        batch: list[Any] = []
        seen: set[Any] = set()
        rest: list[Any] = []
        for t in pending:
            if len(batch) < size and t[0] not in seen and t[1] not in seen:
                batch.append(t)
                seen.update((t[0], t[1]))
            else:
                rest.append(t)
        yield batch
        pending = rest


class SelectorEncoder:
    """An encoder read in fp32, with a memo of its vectors (phrases recur across questions). fp32
    because bf16 vectors move with the texts batched beside them (cosines by up to ~1e-3 on this
    project's CPUs, fp32's by ~1e-7), enough to swap two chains that read alike: a question's
    answer would depend on which questions ran before it in the process."""

    def __init__(self, path: str, cache: Path | None = None):
        _require_encoder(path)
        from sagegraph.embed import Encoder, SentenceTransformerEncoder, cached_if_writable

        self._inner: Encoder = SentenceTransformerEncoder(path, precision="fp32")
        fingerprint = encoder_fingerprint(path)
        if cache is not None and fingerprint != "untracked":  # keyed by its training: one retrained in place misses
            self._inner = cached_if_writable(self._inner, cache, name=f"tuned-encoder-{fingerprint}")
        self._memo: dict[str, np.ndarray] = {}
        self._lock = threading.Lock()

    def vectors(self, texts: list[str]) -> np.ndarray:
        with self._lock:
            todo = list(dict.fromkeys(t for t in texts if t not in self._memo))
            if todo:
                self._memo.update(zip(todo, self._inner.encode(todo)))
            return (
                np.stack([self._memo[t] for t in texts]) if texts else np.zeros((0, self._inner.dim), dtype=np.float32)
            )


@functools.cache
def selector_encoder(path: str, cache: Path | None = None) -> SelectorEncoder:
    """One encoder a process and path; `cache`: an embedding cache its vectors are kept in."""
    return SelectorEncoder(path, cache)


def encoder_fingerprint(path: str) -> str:
    """12 hex digits of the training record written beside the weights (its time and loss differ
    between trainings); "untracked" for an encoder made elsewhere. A path with no encoder is an
    error here, when a sweep plans its configurations, not at its first question."""
    import hashlib

    _require_encoder(path)
    record = Path(path) / RECORD
    return hashlib.sha256(record.read_bytes()).hexdigest()[:12] if record.exists() else "untracked"


def keyed_prompt(prompt_version: str, path: str | None) -> str:
    """A run key's prompt part for a retriever that may rank through a tuned encoder: one retrained
    in place ranks differently, so its training record's fingerprint joins the key and the run
    reruns (its replies replay) instead of resuming old rows. The graph's adapted encoder is not
    known before the graph is (`adapted_inputs` stamps it into each run's inputs instead)."""
    if path == ADAPTED:
        return f"{prompt_version}+adapted"
    return f"{prompt_version}+encoder-{encoder_fingerprint(path)}" if path else prompt_version


def adapted_path(graph_dir: Path) -> Path:
    return Path(graph_dir) / ADAPTED_DIR


def _adapted_encoder(graph_dir: Path) -> Path | None:
    """The graph's adapted encoder where `sagegraph adapt` made one."""
    path = adapted_path(graph_dir)
    return path if (path / "modules.json").exists() else None


class ReadTogether:
    """Two encoders read as one: each text's two unit vectors side by side, over sqrt(2), so a dot
    product is the mean of the two cosines. An adapted encoder has learnt the KB's chains from
    questions in the KB's own relation words and the few others the model gave; the graph's
    general encoder still reads the words people use that neither has ('sex' for `gender`). On the
    three development KBs' dev samples the two together read better than either alone
    (experiments/kb-adapt)."""

    def __init__(self, general: Callable[[list[str]], np.ndarray], adapted: SelectorEncoder):
        self.general, self.adapted = general, adapted

    def vectors(self, texts: list[str]) -> np.ndarray:
        both = np.hstack([self.general(texts), self.adapted.vectors(texts)])
        return (both / np.sqrt(2.0)).astype(np.float32)


def tuned_encoder(graph: Any, value: str | None) -> SelectorEncoder | ReadTogether | None:
    """The encoder a `selector_encoder`-like parameter names: a path (that encoder alone), `adapted`
    (the graph's own from `sagegraph adapt`, read together with the graph's general encoder; the
    general one alone where the graph has no adaptation), or None (the graph's general encoder).
    `graph`: the open GraphIndex."""
    if value == ADAPTED:
        path = _adapted_encoder(graph.dir)
        return ReadTogether(graph.exact_vectors, selector_encoder(str(path), graph.vector_cache)) if path else None
    return selector_encoder(value, graph.vector_cache) if value else None


def adapted_inputs(graph_dir: Path, value: str | None) -> str:
    """What a run reads beside the graph when it takes the adapted encoder: its training record's
    fingerprint ('none' where the graph has none), so adapting a graph again reruns its runs."""
    if value != ADAPTED:
        return ""
    path = _adapted_encoder(graph_dir)
    return f"adapted-{encoder_fingerprint(str(path))}" if path else "adapted-none"


def _require_encoder(path: str) -> None:
    if not (Path(path) / "modules.json").exists():
        raise ConfigError(
            f"tuned encoder {path}: not a sentence-transformers directory "
            "(train one with `sagegraph graphraft train-selector`; docs/llm-retrievers.md)"
        )
