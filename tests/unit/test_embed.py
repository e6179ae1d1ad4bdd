"""Encoder numerics: bf16 autocast where the CPU runs it natively, kept apart from fp32 in caches and fingerprints."""

from __future__ import annotations

import numpy as np
import pytest

from sagegraph import embed
from sagegraph.embed import CachedEncoder, SentenceTransformerEncoder, cache_name, resolve_precision
from sagegraph.retrieve.graph_index import GraphIndex
from tests.kb_mini import HashEncoder, build_mini

TEXTS = [
    "The Eiffel Tower was completed in 1889 for the World's Fair.",
    "Ada Lindqvist won the 1972 national chess championship in Uppsala.",
    "Rainfall in the basin peaks between June and August.",
    "A table of the 2004 season's results, with goals and assists per player.",
]


def test_explicit_precision_is_honoured_and_auto_follows_the_cpu(monkeypatch):
    assert resolve_precision("fp32", "cpu") == "fp32" and resolve_precision("bf16", "cpu") == "bf16"
    assert resolve_precision("auto", "cuda") == "fp32"
    monkeypatch.setattr(embed, "_cpu_has_bf16", lambda: True)
    assert resolve_precision("auto", "cpu") == "bf16"
    monkeypatch.setattr(embed, "_cpu_has_bf16", lambda: False)
    assert resolve_precision("auto", "cpu") == "fp32"
    assert cache_name("m", "fp32") == "m" and cache_name("m", "bf16") == "m@bf16"


def test_bf16_vectors_stay_within_cosine_1e_3_of_fp32(encoder):
    fp32 = SentenceTransformerEncoder(device="cpu", precision="fp32")
    bf16 = SentenceTransformerEncoder(device="cpu", precision="bf16")
    a, b = fp32.encode(TEXTS), bf16.encode(TEXTS)
    assert a.dtype == b.dtype == np.float32 and a.shape == b.shape == (len(TEXTS), 384)
    assert np.allclose(np.linalg.norm(b, axis=1), 1.0, atol=1e-4)
    assert (a * b).sum(1).min() > 0.999
    # Different texts stay as far apart as in fp32: the order of similarities is what chunking and
    # edges use. (Rank correlation over the distinct pairs: near-equal pairs may swap places.)
    from scipy.stats import spearmanr

    pairs = np.triu_indices(len(TEXTS), 1)
    assert spearmanr((a @ a.T)[pairs], (b @ b.T)[pairs]).statistic > 0.99


def test_fp32_and_bf16_vectors_never_share_cache_entries(tmp_path):
    path = tmp_path / "emb.sqlite"
    fp32 = CachedEncoder(SentenceTransformerEncoder(device="cpu", precision="fp32"), path)
    fp32.encode(TEXTS)
    bf16 = CachedEncoder(SentenceTransformerEncoder(device="cpu", precision="bf16"), path)
    bf16.encode(TEXTS)
    assert bf16.hits == 0 and bf16.inner.encoded == len(TEXTS)
    again = CachedEncoder(SentenceTransformerEncoder(device="cpu", precision="fp32"), path)
    again.encode(TEXTS)
    assert again.hits == len(TEXTS) and again.inner.encoded == 0


class _Rounding:
    """An encoder whose vectors for a text differ in the last bits from another's (as two batch
    shapes round differently); `meanwhile` runs while it encodes, as a second worker would."""

    name = "fake"
    dim = 2

    def __init__(self, offset: float, meanwhile=None):
        self.offset, self.meanwhile = offset, meanwhile

    def encode(self, texts):
        if self.meanwhile is not None:
            self.meanwhile()
        return np.array([[1.0, self.offset] for _ in texts], dtype=np.float32)


def test_two_workers_encoding_one_text_at_once_both_use_the_first_vector_stored(tmp_path):
    """Worker B misses the cache, and while it encodes, worker A stores its own vector for the same
    text: B's rows take A's, so a graph rebuilt from the cache is the graph the workers made."""
    path = tmp_path / "emb.sqlite"
    first = CachedEncoder(_Rounding(1e-4), path)
    second = CachedEncoder(_Rounding(2e-4, meanwhile=lambda: first.encode(["shared text"])), path)
    got = second.encode(["shared text", "own text"])
    assert got[0].tolist() == first.encode(["shared text"])[0].tolist() == np.float32([1.0, 1e-4]).tolist()
    assert got[1].tolist() == np.float32([1.0, 2e-4]).tolist()  # its own where it stored first


@pytest.mark.parametrize("stage", ["chunks", "vectors", "edges"])
def test_changing_precision_reruns_the_stages_that_encode(tmp_path, stage):
    from sagegraph.config import load_config
    from sagegraph.construct.artifacts import Layout
    from tests.fixtures import write_config

    fps = []
    for precision in ("fp32", "bf16"):
        cfg = load_config(
            write_config(tmp_path / f"{precision}.yaml", {"kind": "ottqa", "path": str(tmp_path)}, tmp_path / "out")
        )
        cfg = cfg.model_copy(update={"embedding": cfg.embedding.model_copy(update={"precision": precision})})
        fps.append(Layout.of(cfg).cfg_fp[stage])
    assert fps[0] != fps[1]


def test_backend_tokenizer_path_gives_the_library_vectors():
    """The fast path replaces only tokenization: fp32 vectors match sentence-transformers' own encode."""
    fast = SentenceTransformerEncoder(device="cpu", precision="fp32", batch_size=3)
    lib = SentenceTransformerEncoder(device="cpu", precision="fp32", batch_size=3)
    texts = TEXTS + ["  padded  ", "Ünïcode café — 1889", "long " * 600, ""]
    a = fast.encode(texts)
    assert lib.model is not None  # load, then take the library path
    lib._tokenize = None
    b = lib.encode(texts)
    assert fast._tokenize is not None
    assert np.abs(a - b).max() < 1e-5


def test_backend_tokenizer_is_refused_when_it_would_change_the_features(encoder, monkeypatch):
    model = encoder.model
    assert embed.fast_tokenizer(model) is not None
    real = model.preprocess

    def prompted(texts, *args, **kwargs):  # a model whose preprocessing does more than the backend
        return real(["query: " + t for t in texts], *args, **kwargs)

    monkeypatch.setattr(model, "preprocess", prompted)
    assert embed.fast_tokenizer(model) is None


def test_encoding_reports_progress_in_slices_of_whole_batches_with_the_same_vectors():
    """A build batch's windows were one silent encode call for minutes; the reporting wrapper
    encodes length-sorted slices of whole batches (the batches one call would make) and says how
    far it is, with the vectors of one call."""
    import numpy as np

    from sagegraph.embed import encode_reporting

    texts = [("w" * (i * 7919 % 97)) + str(i) for i in range(1000)]
    calls = []

    def encode(ts):
        calls.append([len(t) for t in ts])
        return np.array([[len(t), hash(t) % 1000] for t in ts], dtype=np.float32)

    lines = []
    out = encode_reporting(encode, lines.append, "chunk b1", batch_size=8, every_s=0)(texts)  # a line after every slice
    assert np.array_equal(out, encode(texts))
    slices = calls[:-1]
    assert [len(c) for c in slices] == [128] * 7 + [104] and all(c == sorted(c) for c in slices)
    assert [max(a) <= min(b) for a, b in zip(slices, slices[1:])] == [True] * 7  # one global length order
    assert (
        len(lines) == 8
        and lines[0].startswith("chunk b1: 128/1,000 texts,")
        and "left" in lines[0]
        and lines[-1].endswith("done")
    )
    assert encode_reporting(encode, None, "x") is encode  # no reporter: the plain call


def test_exact_vectors_are_fp32_and_keep_a_text_s_vector_whatever_is_batched_beside_it(tmp_path, encoder, monkeypatch):
    """DGR ranks chains whose cosines to the question can differ by less than bf16's batch noise:
    through `exact_vectors` a text gets the same vector alone or beside others, whatever the build's
    numerics (here forced to bf16), and an encoder with no precision (a test's) is used as it is.
    Checked where the cache cannot be written, so every vector here is the model's own."""
    mini = build_mini(tmp_path / "graph")
    from sagegraph.retrieve import graph_index

    monkeypatch.setattr(graph_index, "cached_if_writable", lambda inner, path, name=None: inner)
    g = GraphIndex(mini.dir, encoder=SentenceTransformerEncoder(device="cpu", precision="bf16"))
    assert g._exact_encoder.precision == "fp32" and g.encoder.precision == "bf16"
    alone = GraphIndex(mini.dir, encoder=SentenceTransformerEncoder(device="cpu", precision="bf16")).exact_vectors(
        TEXTS[:1]
    )
    batched = g.exact_vectors(TEXTS[::-1] + ["a much longer text " * 20])
    assert np.abs(alone[0] - batched[len(TEXTS) - 1]).max() < 1e-5
    assert np.array_equal(g.exact_vectors(TEXTS[:1]), batched[len(TEXTS) - 1 : len(TEXTS)])  # memoised
    hashed = GraphIndex(mini.dir, encoder=HashEncoder())
    assert hashed._exact_encoder is hashed.encoder
    assert np.allclose(hashed.exact_vectors(TEXTS), np.stack([hashed.query_vector(t) for t in TEXTS]))
    assert not g.vector_cache.exists()


class CountingEncoder(HashEncoder):
    def __init__(self):
        self.texts: list[str] = []

    def encode(self, texts):
        self.texts += texts
        return super().encode(texts)


def test_a_graph_s_exact_vectors_are_kept_in_its_embedding_cache_for_the_next_process(tmp_path):
    """Chains and names recur in every sweep and replay on a graph: a second reader (another
    process, sweep or replay) gets the first one's vectors without encoding them again."""
    mini = build_mini(tmp_path / "graph")
    first, second = CountingEncoder(), CountingEncoder()
    made = GraphIndex(mini.dir, encoder=first).exact_vectors(TEXTS)
    again = GraphIndex(mini.dir, encoder=second).exact_vectors(TEXTS[::-1])
    assert first.texts == TEXTS and second.texts == [] and np.array_equal(again, made[::-1])
    assert GraphIndex(mini.dir).vector_cache == mini.dir.parent / "cache" / "embeddings.sqlite"
    assert GraphIndex(mini.dir).vector_cache.exists()
    GraphIndex(mini.dir, encoder=second).exact_vectors(["a text no one read"])
    assert second.texts == ["a text no one read"]


def test_a_tuned_encoder_s_vectors_are_keyed_by_its_training(tmp_path):
    """A tuned encoder retrained in place reads differently: its cached vectors are keyed by its
    training record, and one with no record (made elsewhere) is not cached."""
    from sagegraph.retrieve.kb.chain_encoder import RECORD, SelectorEncoder, encoder_fingerprint

    tuned = tmp_path / "tuned"
    tuned.mkdir()
    (tuned / "modules.json").write_text("[]")
    cache = tmp_path / "cache" / "embeddings.sqlite"
    assert not isinstance(SelectorEncoder(str(tuned), cache)._inner, CachedEncoder)  # untracked
    (tuned / RECORD).write_text('{"loss": 0.5}')
    trained = encoder_fingerprint(str(tuned))
    before = SelectorEncoder(str(tuned), cache)._inner
    (tuned / RECORD).write_text('{"loss": 0.4}')
    after = SelectorEncoder(str(tuned), cache)._inner
    assert isinstance(before, CachedEncoder) and isinstance(after, CachedEncoder)
    assert before.name == f"tuned-encoder-{trained}"
    assert before.name != after.name == f"tuned-encoder-{encoder_fingerprint(str(tuned))}"


def test_the_encoder_process_gives_the_in_process_vectors_and_names_a_failed_load():
    """A build in one process encodes in a child (`EncoderProcess`): the same model and kernels, so
    the same vectors; a model that cannot load is reported, with its reason, where it is used."""
    from sagegraph.embed import EncoderProcess
    from sagegraph.errors import SageGraphError

    texts = ["a film about graphs", "x " * 300, "Paris"]
    child = EncoderProcess(SentenceTransformerEncoder(precision="fp32"))
    try:
        assert child.name == SentenceTransformerEncoder(precision="fp32").name and child.dim == 384
        vectors = child.encode(texts)
        assert np.array_equal(vectors, SentenceTransformerEncoder(precision="fp32").encode(texts))
        assert child.encoded == 3 and child.encode_seconds > 0
        assert child.encode([]).shape == (0, 384)
    finally:
        child.close()
    broken = EncoderProcess(SentenceTransformerEncoder("/nonexistent/model", precision="fp32"))
    try:
        with pytest.raises(SageGraphError, match="encoding failed in the encoder's process") as failed:
            broken.encode(["text"])
        assert "/nonexistent/model: no such folder" in str(failed.value)  # said before the library's imports
    finally:
        broken.close()


def test_a_killed_encoder_process_stops_the_encode_with_one_line_and_close_ends_a_loading_one():
    import os
    import signal
    import time

    from sagegraph.embed import EncoderProcess
    from sagegraph.errors import SageGraphError

    child = EncoderProcess(SentenceTransformerEncoder(precision="fp32"))
    os.kill(child._process.pid, signal.SIGKILL)
    with pytest.raises(SageGraphError, match="encoder's process stopped"):
        child.encode(["text"])
    child.close()
    loading = EncoderProcess(SentenceTransformerEncoder(precision="fp32"))
    started = time.perf_counter()
    loading.close()  # at once, not after the model's load
    assert loading._process.returncode is not None and time.perf_counter() - started < 5


def test_a_cache_folder_that_cannot_be_written_leaves_the_encoder_uncached(tmp_path, monkeypatch):
    inner = HashEncoder()
    assert isinstance(embed.cached_if_writable(inner, tmp_path / "new" / "cache" / "e.sqlite"), CachedEncoder)
    monkeypatch.setattr(embed.os, "access", lambda path, mode: False)  # as for a reader of another user's folder
    assert embed.cached_if_writable(inner, tmp_path / "new" / "cache" / "e.sqlite") is inner
    assert not (tmp_path / "new").exists()
