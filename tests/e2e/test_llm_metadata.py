"""The end-to-end half of tests/unit/test_llm_metadata.py: servers, subprocesses or whole builds."""

from __future__ import annotations

import pytest

from sagegraph.config import LLMConfig
from sagegraph.construct.metadata import TableMetadata, TextMetadata, extract_metadata, heuristic_metadata, llm_metadata
from sagegraph.errors import LLMError
from sagegraph.llm import LLMClient
from tests.fake_openai import FakeOpenAI, completion
from tests.unit.test_llm_metadata import TABLE_NODE, TEXT_NODE, TEXT_REPLY, client, recorded


def test_llm_metadata_follows_the_paper_schemas_and_counts_cost(tmp_path):
    with FakeOpenAI(recorded) as server:
        c = client(server, tmp_path)
        text, ok1 = llm_metadata(TEXT_NODE, c)
        table, ok2 = llm_metadata(TABLE_NODE, c)
    assert ok1 and ok2
    TextMetadata.model_validate({k: v for k, v in text.items() if k != "title"})
    TableMetadata.model_validate({k: v for k, v in table.items() if k != "title"})
    assert text["topic"] == TEXT_REPLY["topic"] and table["col_format"]["Date"] == "date (Month Day)"
    assert server.requests[0]["response_format"] == {"type": "json_object"}
    u = c.usage.as_dict()
    assert u["calls"] == 2 and u["prompt_tokens"] == 240 and u["completion_tokens"] == 120
    assert u["cost_usd"] == pytest.approx((240 * 0.15 + 120 * 0.60) / 1e6)


def test_replies_are_cached_on_disk_and_never_paid_twice(tmp_path):
    with FakeOpenAI(recorded) as server:
        extract_metadata([TEXT_NODE, TABLE_NODE], "llm", client(server, tmp_path))
        again = client(server, tmp_path)  # a new process after a crash: same cache file
        extract_metadata([TEXT_NODE, TABLE_NODE], "llm", again)
    assert len(server.requests) == 2
    assert again.usage.cached == 2 and again.usage.cost_usd == 0.0


def test_rate_limits_are_retried_with_backoff(tmp_path):
    state = {"n": 0}

    def flaky(body):
        state["n"] += 1
        if state["n"] <= 2:
            return 429, {"error": {"message": "rate limited", "type": "rate_limit"}}
        return recorded(body)

    with FakeOpenAI(flaky) as server:
        c = client(server, tmp_path)
        meta, ok = llm_metadata(TEXT_NODE, c)
    assert ok and meta["topic"] == TEXT_REPLY["topic"] and c.usage.retries == 2


def test_exhausted_retries_raise_a_clear_error(tmp_path):
    with FakeOpenAI(lambda b: (429, {"error": {"message": "slow down"}})) as server:
        c = client(server, tmp_path, max_retries=1)
        with pytest.raises(LLMError, match="RateLimitError"):
            c.complete([{"role": "user", "content": "hi"}])


def test_bad_replies_are_not_cached_and_fall_back_to_heuristics(tmp_path):
    with FakeOpenAI(lambda b: (200, completion("Sure! Here is the metadata you asked for."))) as server:
        c = client(server, tmp_path)
        metas, fallbacks = extract_metadata([TEXT_NODE], "llm", c)
        extract_metadata([TEXT_NODE], "llm", c)
    assert fallbacks == 1 and metas[0] == heuristic_metadata(TEXT_NODE)
    assert len(server.requests) == 2  # asked again: the bad reply was not cached


def test_a_refused_or_unreachable_endpoint_stops_the_batch_instead_of_falling_back(tmp_path, monkeypatch):
    """Only an unusable reply falls back; a metadata batch of fallbacks would be resumed later as
    if the LLM had written it."""
    with FakeOpenAI(
        lambda b: (401, {"error": {"message": "invalid api key", "type": "invalid_request_error"}})
    ) as server:
        c = client(server, tmp_path)
        with pytest.raises(LLMError, match="AuthenticationError"):
            extract_metadata([TEXT_NODE, TABLE_NODE] * 50, "llm", c, concurrency=2)
    assert len(server.requests) < 20  # the batch stopped asking after the first refusals, not after 100
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    with pytest.raises(LLMError, match="no API key"):
        extract_metadata([TEXT_NODE], "llm", LLMClient(LLMConfig(), tmp_path / "k.sqlite"))


def test_an_llm_metadata_batch_reports_its_progress(tmp_path):
    """An LLM batch takes minutes: each reply ticks, and the batch's last line says it is done."""
    from sagegraph.progress import ticker

    lines: list[str] = []
    tick = ticker("metadata batch-1", 20, "nodes", lines.append, every_s=0.0)
    with FakeOpenAI(recorded) as server:
        metas, _ = extract_metadata(
            [TEXT_NODE, TABLE_NODE] * 10, "llm", client(server, tmp_path), concurrency=2, on_done=tick
        )
    assert len(metas) == 20 and len(lines) == 20  # every reply, at every_s = 0
    assert (
        lines[0].startswith("metadata batch-1: 1/20 nodes")
        and lines[-1].endswith(", done")
        and "20/20 nodes" in lines[-1]
    )
    assert ticker("x", 0, "nodes", lines.append) is None and ticker("x", 5, "nodes", None) is None
