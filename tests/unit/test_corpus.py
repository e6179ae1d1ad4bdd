import json

import pytest

from sagegraph.config import CorpusConfig
from sagegraph.corpus import load_corpus, load_questions
from sagegraph.corpus.generic import load_generic
from sagegraph.corpus.jsonl import ErrorPolicy
from sagegraph.corpus.kb import load_kb
from sagegraph.corpus.ottqa import load_ottqa
from sagegraph.errors import InputError
from tests.fixtures import make_ottqa


def test_ottqa_loader_reads_tables_passages_questions(ottqa_dir):
    tables, docs = load_ottqa(ottqa_dir, ErrorPolicy())
    assert len(tables) == 4 and len(docs) == 30
    t = tables[0]
    assert t.header == ["Team", "Stadium", "City"] and len(t.rows) == 7
    assert t.cell_links[0][0] == ["/wiki/Riverton_Rovers"]
    assert docs[0].title == "Riverton Rovers"
    qs = load_questions(CorpusConfig(kind="ottqa", path=ottqa_dir))
    assert qs[0].gold_sources == ["List_of_football_0", "/wiki/Riverton_Rovers"]


def test_max_sources_keeps_tables_with_their_linked_passages(ottqa_dir):
    tables, docs = load_ottqa(ottqa_dir, ErrorPolicy(), max_sources=10)
    assert len(tables) == 1 and len(tables) + len(docs) == 10
    linked = {link for row in tables[0].cell_links for cell in row for link in cell}
    assert sum(d.id in linked for d in docs) == 7


def _corrupt(tmp_path, name, mutate):
    root = make_ottqa(tmp_path / "c")
    lines = (root / name).read_bytes().splitlines(keepends=True)
    lines[2] = mutate(lines[2])
    (root / name).write_bytes(b"".join(lines))
    return root


@pytest.mark.parametrize(
    "name,mutate,field,message",
    [
        ("passages.jsonl", lambda b: b[:-5] + b"\n", None, "malformed JSON"),
        ("passages.jsonl", lambda b: json.dumps({"id": "/wiki/X"}).encode() + b"\n", "text", "missing"),
        ("passages.jsonl", lambda b: json.dumps({"id": "/wiki/X", "text": "  "}).encode() + b"\n", "text", "empty"),
        ("passages.jsonl", lambda b: b'{"id": "/wiki/X", "text": "caf\xe9"}\n', None, "not valid UTF-8"),
        (
            "tables.jsonl",
            lambda b: json.dumps({**json.loads(b), "data": [[["a", []]]]}).encode() + b"\n",
            "data[0]",
            "ragged row",
        ),
    ],
)
def test_bad_input_names_file_line_and_field(tmp_path, name, mutate, field, message):
    root = _corrupt(tmp_path, name, mutate)
    with pytest.raises(InputError) as err:
        load_ottqa(root, ErrorPolicy("raise"))
    e = err.value
    assert e.path.endswith(name) and e.line == 3 and e.field == field
    assert message in str(e) and f"{name}:3:" in str(e)


def test_skip_policy_counts_bad_records(tmp_path):
    root = _corrupt(tmp_path, "passages.jsonl", lambda b: json.dumps({"id": "/wiki/X"}).encode() + b"\n")
    corpus = load_corpus(CorpusConfig(kind="ottqa", path=root, on_error="skip"))
    assert corpus.skipped == {"text": 1}
    assert len(corpus.documents) == 29


def test_generic_corpus_csv_and_jsonl(tmp_path):
    docs = tmp_path / "docs.jsonl"
    docs.write_text(json.dumps({"id": "d1", "text": "Alpha is a city."}) + "\n", encoding="utf-8")
    tdir = tmp_path / "tables"
    tdir.mkdir()
    (tdir / "cities.csv").write_text("City,Population\nAlpha,100\nBeta,200\n", encoding="utf-8")
    (tdir / "ragged.csv").write_text("A,B\n1,2\n3\n", encoding="utf-8")
    with pytest.raises(InputError, match=r"ragged.csv:3: field 'row': ragged row"):
        load_generic(docs, tdir, ErrorPolicy("raise"))
    policy = ErrorPolicy("skip")
    tables, documents = load_generic(docs, tdir, policy)
    assert [t.id for t in tables] == ["cities", "ragged"] and tables[0].rows == [["Alpha", "100"], ["Beta", "200"]]
    assert documents[0].title == "d1" and policy.skipped == {"row": 1}


def test_kb_loader_and_unknown_edge_endpoint(kb_dir, tmp_path):
    nodes, edges = load_kb(kb_dir, ErrorPolicy())
    assert len(nodes) == 6 and len(edges) == 6 and nodes[3].name == "Ada Lindqvist"
    bad = tmp_path / "kb"
    bad.mkdir()
    (bad / "nodes.jsonl").write_text((kb_dir / "nodes.jsonl").read_text())
    (bad / "edges.jsonl").write_text(json.dumps({"src": "p1", "dst": "zz", "type": "CITES"}) + "\n")
    with pytest.raises(InputError, match="unknown node 'zz'"):
        load_kb(bad, ErrorPolicy())


def test_check_corpus_names_what_is_missing_before_a_build_starts(tmp_path):
    from sagegraph.corpus.load import check_corpus
    from sagegraph.errors import ConfigError

    root = make_ottqa(tmp_path / "ottqa")
    check_corpus(CorpusConfig(kind="ottqa", path=root))  # all there: silent
    (root / "passages.jsonl").unlink()
    with pytest.raises(
        ConfigError,
        match=r"corpus.path \(ottqa reads tables.jsonl, passages.jsonl there\): .*passages.jsonl does not exist",
    ):
        check_corpus(CorpusConfig(kind="ottqa", path=root))
    with pytest.raises(ConfigError, match=r"corpus.documents: .*nope.jsonl does not exist"):
        check_corpus(CorpusConfig(kind="generic", documents=tmp_path / "nope.jsonl"))
    with pytest.raises(ConfigError, match="corpus.path: not set; corpus.kind 'kb' needs"):
        check_corpus(CorpusConfig(kind="kb"))
    with pytest.raises(ConfigError, match=r"nodes.jsonl does not exist"):
        check_corpus(CorpusConfig(kind="kb", path=tmp_path))


def test_demo_subset_keeps_the_questions_neighbourhoods_whole_and_adds_distractors():
    from sagegraph.corpus.ottqa import subset_around
    from sagegraph.corpus.records import Document, Table

    passages = [Document(f"p{i}", f"P{i}", "text") for i in range(200)]
    tables = [
        Table(
            f"t{i}", f"T{i}", ["a"], [["x"], ["y"]], cell_links=[[[f"p{3 * i}"]], [[f"p{3 * i + 1}", f"p{3 * i + 2}"]]]
        )
        for i in range(60)
    ]
    around = ["t7", "t3", "t7", "nope", "t50"]
    ts, ps = subset_around(tables, passages, around, max_sources=60)
    ids = {t.id for t in ts} | {p.id for p in ps}
    assert {"t7", "t3", "t50", "p21", "p22", "p23", "p9", "p10", "p11", "p150", "p151", "p152"} <= ids
    assert len(ids) == 60 and [t.id for t in ts[:3]] == ["t7", "t3", "t50"]
    assert 4 <= len(ts) <= 8  # distractor tables at about one in ten sources
    assert subset_around(tables, passages, around, max_sources=60) == (ts, ps)  # seeded
    small_t, small_p = subset_around(tables, passages, around, max_sources=8)
    assert [t.id for t in small_t][:1] == ["t7"] and "t50" not in {
        t.id for t in small_t
    }  # whole neighbourhoods only, in question order


def test_relations_read_by_arrow_equal_the_line_by_line_reading_and_anything_odd_goes_line_by_line(tmp_path):
    import json

    import pyarrow as pa

    from sagegraph.corpus import kb_edges
    from sagegraph.corpus.kb import _read_edges_by_line

    nodes = [{"id": f"n{i}", "type": "T", "fields": {"name": f"node {i}"}} for i in range(5)]
    edges = [{"src": f"n{i}", "dst": f"n{(i * 3) % 5}", "type": "R" if i % 2 else "S", "note": i} for i in range(5)]
    edges.append(dict(edges[0]))  # a repeated relation is a second one
    (tmp_path / "nodes.jsonl").write_text("".join(json.dumps(n) + "\n" for n in nodes))
    path = tmp_path / "edges.jsonl"
    path.write_text("".join(json.dumps(e) + "\n" for e in edges))
    known = pa.array([n["id"] for n in nodes])
    fast = kb_edges.read_fast(path, known)
    slow = _read_edges_by_line(path, {n["id"] for n in nodes}, ErrorPolicy())
    assert fast is not None and fast.num_rows == 6 and fast.equals(slow)
    assert load_kb(tmp_path, ErrorPolicy())[1].equals(slow)
    for odd in (
        '{"src": 1, "dst": "n1", "type": "R"}',
        '{"src": "n9", "dst": "n1", "type": "R"}',
        '{"src": "n0"}',
        "[1]",
    ):
        path.write_text(json.dumps(edges[0]) + "\n" + odd + "\n")
        assert kb_edges.read_fast(path, known) is None  # the line-by-line reader then names line 2
        with pytest.raises(InputError, match=r"edges.jsonl:2: "):
            load_kb(tmp_path, ErrorPolicy())


def test_relations_read_back_as_dictionaries_join_their_nodes_as_strings_do(tmp_path):
    """An ingest's relations file read with dictionary columns: the same rows and row hashes as the
    strings, the same positions of each end among the nodes (nulls and ends not among them -1),
    and the same verdict of the ends' check."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.parquet as pq

    from sagegraph.corpus import kb_edges

    table = kb_edges.from_triples([("n1", "R", "n2"), ("n2", "S", "n9"), ("n1", "R", "n1")] * 3)
    path = tmp_path / "kb_edges.parquet"
    pq.write_table(table, path, row_group_size=4)  # several row groups, one dictionary each
    read = kb_edges.read_table(path)
    assert pa.types.is_dictionary(read.schema.field("src").type) and read["src"].num_chunks > 1
    assert read.cast(kb_edges.SCHEMA).equals(table)
    assert np.array_equal(kb_edges.row_hashes(read), kb_edges.row_hashes(table))
    nodes = pa.array(["n2", "n1"])
    for end in ("src", "dst"):
        assert np.array_equal(kb_edges.index_of(read[end], nodes), kb_edges.index_of(table[end], nodes))
    assert kb_edges.index_of(table["dst"], nodes).tolist()[:3] == [0, -1, 1]
    with_null = pa.chunked_array([pa.array(["n1", None, "n7"]).dictionary_encode()])
    assert kb_edges.index_of(with_null, nodes).tolist() == [1, -1, -1]
    assert kb_edges.read_fast(path, nodes, read_before=read) is None  # n9 is no node
    assert kb_edges.read_fast(path, pa.array(["n1", "n2", "n9"]), read_before=read) is read
