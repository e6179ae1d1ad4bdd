"""The end-to-end half of tests/unit/test_graphraft.py: servers, subprocesses or whole builds."""

from __future__ import annotations

import pytest

from sagegraph.corpus.records import Question
from sagegraph.retrieve import get_retriever
from sagegraph.retrieve.graphraft.labels import (
    label_questions,
)
from tests.unit.test_graphraft import (
    g,  # noqa: F401 (a fixture)
    ids,
)


def test_a_selector_encoder_tuned_on_labels_reads_the_labelled_template_closer_and_the_retriever_uses_it(g, tmp_path):
    """Labels carry what the tuned `similar` selector is trained on (the question as it reads it
    against the best template, that template's phrase, worse templates' phrases around the same
    entities); tuning the real all-MiniLM-L6-v2 on them moves the phrase closer than its negatives,
    and `selector_encoder` puts the tuned model in the retriever's selection."""
    from sagegraph.embed import SentenceTransformerEncoder
    from sagegraph.retrieve.kb.chain_encoder import SelectorEncoder, train_selector_encoder

    qs = [
        Question("q1", "Which films did Ana Silva direct?", ["m1", "m2"]),
        Question("q2", "Which films did Ben Cho act in?", ["m1", "m9"]),
    ]
    rows = label_questions(
        get_retriever("graphraft", g, ner="gazetteer", selector="prior"), qs, tmp_path / "labels.jsonl"
    )
    by = {x["qid"]: x for x in rows}
    assert by["q1"]["masked"] == "Which films did   direct?" and by["q1"]["phrase"] == "directed (Movie)"
    assert by["q1"]["negatives"] and "directed (Movie)" not in by["q1"]["negatives"]

    def margin(encode):
        x = by["q1"]
        v = encode([x["masked"], x["phrase"], *x["negatives"]])
        return float(v[1] @ v[0] - max(v[2:] @ v[0]))

    before = margin(SentenceTransformerEncoder(precision="fp32").encode)
    info = train_selector_encoder(rows, tmp_path / "enc", epochs=8, batch_size=4, lr=1e-4)
    assert info["triplets"] >= 2 and (tmp_path / "enc" / "selector_training.json").exists()
    assert margin(SelectorEncoder(str(tmp_path / "enc")).vectors) > before
    r = get_retriever(
        "graphraft", g, ner="gazetteer", selector="similar", selector_encoder=str(tmp_path / "enc"), m=1, fill=False
    )
    out = r.search("Which films did Ana Silva direct?", 5)
    assert out.trace["selection"]["replies"][0].endswith("directed (Movie)") and ids(g, out.idx) == {"m1", "m2"}
    from sagegraph.retrieve.graphraft.params import GraphRAFTParams
    from sagegraph.retrieve.graphraft.retriever import GraphRAFTRetriever

    params = GraphRAFTParams(selector="similar", selector_encoder=str(tmp_path / "enc"))
    key = GraphRAFTRetriever.prompt_for(params)
    assert key.startswith(GraphRAFTRetriever.prompt_version + "+encoder-")
    (tmp_path / "enc" / "selector_training.json").write_text("{}")  # retrained in place: another run key
    assert GraphRAFTRetriever.prompt_for(params) != key
    with pytest.raises(Exception, match="train-selector"):  # a sweep plans its run keys before its first question
        GraphRAFTRetriever.prompt_for(GraphRAFTParams(selector="similar", selector_encoder=str(tmp_path / "none")))
    with pytest.raises(Exception, match="not a sentence-transformers directory"):
        get_retriever("graphraft", g, ner="gazetteer", selector="similar", selector_encoder=str(tmp_path), m=1).search(
            "Which films did Ana Silva direct?", 5
        )
