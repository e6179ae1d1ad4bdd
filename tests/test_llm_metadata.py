import json
from pathlib import Path

import pytest

from sagegraph.config import LLMConfig
from sagegraph.construct.metadata import TableMetadata, TextMetadata, extract_metadata, heuristic_metadata, llm_metadata
from sagegraph.errors import LLMError
from sagegraph.llm import LLMClient, parse_json_reply
from sagegraph.model import DOC_CHUNK, TABLE_CHUNK, Node
from tests.fake_openai import FakeOpenAI, completion

TEXT_NODE = Node(
    "d1",
    DOC_CHUNK,
    "Passage",
    "Cartier Field was a stadium in Notre Dame, Indiana. It opened in 1900.",
    "/wiki/Cartier_Field",
    "Cartier Field",
    0,
    {},
)
TABLE_NODE = Node(
    "t1",
    TABLE_CHUNK,
    "Table",
    "...",
    "nd_0",
    "1911 Notre Dame football",
    0,
    {
        "header": ["Date", "Opponent"],
        "rows": [["October 7", "Ohio Northern"], ["October 14", "St. Viator"]],
        "row_start": 0,
    },
)

TEXT_REPLY = {
    "entities": {"Cartier Field": {"details": ["A stadium in Notre Dame, Indiana."]}},
    "events": {},
    "timeline": ["1900 - Cartier Field opened"],
    "topic": "A former stadium of Notre Dame.",
}
TABLE_REPLY = {
    "table_title": "1911 Notre Dame football",
    "table_description": "Games of the 1911 season.",
    "table_summary": "Early wins.",
    "col_desc": {"Date": "Game date", "Opponent": "Opposing team"},
    "col_format": {"Date": "date (Month Day)", "Opponent": "string - team names"},
    "entities": {"Ohio Northern": {"type": "organization", "category": "named", "description": "Opposing team"}},
}


def recorded(body):
    user = body["messages"][-1]["content"]
    return 200, completion(json.dumps(TABLE_REPLY if "Rows (JSON)" in user else TEXT_REPLY), 120, 60)


def client(server, tmp_path, **kw):
    cfg = LLMConfig(base_url=server.base_url, model="test-model", **kw)
    return LLMClient(cfg, tmp_path / "llm.sqlite", sleep=lambda s: None)


@pytest.mark.e2e
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


@pytest.mark.e2e
def test_replies_are_cached_on_disk_and_never_paid_twice(tmp_path):
    with FakeOpenAI(recorded) as server:
        extract_metadata([TEXT_NODE, TABLE_NODE], "llm", client(server, tmp_path))
        again = client(server, tmp_path)  # a new process after a crash: same cache file
        extract_metadata([TEXT_NODE, TABLE_NODE], "llm", again)
    assert len(server.requests) == 2
    assert again.usage.cached == 2 and again.usage.cost_usd == 0.0


@pytest.mark.e2e
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


@pytest.mark.e2e
def test_exhausted_retries_raise_a_clear_error(tmp_path):
    with FakeOpenAI(lambda b: (429, {"error": {"message": "slow down"}})) as server:
        c = client(server, tmp_path, max_retries=1)
        with pytest.raises(LLMError, match="RateLimitError"):
            c.complete([{"role": "user", "content": "hi"}])


@pytest.mark.e2e
def test_bad_replies_are_not_cached_and_fall_back_to_heuristics(tmp_path):
    with FakeOpenAI(lambda b: (200, completion("Sure! Here is the metadata you asked for."))) as server:
        c = client(server, tmp_path)
        metas, fallbacks = extract_metadata([TEXT_NODE], "llm", c)
        extract_metadata([TEXT_NODE], "llm", c)
    assert fallbacks == 1 and metas[0] == heuristic_metadata(TEXT_NODE)
    assert len(server.requests) == 2  # asked again: the bad reply was not cached


def test_missing_key_is_a_clear_error(tmp_path, monkeypatch):
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    c = LLMClient(LLMConfig(), tmp_path / "c.sqlite")
    with pytest.raises(LLMError, match="OPENAI_API_KEY"):
        c.complete([{"role": "user", "content": "x"}])


def test_json_reply_parsing_tolerates_fences():
    assert parse_json_reply('```json\n{"a": 1}\n```') == {"a": 1}
    with pytest.raises(ValueError):
        parse_json_reply("no json here")


def test_heuristic_metadata_has_the_same_shapes():
    text = heuristic_metadata(TEXT_NODE)
    assert (
        "Cartier Field" in text["entities"]
        and text["topic"].startswith("Cartier Field was")
        and text["timeline"][0].startswith("1900")
    )
    table = heuristic_metadata(TABLE_NODE)
    assert table["col_format"] == {"Date": "date", "Opponent": "string"} and "Ohio Northern" in table["entities"]


@pytest.mark.e2e
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


def test_preflight_wants_a_key_only_while_llm_metadata_is_unwritten(tmp_path, monkeypatch):
    from sagegraph.config import load_config
    from sagegraph.construct.artifacts import Layout
    from sagegraph.construct.stages import ingest, preflight
    from tests.fixtures import make_ottqa, write_config

    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    corpus = make_ottqa(tmp_path / "ottqa")
    cfg = load_config(
        write_config(tmp_path / "c.yaml", {"kind": "ottqa", "path": str(corpus)}, tmp_path / "out"), metadata="llm"
    )
    with pytest.raises(LLMError, match="no API key: set OPENAI_API_KEY"):
        preflight(cfg)
    assert not (tmp_path / "out").exists()  # the check wrote nothing
    summary = ingest(cfg)
    metadata = Layout.of(cfg).stage_dir("metadata")
    for b in summary["batches"]:
        (metadata / (Path(b).stem + ".parquet")).write_bytes(b"")
    preflight(cfg)  # every batch's metadata is written: a resumed build needs no key
    for f in corpus.glob("*.jsonl"):
        f.unlink()
    preflight(cfg)  # nor the corpus files, once ingested


@pytest.mark.e2e
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
