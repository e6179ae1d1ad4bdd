"""A rebuild follows the corpus: sources added, edited and removed reach the graph (the same graph a
build from nothing gives), the change set says what changed, an unchanged or restored corpus
reuses what was built, and an unreadable corpus changes nothing."""

import json
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest

from sagegraph.config import load_config
from sagegraph.construct.changes import SHOWN, Fingerprints, diff, digest, record_fingerprints
from sagegraph.corpus import kb_edges
from tests.fixtures import SENTENCE_BANK, write_config


def _docs(n: int, start: int = 0) -> list[dict]:
    topics = list(SENTENCE_BANK)
    out = []
    for i in range(start, start + n):
        bank = SENTENCE_BANK[topics[i % len(topics)]]
        out.append({"id": f"d{i}", "title": f"Entry {i}", "text": " ".join(s.format(e=f"Entry {i}") for s in bank)})
    return out


def _write(path, docs):
    path.write_text("".join(json.dumps(d) + "\n" for d in docs), encoding="utf-8")


def _cfg(tmp_path, docs_path, out):
    return load_config(
        write_config(
            tmp_path / f"{out.name}.yaml",
            {"kind": "generic", "documents": str(docs_path)},
            out,
            store={"backend": "none"},
        )
    )


def _graph(out):
    nodes = pq.read_table(out / "graph" / "nodes.parquet", columns=["id"]).column("id").to_pylist()
    e = pq.read_table(out / "graph" / "edges.parquet").to_pydict()
    edges = {(s, d, t): w for s, d, t, w in zip(e["src"], e["dst"], e["type"], e["weight"])}
    return set(nodes), edges


def _same_graph(a, b):
    (na, ea), (nb, eb) = _graph(a), _graph(b)
    assert na == nb
    assert set(ea) == set(eb)
    assert all(abs(ea[k] - eb[k]) < 1e-5 for k in ea)


def _state(documents: list[dict], relations: list[tuple[str, str, str]] = ()) -> Fingerprints:
    table = kb_edges.from_triples(relations)
    return Fingerprints(record_fingerprints("documents", documents), np.sort(kb_edges.row_hashes(table)), lambda: table)


def test_diff_names_added_changed_and_removed_per_kind():
    old = _state([{"id": "a", "text": "x"}, {"id": "b", "text": "y"}], [("a", "R", "b")])
    new = _state([{"id": "a", "text": "x"}, {"id": "b", "text": "y2"}, {"id": "c", "text": "z"}])
    cs = diff(old, new)
    assert (
        cs.added == {"documents": ["c"]}
        and cs.changed == {"documents": ["b"]}
        and cs.removed == {"kb_edges": ["a-[R]->b"]}
    )
    assert cs.counts()["added"] == {"documents": 1} and not cs.empty and not cs.first_build
    assert "+1 added, ~1 changed, -1 removed" in cs.line()
    assert "| documents | 1 | 1 | 0 |" in cs.markdown({"ingest": 0.1}) and "| ingest | 0.10 |" in cs.markdown(
        {"ingest": 0.1}
    )
    assert diff(new, _state([{"id": "c", "text": "z"}, {"id": "a", "text": "x"}, {"id": "b", "text": "y2"}])).empty
    assert diff(None, new).first_build
    assert (
        digest(new)
        == digest(
            _state(list(reversed([{"id": "a", "text": "x"}, {"id": "b", "text": "y2"}, {"id": "c", "text": "z"}])))
        )
        != digest(old)
    )
    # a repeated relation is a second relation, so removing one of two is seen, counted and named
    twice, once = _state([], [("a", "R", "b")] * 2), _state([], [("a", "R", "b")])
    removed = diff(twice, once)
    assert removed.counts()["removed"] == {"kb_edges": 1} and removed.removed == {"kb_edges": ["a-[R]->b"]}
    assert diff(once, twice).relations_added == 1 and digest(once) != digest(twice)
    # relations are counted whole and named only up to SHOWN
    many = _state([], [(f"n{i}", "R", f"m{i}") for i in range(50)])
    grown = diff(once, many)
    assert grown.relations_added == 50 and grown.relations_removed == 1 and len(grown.added["kb_edges"]) == SHOWN


def test_relation_hashes_are_the_same_in_another_process():
    import subprocess
    import sys

    code = (
        "from sagegraph.corpus import kb_edges; "
        "print(kb_edges.row_hashes(kb_edges.from_triples([('a', 'R', 'b'), ('b', 'S', 'c')])).tolist())"
    )
    runs = {
        subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout for _ in "ab"
    }
    here = kb_edges.row_hashes(kb_edges.from_triples([("a", "R", "b"), ("b", "S", "c")])).tolist()
    assert runs == {f"{here}\n"}


def test_a_change_fans_out_only_when_it_fills_more_than_a_batch_per_worker():
    """A first build, a named Dask scheduler, or more sources to redo than one batch per worker run
    the flow; a smaller change (relations and removals cost no text work) runs in process."""
    from sagegraph.config import RunnerConfig
    from sagegraph.construct.changes import ChangeSet
    from sagegraph.flows.runtime import fans_out

    runner = RunnerConfig(n_workers=2, batch_size=3)
    small = ChangeSet(
        added={"documents": ["a", "b"], "kb_edges": ["x"] * 50},
        changed={"kb_nodes": ["c", "d"]},
        removed={"documents": ["e"] * 40},
    )
    assert small.sources_to_redo() == 4
    assert not fans_out(small, runner)
    assert fans_out(ChangeSet(changed={"documents": list("abcdefg")}), runner)  # 7 > 2 x 3
    assert fans_out(ChangeSet(added={"documents": ["a"]}, first_build=True), runner)
    assert fans_out(None, runner)
    assert fans_out(small, RunnerConfig(dask_address="tcp://127.0.0.1:8786"))


@pytest.mark.parametrize("seed", range(4))
def test_multiset_difference_takes_out_one_per_occurrence(seed):
    from collections import Counter

    from sagegraph.construct.changes import multiset_difference

    rng = np.random.default_rng(seed)
    a = np.sort(rng.integers(0, 30, int(rng.integers(0, 60))).astype(np.uint64))
    b = np.sort(rng.integers(0, 30, int(rng.integers(0, 60))).astype(np.uint64))
    for left, right in ((a, b), (b, a), (a, a), (a, a[:0]), (a[:0], b)):
        expected = sorted((Counter(left.tolist()) - Counter(right.tolist())).elements())
        assert multiset_difference(left, right).tolist() == expected


def test_relation_hashes_are_the_hashes_of_their_values():
    """Hashed through categoricals, a relation's hash is still the hash of its three strings: the
    fingerprints an ingest wrote before stay comparable."""
    import pandas as pd

    triples = [("a", "R", "b"), ("b", "S", "c"), ("a", "R", "b"), ("ünï", "R", "c")]
    plain = pd.DataFrame([{"src": s, "type": t, "dst": d} for s, t, d in triples], dtype=object)
    expected = pd.util.hash_pandas_object(plain, index=False, categorize=False).to_numpy(np.uint64)
    assert kb_edges.row_hashes(kb_edges.from_triples(triples)).tolist() == expected.tolist()


def test_a_relations_file_whose_status_is_the_recorded_one_is_not_hashed_again(tmp_path, monkeypatch):
    """The recorded digest stands for a file with the same size, inode and times that had settled
    before it was hashed; a rewrite of the same length, or a file hashed in the tick it was
    written, is hashed again."""
    import os

    from sagegraph.construct import relations_file

    path, sources = tmp_path / "edges.jsonl", tmp_path / "sources"
    sources.mkdir()
    path.write_text('{"src": "a", "dst": "b", "type": "R"}\n', encoding="utf-8")
    hashed: list[Path] = []
    digest_bytes = relations_file.file_digest
    monkeypatch.setattr(relations_file, "file_digest", lambda p: hashed.append(p) or digest_bytes(p))

    first = relations_file.digest_of(path, sources)
    relations_file.record(sources, first)
    assert relations_file.digest_of(path, sources).digest == first.digest and len(hashed) == 2  # written just now

    monkeypatch.setattr(relations_file, "SETTLED_NS", 0)  # as if the file had settled long before
    assert relations_file.digest_of(path, sources) == first and len(hashed) == 2

    path.write_text('{"src": "a", "dst": "c", "type": "R"}\n', encoding="utf-8")  # same length, other bytes
    os.utime(path, ns=(first.status.modified_ns, first.status.modified_ns))  # the old modification time
    again = relations_file.digest_of(path, sources)
    assert len(hashed) == 3 and again.digest != first.digest
