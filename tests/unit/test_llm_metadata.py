import json
from pathlib import Path

import pytest

from sagegraph.config import LLMConfig
from sagegraph.construct.metadata import heuristic_metadata
from sagegraph.errors import LLMError
from sagegraph.llm import LLMClient, parse_json_reply
from sagegraph.model import DOC_CHUNK, TABLE_CHUNK, Node
from tests.fake_openai import completion

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
