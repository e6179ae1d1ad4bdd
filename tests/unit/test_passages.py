"""Sentence vectors of long node texts: a phrase finds the node one of whose sentences says it,
where the node's one vector is dominated by the rest of its text. A bag-of-words encoder stands in
for the model, so the arithmetic is exact."""

import numpy as np

from sagegraph.index.passages import PassageIndex

VOCAB = ["puppet", "desert", "map", "score", "crew", "season", "film"]


def encode(texts):
    out = np.zeros((len(texts), len(VOCAB)), np.float32)
    for i, t in enumerate(texts):
        for w in t.lower().replace(".", " ").split():
            if w in VOCAB:
                out[i, VOCAB.index(w)] += 1
    return out


FILLER = "The score was praised. The crew was small. The season was long. "
TEXTS = [
    FILLER + "A puppet leads the film. A desert hides a map.",  # the motifs, among filler
    FILLER + "The film is about a season.",
    "puppet",  # one sentence: no sentence vectors, the node vector scores it
    FILLER + "A desert. A map.",
]


def test_a_phrase_scores_a_node_by_its_closest_sentence(tmp_path):
    index = PassageIndex.build(TEXTS, encode)
    assert set(index.owner.tolist()) == {0, 1, 3}  # short text: no sentences kept
    q = encode(["puppet"])[0]
    best = index.best(q / np.linalg.norm(q), np.array([0, 1, 2, 3]))
    assert best[0] > 0.7 and best[1] == 0 and np.isnan(best[2]) and best[3] == 0
    # rows asked for in any order, a subset
    assert np.allclose(index.best(q / np.linalg.norm(q), np.array([3, 0])), [0, best[0]])


def test_it_is_built_once_per_graph_and_again_when_the_graph_changes(tmp_path):
    calls = []

    def counting(texts):
        calls.append(len(texts))
        return encode(texts)

    a = PassageIndex.load_or_build(tmp_path / "p", TEXTS, counting, "fp-1|model")
    b = PassageIndex.load_or_build(tmp_path / "p", TEXTS, counting, "fp-1|model")
    assert len(calls) == 1 and np.array_equal(a.owner, b.owner) and np.allclose(a.vectors, b.vectors)
    PassageIndex.load_or_build(tmp_path / "p", TEXTS[:2], counting, "fp-2|model")
    assert len(calls) == 2
    (tmp_path / "p" / "passages.npz").write_bytes(b"torn")  # unreadable: built again, not a crash
    PassageIndex.load_or_build(tmp_path / "p", TEXTS[:2], counting, "fp-2|model")
    assert len(calls) == 3 and not list((tmp_path / "p").glob("*.tmp*"))
