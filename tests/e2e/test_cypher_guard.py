"""The end-to-end half of tests/unit/test_cypher_guard.py: servers, subprocesses or whole builds."""

from __future__ import annotations

import contextlib
import time

import pytest
from hypothesis import HealthCheck, given, settings

from sagegraph.errors import ReadOnlyViolation, StoreError
from tests.unit.test_cypher_guard import (
    Listener,
    RecordingStore,
    adversarial,
    bypass_corpus,
    falkor,  # noqa: F401 (a fixture)
    reaches_engine_harmless,
)


@settings(max_examples=2000, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(adversarial())
def test_no_generated_adversarial_query_reaches_the_engine_with_its_payload(case):
    query, live = case
    store = RecordingStore()
    try:
        store.read_untrusted(query)
    except ReadOnlyViolation:
        assert store.sent == []
        return
    assert not live, f"live payload passed the guard: {query!r} -> {store.sent}"
    assert store.sent and all(reaches_engine_harmless(text) for text in store.sent), store.sent


def test_the_store_opens_no_connection_for_any_bypass(falkor):
    listener = Listener()
    try:
        for query in bypass_corpus(listener.port):
            with pytest.raises(ReadOnlyViolation):
                falkor.read_untrusted(query)
        time.sleep(0.3)
        assert listener.accepted == 0
        # The watch works: the same engine, asked directly (no guard), does connect out.
        with contextlib.suppress(Exception):  # a TLS handshake with a plain socket fails, or returns nothing
            falkor.g.ro_query(f"LOAD CSV FROM 'https://127.0.0.1:{listener.port}/leak' AS row RETURN row", timeout=3000)
        deadline = time.monotonic() + 3
        while listener.accepted == 0 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert listener.accepted >= 1
    finally:
        listener.close()
    assert falkor.count_nodes() == 3


def test_the_engine_stops_at_the_row_cap_and_the_time_limit(falkor, monkeypatch):
    from sagegraph.store.falkor import FalkorStore

    received = []
    rows_of = FalkorStore._rows
    monkeypatch.setattr(
        FalkorStore, "_rows", staticmethod(lambda res: received.append(len(res.result_set)) or rows_of(res))
    )
    rows, truncated = falkor.read_untrusted(
        "UNWIND range(1, 1000) AS x UNWIND range(1, 1000) AS y RETURN x * y AS x", max_rows=1000
    )
    assert len(rows) == 1000 and truncated and received == [1001]  # the engine sent 1,001 rows, not 1M
    with pytest.raises(StoreError, match="timed out"):
        falkor.read_untrusted(
            "UNWIND range(1, 100000) AS x UNWIND range(1, 100000) AS y RETURN count(*) AS c", timeout_ms=100
        )
    with pytest.raises(StoreError, match="mem consumption"):  # the engine's memory bound, before any row leaves it
        falkor.read_untrusted("RETURN range(1, 10000000) AS x", timeout_ms=1000)
