"""STaRK into the KB layout: a tiny SKB written in stark-qa's own processed format (PRIME's), loaded
by stark-qa's classes when the optional extra is installed, converted, built and searched."""

import json
import pickle
from types import SimpleNamespace

import pandas as pd
import pytest
import torch

from sagegraph.corpus.jsonl import ErrorPolicy
from sagegraph.corpus.kb import load_kb
from sagegraph.corpus.questions import load_questions
from sagegraph.corpus.stark import convert, label_of, qa_rows, rel_of, write_kb, write_questions
from sagegraph.errors import ConfigError

PRIME_TYPES = [
    "disease",
    "gene/protein",
    "molecular_function",
    "drug",
    "pathway",
    "anatomy",
    "effect/phenotype",
    "biological_process",
    "cellular_component",
    "exposure",
]  # PrimeSKB.NODE_TYPES, in its order
NODE_TYPES = dict(enumerate(PRIME_TYPES))
TYPES_OF_NODES = [0, 1, 1, 3]
EDGE_TYPES = {0: "ppi", 1: "off-label use", 2: "associated with"}
NODE_INFO = {
    0: {
        "id": 1,
        "type": "disease",
        "name": "asthma",
        "source": "MONDO",
        "details": {"mondo_definition": "A chronic airway disease.", "umls": ["C0004096"]},
    },
    1: {"id": 2, "type": "gene/protein", "name": "IL13", "source": "NCBI"},
    2: {
        "id": 3,
        "type": "gene/protein",
        "name": "IL4R",
        "source": "NCBI",
        "details": {"summary": "Interleukin 4 receptor."},
    },
    3: {
        "id": 4,
        "type": "drug",
        "name": "dupilumab",
        "source": "DrugBank",
        "details": {"description": "An antibody.", "half_life": "nan"},
    },
}
EDGES = ([1, 2, 3, 0], [2, 1, 0, 1], [0, 0, 1, 2])  # heads, tails, types
QA = pd.DataFrame(
    {
        "id": [0, 1, 2],
        "query": [
            "Which genes interact with IL13?",
            "Which drug is used off-label for asthma?",
            "Genes tied to asthma?",
        ],
        "answer_ids": ["[2]", "[3]", "[1]"],
    }
)


def test_names_become_cypher_safe_labels_and_relation_types():
    assert (
        label_of("gene/protein") == "GeneProtein"
        and label_of("effect/phenotype") == "EffectPhenotype"
        and label_of("paper") == "Paper"
    )
    assert rel_of("off-label use") == "OFF_LABEL_USE" and rel_of("author___writes___paper") == "AUTHOR_WRITES_PAPER"


def test_conversion_keeps_ids_direction_and_lifts_details(tmp_path):
    counts = write_kb(tmp_path, NODE_INFO, TYPES_OF_NODES, NODE_TYPES, EDGES[:2], EDGES[2], EDGE_TYPES)
    assert counts["nodes"] == 4 and counts["edges_by_type"] == {"PPI": 2, "OFF_LABEL_USE": 1, "ASSOCIATED_WITH": 1}
    nodes, edges = load_kb(tmp_path, ErrorPolicy("raise"))
    asthma = next(n for n in nodes if n.id == "0")
    assert (
        asthma.type == "Disease"
        and asthma.fields["mondo_definition"].startswith("A chronic")
        and asthma.fields["umls"] == ["C0004096"]
    )
    assert (
        asthma.fields["stark_type"] == "disease" and "half_life" not in next(n for n in nodes if n.id == "3").fields
    )  # 'nan' dropped
    stored = zip(edges["src"].to_pylist(), edges["dst"].to_pylist(), edges["type"].to_pylist())
    assert ("3", "0", "OFF_LABEL_USE") in set(stored)  # drug -> disease, as stored
    fake_qa = SimpleNamespace(data=QA, indices=[0, 1, 2], split_indices={"train": [0], "val": [], "test": [1, 2]})
    write_questions(tmp_path, qa_rows(fake_qa))
    qs = load_questions(tmp_path / "questions-test.jsonl")
    assert [(q.id, q.gold_sources) for q in qs] == [("1", ["3"]), ("2", ["1"])]
    bad = SimpleNamespace(
        data=pd.DataFrame({"id": [0], "query": ["q"], "answer_ids": ["__import__('os')"]}),
        indices=[0],
        split_indices={"test": [0]},
    )
    with pytest.raises(ConfigError, match="not a list of node ids"):
        write_questions(tmp_path, qa_rows(bad))


def test_a_tiny_skb_in_starks_own_format_loads_with_stark_qa_and_converts(tmp_path, monkeypatch):
    stark_qa = pytest.importorskip("stark_qa", reason="the optional extra `stark` (stark-qa) is not installed")
    root = tmp_path / "raw"
    processed = root / "prime" / "processed"
    processed.mkdir(parents=True)
    for name, value in {"node_info": NODE_INFO, "node_type_dict": NODE_TYPES, "edge_type_dict": EDGE_TYPES}.items():
        (processed / f"{name}.pkl").write_bytes(pickle.dumps(value))
    torch.save(torch.LongTensor(TYPES_OF_NODES), processed / "node_types.pt")
    torch.save(torch.LongTensor([EDGES[0], EDGES[1]]), processed / "edge_index.pt")
    torch.save(torch.LongTensor(EDGES[2]), processed / "edge_types.pt")
    qa_dir = root / "qa" / "prime"
    (qa_dir / "stark_qa").mkdir(parents=True)
    (qa_dir / "split").mkdir()
    QA.to_csv(qa_dir / "stark_qa" / "stark_qa.csv", index=False)
    QA.iloc[:1].to_csv(qa_dir / "stark_qa" / "stark_qa_human_generated_eval.csv", index=False)
    for split, ids in {"train": [0], "val": [1], "test": [2], "test-0.1": [2]}.items():
        (qa_dir / "split" / f"{split}.index").write_text("\n".join(map(str, ids)))
    import stark_qa.retrieval.dataset as ds

    monkeypatch.setattr(
        ds, "download_hf_folder", lambda repo, folder, repo_type, save_as_folder: str(qa_dir)
    )  # no hub here
    skb = stark_qa.load_skb("prime", root=str(root), download_processed=False, indirected=False)
    qa = stark_qa.load_qa("prime", root=str(root))
    human = stark_qa.load_qa("prime", root=str(root), human_generated_eval=True)
    counts = convert(skb, qa, human, tmp_path / "kb")
    assert (
        counts["nodes"] == 4
        and counts["edges"] == 4
        and counts["questions"] == {"train": 1, "val": 1, "test": 1, "human": 1}
    )
    nodes, _ = load_kb(tmp_path / "kb", ErrorPolicy("raise"))
    assert {n.id: n.type for n in nodes} == {"0": "Disease", "1": "GeneProtein", "2": "GeneProtein", "3": "Drug"}
    assert json.loads((tmp_path / "kb" / "questions-human.jsonl").read_text())["id"] == "human-0"
