"""Which stage files a published build deletes (`construct.retention`), on folders made by hand."""

from __future__ import annotations

import json

from sagegraph.construct.retention import Kept, prune, unreferenced, variant_folders


def _stages(root):
    stages = root / "stages"
    for name in ("sources-aa", "sources-bb", "edges-aa", "edges-cc", "chunks-11", "vectors-22"):
        (stages / name).mkdir(parents=True)
    (stages / "sources-aa" / "manifest.json").write_text(json.dumps({"batches": ["/x/src-1.json"]}))
    for stem in ("src-1", "src-2"):
        (stages / "chunks-11" / f"{stem}.parquet").write_text("rows")
        (stages / "vectors-22" / f"{stem}.npz").write_text("vectors")
    (stages / "chunks-11" / ".src-2.parquet.77-1.tmp").write_text("a writer's temporary")
    (stages / "my-notes").mkdir()  # not a stage's name
    (stages / "edges-dd").symlink_to(stages / "edges-cc")
    return stages


def test_what_no_kept_generation_reads_goes_and_nothing_else(tmp_path):
    stages = _stages(tmp_path)
    kept = Kept(frozenset({"sources-aa", "edges-aa", "chunks-11", "vectors-22"}), frozenset({"src-1"}))
    folders, files = unreferenced(stages, kept)
    assert [f.name for f in folders] == ["edges-cc", "sources-bb"]
    assert sorted(f.name for f in files) == ["src-2.npz", "src-2.parquet"]

    (stages / ".retired-edges-ee").mkdir()  # left by a clean-up killed midway
    pruned = prune(stages, kept)
    assert pruned.as_dict()["folders"] == 2 and pruned.files == 2
    assert sorted(p.name for p in stages.iterdir()) == [
        "chunks-11",
        "edges-aa",
        "edges-dd",
        "my-notes",
        "sources-aa",
        "vectors-22",
    ]
    assert (stages / "chunks-11" / ".src-2.parquet.77-1.tmp").exists()
    assert (stages / "chunks-11" / "src-1.parquet").exists() and not (stages / "chunks-11" / "src-2.parquet").exists()


def test_an_edge_variant_keeps_its_edges_and_its_ingest(tmp_path):
    variant = tmp_path / "variants" / "edges-cc" / "graph"
    variant.mkdir(parents=True)
    (variant / "manifest.json").write_text(json.dumps({"sources": "sources-bb"}))
    (tmp_path / "variants" / "edges-ff").mkdir()  # being built: no manifest yet
    assert variant_folders(tmp_path) == {"edges-cc", "sources-bb", "edges-ff"}


def test_a_rollback_generation_not_traced_to_its_stages_keeps_everything(tmp_path):
    from sagegraph.config import load_config
    from sagegraph.construct.stages import kept_stage_files, prune_stage_files
    from tests.fixtures import write_config

    cfg = load_config(write_config(tmp_path / "c.yaml", {"kind": "kb", "path": str(tmp_path)}, tmp_path / "out"))
    stages = _stages(cfg.out)
    graphs = cfg.out / "graphs"
    (graphs / "0123456789abcdef").mkdir(parents=True)
    (graphs / "0123456789abcdef" / "manifest.json").write_text(json.dumps({"config": {"unknown": 1}}))
    (graphs / "published.json").write_text(json.dumps({"current": "fedcba9876543210", "previous": "0123456789abcdef"}))
    before = sorted(p.relative_to(stages) for p in stages.rglob("*"))
    assert kept_stage_files(cfg) is None and prune_stage_files(cfg) is None
    assert sorted(p.relative_to(stages) for p in stages.rglob("*")) == before


def test_a_clean_up_that_cannot_finish_leaves_the_publication_standing(tmp_path, monkeypatch, caplog):
    """A file system that refuses a deletion after the graph is published: the build goes on, the
    clean-up says so, and the next publication tries again."""
    from sagegraph.config import load_config
    from sagegraph.construct import retention, stages
    from tests.fixtures import write_config

    cfg = load_config(write_config(tmp_path / "c.yaml", {"kind": "kb", "path": str(tmp_path)}, tmp_path / "out"))
    monkeypatch.setattr(stages, "kept_stage_files", lambda cfg: Kept(frozenset(), frozenset()))

    def refused(stages_dir, kept):
        raise PermissionError(13, "Permission denied", str(stages_dir))

    monkeypatch.setattr(retention, "prune", refused)
    with caplog.at_level("WARNING", logger="sagegraph.construct"):
        assert stages.prune_stage_files(cfg) is None
    assert "stage files not cleaned up" in caplog.text and "Permission denied" in caplog.text
