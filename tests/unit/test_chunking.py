import numpy as np
import pytest

from sagegraph.construct.chunking import (
    adjacent_similarities,
    chunk_documents,
    cut_positions,
    percentile_threshold,
    segment,
    window_texts,
)
from sagegraph.construct.tables import MAX_ROWS, MIN_ROWS, segment_sizes, segment_table
from sagegraph.corpus.records import Table
from sagegraph.index.sentences import split_sentences


def test_windows_are_previous_current_next_with_truncation():
    assert window_texts(["a", "b", "c"]) == ["a b", "a b c", "b c"]
    assert window_texts(["a"]) == ["a"]


def test_adjacent_similarity_is_cosine_of_consecutive_windows():
    v = np.array([[1, 0], [1, 0], [0, 1]], dtype=np.float32)
    assert np.allclose(adjacent_similarities(v), [1.0, 0.0])


def test_cuts_at_and_below_the_20th_percentile():
    sims = np.array([0.9, 0.2, 0.8, 0.85, 0.1, 0.95, 0.7, 0.75, 0.88, 0.92])
    theta = percentile_threshold(sims, 20)
    assert theta == pytest.approx(np.percentile(sims, 20))
    assert cut_positions(sims, theta) == [1, 4]  # the two lowest of ten values (20%)
    sents = [f"s{i}" for i in range(11)]
    assert segment(sents, sims, theta) == ["s0 s1", "s2 s3 s4", "s5 s6 s7 s8 s9 s10"]


def test_short_pieces_merge_and_long_pieces_split_at_weakest_boundary():
    sents = ["x" * 50] * 7
    sims = np.array([0.1, 0.9, 0.9, 0.1, 0.9, 0.9])
    # cuts after 0 and 3 -> 1, 3, 3 sentences; min 120 chars merges the 50-char first piece only
    assert [len(c) for c in segment(sents, sims, 0.1, min_chars=120)] == [203, 152]
    assert len(segment(sents[:6], sims[:5], 0.1, min_chars=120)) == 1  # a short tail merges too
    long = segment(sents[:6], np.array([0.5, 0.4, 0.3, 0.6, 0.7]), theta=-1, max_chars=160)
    assert [c.count("x" * 50) for c in long] == [3, 3]


def test_chunk_documents_uses_one_encode_and_skips_single_sentences():
    calls = []

    def encode(texts):
        calls.append(len(texts))
        rng = np.random.default_rng(0)
        v = rng.normal(size=(len(texts), 8)).astype(np.float32)
        return v / np.linalg.norm(v, axis=1, keepdims=True)

    docs = [["only one."], [f"s{i}." for i in range(6)]]
    out = chunk_documents(docs, encode, min_chars=0)
    assert calls == [6] and out[0] == ["only one."]
    assert " ".join(out[1]) == " ".join(docs[1]) and len(out[1]) >= 2


def test_real_encoder_cuts_a_topic_shift(encoder):
    text = (
        "The Amarin River flows through a wide valley. Its water feeds farms along the banks. Dams on the river "
        "produce power. "
        "The violin concerto premiered in Vienna. Critics praised the soloist's phrasing. The orchestra toured "
        "Europe afterwards."
    )
    chunks = chunk_documents([split_sentences(text)], encoder.encode, min_chars=0)[0]
    # Centred windows see a shift one sentence early: the cut lands inside the river part, never
    # inside the music part.
    assert len(chunks) >= 2 and "violin" not in chunks[0] and "Amarin" not in chunks[-1]
    assert "violin" in chunks[-1] and "orchestra" in chunks[-1]


def test_sentence_splitter_keeps_abbreviations():
    assert split_sentences("Dr. Smith met J. Doe in the U.S. Army. They left.") == [
        "Dr. Smith met J. Doe in the U.S. Army.",
        "They left.",
    ]


@pytest.mark.parametrize("n", [1, 4, 10, 11, 15, 20, 23, 37, 100])
def test_table_segments_hold_5_to_10_rows(n):
    sizes = segment_sizes(n)
    assert sum(sizes) == n
    if n > MAX_ROWS:
        assert all(MIN_ROWS <= s <= MAX_ROWS for s in sizes)
    else:
        assert sizes == [n]


def test_each_table_segment_keeps_title_and_header():
    t = Table(
        id="t",
        title="Rivers",
        header=["Name", "Length"],
        rows=[[f"R{i}", str(i)] for i in range(17)],
        section_title="Europe",
        section_text="Long rivers.",
    )
    segs = segment_table(t)
    assert [(a, b) for a, b, _ in segs] == [(0, 9), (9, 17)]
    for _, _, text in segs:
        assert text.startswith("Rivers - Europe\nLong rivers.\nName | Length\n")


def test_documents_that_cannot_be_cut_are_not_encoded():
    calls = []

    def encode(texts):
        calls.append(list(texts))
        return np.eye(len(texts), 4, dtype=np.float32)

    short = ["a" * 40 + ".", "b" * 40 + "."]  # 83 chars < 2 x 50: any cut would merge back
    assert chunk_documents([short], encode, min_chars=50) == [[" ".join(short)]]
    assert calls == []
    # with the same input and no minimum, the percentile rule does cut
    assert len(chunk_documents([short], encode, min_chars=0)[0]) == 2


def _text_encoder(calls):
    """Deterministic per text (like the real model): equal windows get equal vectors."""

    def encode(texts):
        calls.extend(texts)
        out = []
        for t in texts:
            v = np.random.default_rng(sum(map(ord, t)) * 7919 + len(t)).normal(size=8)
            out.append(v / np.linalg.norm(v))
        return np.asarray(out, dtype=np.float32)

    return encode


def _chunk_naively(sents, encode, min_chars, max_chars):
    if len(sents) < 2:
        return [" ".join(sents)] if sents else []
    sims = adjacent_similarities(encode(window_texts(sents)))
    return segment(sents, sims, percentile_threshold(sims, 20.0), min_chars, max_chars)


@pytest.mark.parametrize("min_chars,max_chars", [(0, 10**9), (60, 400), (200, 2000), (150, 260)])
def test_skipping_unneeded_windows_never_changes_the_chunks(min_chars, max_chars):
    rng = np.random.default_rng(min_chars + max_chars)
    docs = []
    for _ in range(300):
        n = int(rng.integers(0, 9))
        docs.append([("w" * int(rng.integers(3, 120))) + f" {j}." for j in range(n)])
    skipped_calls, naive_calls = [], []
    got = chunk_documents(docs, _text_encoder(skipped_calls), min_chars=min_chars, max_chars=max_chars)
    want = [_chunk_naively(d, _text_encoder(naive_calls), min_chars, max_chars) for d in docs]
    assert got == want
    assert len(skipped_calls) < len(naive_calls)
