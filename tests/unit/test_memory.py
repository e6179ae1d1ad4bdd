"""A stage over the whole graph hands the memory it freed back to the system when it returns."""

import pyarrow as pa
import pytest

from sagegraph import memory


def test_release_unused_hands_freed_arrow_pages_back():
    import psutil

    process = psutil.Process()
    memory.release_unused()
    baseline = process.memory_info().rss
    column = pa.array([f"row {k} " * 30 for k in range(400_000)])  # ~100 MB in Arrow's pool
    del column
    kept = process.memory_info().rss
    if kept - baseline < 50 * 2**20:
        pytest.skip("the allocator returned the pages by itself")
    memory.release_unused()
    assert process.memory_info().rss < kept - 40 * 2**20


def test_a_releasing_stage_releases_when_it_returns_and_when_it_fails(monkeypatch):
    released = []
    monkeypatch.setattr(memory, "release_unused", lambda: released.append(True))

    @memory.releasing
    def stage(fail: bool) -> str:
        if fail:
            raise ValueError("bad row")
        return "done"

    assert stage(False) == "done" and released == [True]
    with pytest.raises(ValueError, match="bad row"):
        stage(True)
    assert released == [True, True]
    assert stage.__name__ == "stage"
