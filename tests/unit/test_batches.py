"""Source batches cut by content: one inserted, edited or removed source renames at most its own
batch and the next; every other batch keeps its name (and so its finished outputs)."""

import random

from sagegraph.construct.batches import batch_name, content_spans, target_size


def _names(keys, target):
    return [batch_name(keys[a:b]) for a, b in content_spans(keys, target)]


def test_spans_cover_every_source_once_and_respect_the_cap():
    keys = [f"documents:d{i}={i * 7919 % 1000}" for i in range(1000)]
    spans = content_spans(keys, 16)
    assert spans[0][0] == 0 and spans[-1][1] == len(keys) and all(a[1] == b[0] for a, b in zip(spans, spans[1:]))
    assert max(b - a for a, b in spans) <= 32 and 20 < len(spans) < 200  # about 1000 / 16 batches
    assert content_spans([], 8) == [] and content_spans(keys[:3], 1) == [(0, 1), (1, 2), (2, 3)]


def test_an_inserted_edited_or_removed_source_renames_at_most_two_batches():
    rng = random.Random(0)
    keys = [f"documents:d{i}={rng.getrandbits(32):08x}" for i in range(600)]
    before = set(_names(keys, 16))
    for changed in (
        keys[:100] + ["documents:new=1"] + keys[100:],  # inserted near the start
        keys[:300] + [keys[300] + "-edited"] + keys[301:],
        keys[:450] + keys[451:],
        keys + ["documents:appended=2"],
    ):
        after = _names(changed, 16)
        assert len(set(after) - before) <= 2, len(set(after) - before)
    # position batches (every 16) would have renamed every batch after an insertion near the start


def test_the_target_stays_put_while_the_corpus_grows_a_little():
    assert target_size(300, 64) == target_size(310, 64) == 64
    assert target_size(40, 64) == 8 and target_size(1, 64) == 1 and target_size(10_000, 64) == 64


def test_the_workers_change_no_stage_name():
    """`--workers 1` and `--workers 8` build the same batches, so every stage keeps its name (and a
    build with other workers finds the stages done). The default's names are those of every build
    made before (two workers)."""
    from sagegraph.config import BuildConfig, RunnerConfig
    from sagegraph.construct.artifacts import Layout

    names = {n: Layout.of(BuildConfig(runner=RunnerConfig(n_workers=n))).cfg_fp for n in (1, 2, 8)}
    assert names[1] == names[2] == names[8]
    assert Layout.of(BuildConfig(runner=RunnerConfig(batch_size=500))).cfg_fp != names[2]  # the batch size does


def _assembled(tmp_path, batches):
    """`stages.assemble` over hand-made batches: (node, vector row) lists, one vector per field."""
    from pathlib import Path

    import numpy as np

    from sagegraph.config import load_config
    from sagegraph.construct import stages
    from sagegraph.construct.fields import FIELDS
    from sagegraph.model import Node, nodes_to_table, read_nodes, write_parquet
    from tests.fixtures import write_config

    tmp_path.mkdir()
    cfg = load_config(write_config(tmp_path / "c.yaml", {"kind": "kb", "path": str(tmp_path)}, tmp_path / "out"))
    metadata, vectors = [], []
    for at, batch in enumerate(batches):
        nodes = [Node(nid, "entity", "Thing", text, "s-" + nid) for nid, text in batch]
        metadata.append(str(write_parquet(nodes_to_table(nodes), tmp_path / f"m{at}.parquet")))
        rows = np.array([[float(ord(text[0])), 0.0] for _, text in batch], np.float32)
        np.savez(tmp_path / f"v{at}.npz", **{field: rows for field in FIELDS})
        vectors.append(str(tmp_path / f"v{at}.npz"))
    graph = Path(stages.assemble(cfg, metadata, vectors)["path"])
    return [n.id for n in read_nodes(graph / "nodes.parquet")], np.load(graph / "vectors" / "content.npy")


def test_assembled_nodes_keep_their_vectors_whether_or_not_identical_chunks_collapse(tmp_path):
    ids, vectors = _assembled(tmp_path / "apart", [[("a", "alpha"), ("b", "beta")], [("c", "gamma")]])
    assert ids == ["a", "b", "c"] and vectors[:, 0].tolist() == [ord("a"), ord("b"), ord("g")]
    ids, vectors = _assembled(tmp_path / "alike", [[("a", "alpha"), ("b", "beta")], [("a", "alpha"), ("c", "gamma")]])
    assert ids == ["a", "b", "c"] and vectors[:, 0].tolist() == [ord("a"), ord("b"), ord("g")]
    assert vectors.dtype.name == "float32"


def test_a_batch_file_reads_on_this_thread_as_pyarrow_reads_it(tmp_path):
    """`read_batch_table` skips pyarrow's dataset layer and thread pool: the same table, schema
    metadata and a column selection included."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from sagegraph.model import read_batch_table, write_parquet

    table = pa.table({"id": ["b", "a", "c"], "metadata": ['{"x": 1}', "{}", None], "position": [2, 0, 1]})
    path = write_parquet(table.replace_schema_metadata({b"made_by": b"test"}), tmp_path / "batch.parquet")
    assert read_batch_table(path).equals(pq.read_table(path), check_metadata=True)
    assert read_batch_table(path, columns=["position", "id"]).equals(pq.read_table(path, columns=["position", "id"]))
