"""The end-to-end half of tests/unit/test_store_diff.py: servers, subprocesses or whole builds."""

from __future__ import annotations

from sagegraph.store import open_store
from tests.unit.test_store_diff import (
    _diff,
    _dump,
    _embeddings,
    _load,
    _new,
    _old,
    backend,  # noqa: F401 (a fixture)
)


def test_difference_applied_equals_a_full_load(backend, tmp_path):
    name, url = backend
    old, new = _old(), _new()
    with open_store(name, tmp_path / "store", graph="diff-old", url=url) as base:
        base.clear()
        _load(base, old)
        before = _dump(base)
        with open_store(name, tmp_path / "store", graph="diff-new", url=url) as store:
            if name == "neo4j":
                target = base  # one graph per database: the difference is applied in place, in one transaction
            else:
                store.copy_graph("diff-old")
                target = store
            target.apply_diff(_diff(old, new), new[0], new[1], batch_size=2)
            got, got_vec = _dump(target), _embeddings(target)
            if name != "neo4j":
                assert _dump(base) == before  # the published graph's readers saw nothing
            target.clear()
            _load(target, new)
            assert got == _dump(target)
            assert got_vec == _embeddings(target)
            assert target.count_nodes() == 5 and target.count_edges() == 5
            for g in ("diff-new",) if name != "neo4j" else ():
                base.drop_graph(g)
        base.clear()
