"""The end-to-end half of tests/unit/test_changes.py: servers, subprocesses or whole builds."""

from __future__ import annotations

import json
import shutil

import pytest

from sagegraph.construct.stages import up_to_date
from sagegraph.errors import InputError
from tests.fixtures import run_all
from tests.unit.test_changes import _cfg, _docs, _graph, _same_graph, _write


def test_a_rebuild_follows_added_edited_and_removed_sources(tmp_path):
    docs = tmp_path / "docs.jsonl"
    _write(docs, _docs(8))
    cfg = _cfg(tmp_path, docs, tmp_path / "out")
    first = run_all(cfg)
    assert first["changes"].first_build and first["cfg"].corpus_version == ""
    n8 = len(_graph(tmp_path / "out")[0])

    # appended: the new documents reach the graph, which equals a build from nothing
    _write(docs, _docs(12))
    grown = run_all(cfg)
    assert grown["changes"].added == {"documents": ["d10", "d11", "d8", "d9"]} and not grown["changes"].changed
    assert grown["cfg"].corpus_version != "" and grown["ingest"]["counts"]["documents"] == 12
    assert any(c["resumed"] for c in grown["chunks"])  # the first 8 documents' batches, found again
    assert len(_graph(tmp_path / "out")[0]) > n8
    fresh_docs = tmp_path / "fresh.jsonl"
    shutil.copy(docs, fresh_docs)
    run_all(_cfg(tmp_path, fresh_docs, tmp_path / "fresh"))
    _same_graph(tmp_path / "out", tmp_path / "fresh")
    changes = (
        json.loads((tmp_path / "out" / "stats" / "changes.json").read_text())
        if (tmp_path / "out" / "stats" / "changes.json").exists()
        else None
    )
    assert changes is None  # written by the flow (test_cli_flow); run_all composes the stages only

    # edited and removed
    edited = _docs(12)
    edited[3]["text"] += " It was renamed in 1990."
    _write(docs, edited[:11])
    again = run_all(cfg)
    assert again["changes"].changed == {"documents": ["d3"]} and again["changes"].removed == {"documents": ["d11"]}
    assert not again["changes"].added
    # batches are named by their sources' contents: only those holding d3 or d11 (or the next) are redone
    redone = [c for c in again["chunks"] if not c["resumed"]]
    assert (
        1 <= len(redone) <= 4
        and len(redone) < len(again["chunks"])
        and sum(not v["resumed"] for v in again["vecs"]) == len(redone)
    )

    # back to the first corpus: its finished stages are found again, nothing is redone
    _write(docs, _docs(8))
    back = run_all(cfg)
    assert back["cfg"].corpus_version == "" and back["ingest"]["resumed"] and all(c["resumed"] for c in back["chunks"])
    assert back["changes"].removed and len(_graph(tmp_path / "out")[0]) == n8

    # unchanged: everything reused, and the CLI and the flow need not start (up_to_date)
    same = run_all(cfg)
    assert same["changes"].empty and all(c["resumed"] for c in same["chunks"] + same["vecs"])
    done = up_to_date(same["cfg"])
    assert done is not None and done["up_to_date"] and done["counts"]["nodes"] == n8
    assert (
        up_to_date(same["cfg"].model_copy(update={"corpus_version": "elsewhere"})) is None
    )  # another corpus state: not this graph
    (tmp_path / "out" / "stats" / "graph_stats.json").unlink()
    assert up_to_date(same["cfg"]) is None  # something to redo: the build runs (and resumes the rest)


def test_a_build_made_before_change_sets_keeps_its_stages(tmp_path):
    """An ingest written without fingerprints.json is read from its batch files: the same corpus
    keeps the same stage directories (and so its graph, run keys and store)."""
    docs = tmp_path / "docs.jsonl"
    _write(docs, _docs(6))
    cfg = _cfg(tmp_path, docs, tmp_path / "out")
    run_all(cfg)
    for fp in (tmp_path / "out" / "stages").glob("sources-*/fingerprints.json"):
        fp.unlink()
    manifest = tmp_path / "out" / "graph" / "manifest.json"
    m = json.loads(manifest.read_text())
    del m["sources"], m["config"]["corpus_version"]  # as a build of the version before wrote it
    manifest.write_text(json.dumps(m))
    again = run_all(cfg)
    assert again["cfg"].corpus_version == "" and again["changes"].empty and again["ingest"]["resumed"]


def test_an_unreadable_corpus_changes_nothing(tmp_path):
    docs = tmp_path / "docs.jsonl"
    _write(docs, _docs(6))
    cfg = _cfg(tmp_path, docs, tmp_path / "out")
    run_all(cfg)
    before = (tmp_path / "out" / "graph" / "manifest.json").read_text()
    with docs.open("a", encoding="utf-8") as f:
        f.write('{"id": "d9", "title": "Broken"\n')
    with pytest.raises(InputError, match=r"docs\.jsonl:7: malformed JSON"):
        run_all(cfg)
    assert (tmp_path / "out" / "graph" / "manifest.json").read_text() == before


def _kb(root, renamed=()):
    root.mkdir(parents=True, exist_ok=True)
    nodes = [
        {
            "id": f"n{i}",
            "type": "Place" if i % 3 else "Person",
            "fields": {"name": f"Node {i}" + (" (renamed)" if i in renamed else ""), "note": f"note {i % 7}"},
        }
        for i in range(80)
    ]
    edges = [{"src": f"n{i}", "dst": f"n{(i * 7 + 3) % 80}", "type": "NEAR"} for i in range(80)]
    (root / "nodes.jsonl").write_text("".join(json.dumps(n) + "\n" for n in nodes), encoding="utf-8")
    (root / "edges.jsonl").write_text("".join(json.dumps(e) + "\n" for e in edges), encoding="utf-8")
    return root


def test_a_changed_batch_takes_its_unchanged_rows_from_the_build_before(tmp_path):
    """1 object renamed in a batch of ~10: the batch's other rows are the previous build's, not made
    again, and the rebuilt graph is the one a build from nothing gives, row for row and bit for bit."""
    import numpy as np
    import pyarrow.parquet as pq

    from sagegraph.config import load_config
    from tests.fixtures import write_config

    def kb_cfg(data, out):
        corpus = {"kind": "kb", "path": str(data)}
        return load_config(write_config(tmp_path / f"{out.name}.yaml", corpus, out, store={"backend": "none"}))

    data = _kb(tmp_path / "kb")
    cfg = kb_cfg(data, tmp_path / "out")
    run_all(cfg)
    _kb(data, renamed={5, 41})
    again = run_all(cfg)
    assert again["changes"].changed == {"kb_nodes": ["n41", "n5"]}
    redone = [m for m in again["metas"] if not m["resumed"]]
    assert redone and all(m["reused"] == m["nodes"] - 1 for m in redone)  # each holds one renamed object
    assert all(v["reused"] == v["nodes"] - 1 for v in again["vecs"] if not v["resumed"])

    fresh_out = tmp_path / "fresh"
    fresh_out.mkdir()
    shutil.copytree(cfg.out / "cache", fresh_out / "cache")  # the same vectors for the same texts
    run_all(kb_cfg(data, fresh_out))
    for name in ("nodes.parquet", "edges.parquet"):
        assert pq.read_table(cfg.out / "graph" / name).equals(pq.read_table(fresh_out / "graph" / name))
    for field in ("content", "topic", "title", "columns"):
        ours, theirs = (np.load(out / "graph" / "vectors" / f"{field}.npy") for out in (cfg.out, fresh_out))
        assert np.array_equal(ours, theirs)


def test_a_rebuild_keeps_only_the_stage_files_a_kept_generation_or_a_later_build_reads(tmp_path):
    """Three builds of a changing KB: after each, `stages/` holds the stage folders of the published
    generation and the one kept for a rollback (and the first ingest), and exactly the batch files
    their ingests list; the folder stops growing, and a rebuild still takes its unchanged rows
    from the build before. A rollback, then a rebuild, keeps both generations' files."""
    from sagegraph.config import load_config
    from sagegraph.construct import generations
    from sagegraph.construct.artifacts import Layout
    from sagegraph.construct.retention import BATCH_STAGES, ingest_batches
    from sagegraph.construct.stages import rollback_graph
    from tests.fixtures import write_config

    data = _kb(tmp_path / "kb")
    cfg = load_config(
        write_config(
            tmp_path / "c.yaml", {"kind": "kb", "path": str(data)}, tmp_path / "out", store={"backend": "none"}
        )
    )
    stages_dir = cfg.out / "stages"

    def assert_only_kept(builds):
        rec = generations.record(cfg.out)
        layouts = [
            Layout.of(b["cfg"])
            for b in builds
            if Layout.of(b["cfg"]).graph.name in (rec["current"], rec.get("previous"))
        ]
        assert {layout.graph.name for layout in layouts} == {rec["current"], rec.get("previous")} - {None}
        expected = {
            layout.stage_path(stage).name
            for layout in layouts
            for stage in ("sources", "chunks", "metadata", "vectors", "edges")
        }
        expected.add(
            Layout.of(builds[0]["cfg"]).stage_path("sources").name
        )  # the first ingest names the first corpus state
        assert {p.name for p in stages_dir.iterdir() if not p.name.startswith(".")} == expected | {"notes.txt"}
        listed = set().union(*(ingest_batches(layout.stage_path("sources")) for layout in layouts))
        for stage in BATCH_STAGES:
            stems = {
                p.name.split(".", 1)[0] for p in layouts[0].stage_path(stage).iterdir() if not p.name.startswith(".")
            }
            assert stems == listed, stage

    first = run_all(cfg)
    (stages_dir / "notes.txt").write_text("not a stage's", encoding="utf-8")  # a name no stage has: left alone
    builds = [first]
    for round_, renamed in enumerate(({5, 41}, {12, 60}, {33}), start=1):
        _kb(data, renamed=renamed)
        (stages_dir / ".retired-sources-0a").mkdir(exist_ok=True)  # what a clean-up killed midway leaves
        builds.append(run_all(cfg))
        assert not (stages_dir / ".retired-sources-0a").exists()
        deleted = builds[-1]["published"].get("stage_files_deleted")  # what the CLI prints
        assert (deleted is not None and deleted["files"] > 0) == (round_ > 1), (round_, deleted)
        assert any(m["reused"] for m in builds[-1]["metas"] if not m["resumed"]), round_
        assert_only_kept(builds)
    sizes_after_three = sum(p.stat().st_size for p in stages_dir.rglob("*") if p.is_file())

    rollback_graph(cfg)  # the third published again; the fourth kept for a rollback
    _kb(data, renamed={7})
    builds.append(run_all(cfg))
    assert_only_kept(builds)
    assert sum(p.stat().st_size for p in stages_dir.rglob("*") if p.is_file()) < 1.5 * sizes_after_three


def test_a_changed_config_keeps_the_stage_folders_of_the_generation_kept_for_a_rollback(tmp_path):
    """Other edge settings name other stage folders: after the rebuild both generations' folders
    stay, a rollback publishes the first again, and a build of the first config after it finds
    its work done (nothing made again)."""
    from sagegraph.config import load_config
    from sagegraph.construct.artifacts import Layout
    from sagegraph.construct.stages import rollback_graph
    from tests.fixtures import write_config

    data = _kb(tmp_path / "kb")

    def kb_cfg(top_m):
        corpus = {"kind": "kb", "path": str(data)}
        path = write_config(
            tmp_path / "c.yaml", corpus, tmp_path / "out", store={"backend": "none"}, edges={"top_m": top_m}
        )
        return load_config(path)

    first = run_all(kb_cfg(5))
    second = run_all(kb_cfg(3))
    folders = {p.name for p in (tmp_path / "out" / "stages").iterdir()}
    for build in (first, second):
        assert Layout.of(build["cfg"]).stage_path("edges").name in folders
    rollback_graph(kb_cfg(3))
    again = run_all(kb_cfg(5))
    assert all(b["resumed"] for stage in ("chunks", "metas", "vecs") for b in again[stage])
    assert Layout.of(again["cfg"]).graph == Layout.of(first["cfg"]).graph


def test_an_in_process_rebuild_encodes_once_and_leaves_unchanged_relations_unread(tmp_path, monkeypatch):
    """Objects renamed in several batches: the rebuild in process encodes their texts in one call,
    and its store difference skips the KB relations both generations hold alike (the rows after
    the similarity edges), yet the store then holds exactly the new graph, as the graph equals a
    build from nothing. A relation added is compared, and written, again."""
    import pyarrow.parquet as pq

    from sagegraph.config import load_config
    from sagegraph.construct import generations, stages
    from sagegraph.construct.inprocess import build_in_process
    from sagegraph.embed import CachedEncoder, EncoderProcess
    from sagegraph.ownership import mark
    from tests.fixtures import write_config
    from tests.unit.test_generations import _assert_store_holds

    def kb_cfg(out):
        return load_config(write_config(tmp_path / f"{out.name}.yaml", {"kind": "kb", "path": str(data)}, out))

    data = _kb(tmp_path / "kb")
    cfg = kb_cfg(tmp_path / "out")
    build_in_process(cfg)
    _kb(data, renamed={5})
    build_in_process(cfg)
    calls: list[int] = []
    encode = EncoderProcess.encode  # a build in this process encodes in its encoder process

    def counted(self, texts):
        calls.append(len(texts))
        return encode(self, texts)

    monkeypatch.setattr(EncoderProcess, "encode", counted)
    asked: list[int] = []
    ask = CachedEncoder.encode  # and the embedding cache: once, the batches take that call's vectors

    def counted_asks(self, texts):
        asked.append(len(texts))
        return ask(self, texts)

    monkeypatch.setattr(CachedEncoder, "encode", counted_asks)
    _kb(data, renamed={5, 41, 77})  # three batches of ~10 objects each
    before = generations.published(cfg.out)
    third = build_in_process(cfg)
    monkeypatch.undo()
    now = generations.published(cfg.out)
    assert len(calls) == 1 and calls[0] >= 3, calls  # n41's and n77's texts (n5's again), one call
    assert len(asked) == 1, asked
    same = stages._same_relations(before, now)
    relations = pq.read_metadata(now / "edges.parquet").num_rows - same[1] if same else 0
    assert same is not None and relations == 80  # the 80 NEAR relations, left out of the difference
    assert third["store"]["mode"] == "difference"
    _assert_store_holds("falkordb", cfg.out / "store", third["store"]["graph"], None, now)

    fresh = tmp_path / "fresh"
    fresh.mkdir()
    mark(fresh)  # made here, as sagegraph's own: the copied cache is then its own too
    shutil.copytree(cfg.out / "cache", fresh / "cache")
    build_in_process(kb_cfg(fresh))
    for name in ("nodes.parquet", "edges.parquet"):
        assert pq.read_table(now / name).equals(pq.read_table(fresh / "graph" / name))

    with (data / "edges.jsonl").open("a", encoding="utf-8") as out:
        out.write(json.dumps({"src": "n1", "dst": "n2", "type": "NEAR"}) + "\n")
    fourth = build_in_process(cfg)
    assert stages._same_relations(now, generations.published(cfg.out)) is None
    assert fourth["store"]["mode"] == "difference" and fourth["store"]["difference"]["edges_added"] >= 1
    _assert_store_holds("falkordb", cfg.out / "store", fourth["store"]["graph"], None, generations.published(cfg.out))


def test_an_unchanged_relations_file_is_taken_from_the_last_ingest_and_a_changed_one_is_read(tmp_path, monkeypatch):
    """Objects renamed, the relations file untouched: the rebuild takes the last ingest's relations
    (no parse, the same Parquet file under a second name) and builds the graph a build from
    nothing gives. The file rewritten, at another length or at the same length, is read again."""
    import os

    import pyarrow.parquet as pq

    from sagegraph.config import load_config
    from sagegraph.construct.inprocess import build_in_process
    from sagegraph.corpus import kb_edges
    from sagegraph.ownership import mark
    from tests.fixtures import write_config

    def kb_cfg(out):
        corpus = {"kind": "kb", "path": str(data)}
        return load_config(write_config(tmp_path / f"{out.name}.yaml", corpus, out, store={"backend": "none"}))

    parsed: list[str] = []
    read_json = kb_edges.pa_json.read_json

    def counted(path, **kwargs):
        parsed.append(str(path))
        return read_json(path, **kwargs)

    monkeypatch.setattr(kb_edges.pa_json, "read_json", counted)
    data = _kb(tmp_path / "kb")
    cfg = kb_cfg(tmp_path / "out")

    def relations_parquet():
        manifest = json.loads((cfg.out / "graph" / "manifest.json").read_text())
        return cfg.out / "stages" / manifest["sources"] / "kb_edges.parquet"

    build_in_process(cfg)
    assert len(parsed) == 1
    before = relations_parquet()
    _kb(data, renamed={5, 41})
    edges_text = (data / "edges.jsonl").read_text(encoding="utf-8")
    build_in_process(cfg)
    assert len(parsed) == 1  # taken from the first ingest, not parsed
    after = relations_parquet()
    assert after != before and os.stat(after).st_ino == os.stat(before).st_ino

    fresh = tmp_path / "fresh"
    fresh.mkdir()
    mark(fresh)
    shutil.copytree(cfg.out / "cache", fresh / "cache")
    build_in_process(kb_cfg(fresh))
    for name in ("nodes.parquet", "edges.parquet"):
        assert pq.read_table(cfg.out / "graph" / name).equals(pq.read_table(fresh / "graph" / name))

    (data / "edges.jsonl").write_text(edges_text.replace('"NEAR"', '"NEXT"', 1), encoding="utf-8")  # same length
    build_in_process(cfg)
    assert len(parsed) == 3  # this build's, and the fresh one's above
    assert "NEXT" in pq.read_table(cfg.out / "graph" / "edges.parquet")["type"].to_pylist()

    # a node the unchanged relations name is gone: the table taken is checked as a reading is
    nodes = (data / "nodes.jsonl").read_text(encoding="utf-8").splitlines()
    (data / "nodes.jsonl").write_text("\n".join(n for n in nodes if '"id": "n2"' not in n) + "\n", encoding="utf-8")
    with pytest.raises(InputError, match=r"edges\.jsonl:\d+: field '(src|dst)': names unknown node 'n2'"):
        build_in_process(cfg)


def test_an_in_process_rebuild_of_edited_documents_equals_a_build_from_nothing(tmp_path):
    """Documents edited and added, rebuilt in process (the redone batches' field texts encoded in
    one call): the graph is the one a build from nothing gives from the same embedding cache."""
    import pyarrow.parquet as pq

    from sagegraph.construct.inprocess import build_in_process
    from sagegraph.ownership import mark

    docs = tmp_path / "docs.jsonl"
    _write(docs, _docs(12))
    cfg = _cfg(tmp_path, docs, tmp_path / "out")
    build_in_process(cfg)
    edited = _docs(14)
    edited[3]["text"] += " It was renamed in 1990."
    edited[9]["title"] = "Entry nine, renamed"
    _write(docs, edited)
    again = build_in_process(cfg)
    assert again["work"]["encoded"] > 0
    fresh = tmp_path / "fresh"
    fresh.mkdir()
    mark(fresh)
    shutil.copytree(cfg.out / "cache", fresh / "cache")
    build_in_process(_cfg(tmp_path, docs, fresh))
    for name in ("nodes.parquet", "edges.parquet"):
        assert pq.read_table(cfg.out / "graph" / name).equals(pq.read_table(fresh / "graph" / name))


def test_a_build_of_the_first_sources_only_never_stands_for_the_whole_relations_file(tmp_path):
    """A build cut to the first sources (`max_sources`) ingests only the relations between them:
    the whole file built next into the same folder is read again, all its relations kept."""
    import pyarrow.parquet as pq

    from sagegraph.config import load_config
    from sagegraph.construct.inprocess import build_in_process
    from tests.fixtures import write_config

    data = _kb(tmp_path / "kb")
    corpus = {"kind": "kb", "path": str(data)}
    cfg = load_config(write_config(tmp_path / "c.yaml", corpus, tmp_path / "out", store={"backend": "none"}))
    build_in_process(cfg.model_copy(update={"max_sources": 40}))
    cut = pq.read_table(cfg.out / "graph" / "edges.parquet")["type"].to_pylist().count("NEAR")
    build_in_process(cfg)
    assert cut < 80 and pq.read_table(cfg.out / "graph" / "edges.parquet")["type"].to_pylist().count("NEAR") == 80


def test_a_rebuild_with_nothing_to_encode_stops_the_encoder_started_for_it(tmp_path):
    """`sagegraph build` starts the encoder's process before it knows the change (a rebuild's model
    loads while the corpus is compared); a change with no text to encode (a relation added) ends
    it, rather than leaving a process that imports torch beside the build's own work."""
    from sagegraph.config import load_config
    from sagegraph.construct import stages
    from sagegraph.construct.inprocess import build_in_process
    from tests.fixtures import write_config

    data = _kb(tmp_path / "kb")
    cfg = load_config(write_config(tmp_path / "kb.yaml", {"kind": "kb", "path": str(data)}, tmp_path / "out"))
    build_in_process(cfg)
    with (data / "edges.jsonl").open("a", encoding="utf-8") as f:
        f.write(json.dumps({"src": "n1", "dst": "n2", "type": "FAR"}) + "\n")
    stages.start_encoder(cfg)
    assert stages._CHILDREN
    report = build_in_process(cfg)
    assert not stages._CHILDREN
    assert report["counts"]["edges_by_type"].get("FAR") == 1
