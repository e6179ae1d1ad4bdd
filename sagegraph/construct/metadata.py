"""Per-chunk metadata (SAGE appendix G schemas): an offline heuristic extractor and an LLM extractor.

Both return the same JSON shapes, so everything downstream (edges, store, retrievers) is agnostic to
which one ran. The LLM prompts are sagegraph's own; the schemas follow the paper.
"""

from __future__ import annotations

import json
import re
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from pydantic import BaseModel, Field

from sagegraph.construct.entities import capitalised_spans, link_title
from sagegraph.errors import LLMUnavailable, ReplyRejected
from sagegraph.index.sentences import split_sentences
from sagegraph.llm import LLMClient, estimate_tokens, parse_json_reply
from sagegraph.model import DOC_CHUNK, TABLE_CHUNK, Node

_YEAR = re.compile(r"\b(1[5-9]\d\d|20\d\d)\b")
_NUMBER = re.compile(r"^[\s$€£]*-?[\d,.]+\s*%?$")
_DATEISH = re.compile(
    r"\b(\d{1,2}\s+)?(jan|feb|mar|apr|may|jun|jul|aug|sep|oct|nov|dec)[a-z]*\b|\b\d{4}-\d{2}-\d{2}\b", re.I
)


# ---- schemas (sage.txt appendix G) -------------------------------------------------------------


class TableEntity(BaseModel):
    type: str = "thing"
    category: str = "named"
    description: str = ""


class TableMetadata(BaseModel):
    table_title: str
    table_description: str = ""
    table_summary: str = ""
    col_desc: dict[str, str] = Field(default_factory=dict)
    col_format: dict[str, str] = Field(default_factory=dict)
    entities: dict[str, TableEntity] = Field(default_factory=dict)


class TextEntity(BaseModel):
    details: list[str] = Field(default_factory=list)


class TextEvent(BaseModel):
    date: str | None = None
    details: str = ""


class TextMetadata(BaseModel):
    entities: dict[str, TextEntity] = Field(default_factory=dict)
    events: dict[str, TextEvent] = Field(default_factory=dict)
    timeline: list[str] = Field(default_factory=list)
    topic: str = ""


# ---- heuristic extractor ---------------------------------------------------------------------------


def column_format(values: list[str]) -> str:
    vals = [v for v in values if v.strip()]
    if not vals:
        return "string - empty"
    if all(_NUMBER.match(v) for v in vals):
        return "number"
    if sum(bool(_DATEISH.search(v) or _YEAR.fullmatch(v.strip())) for v in vals) >= 0.8 * len(vals):
        return "date"
    return "string"


def heuristic_text_metadata(node: Node) -> dict[str, Any]:
    sents = split_sentences(node.text)
    topic = (sents[0] if sents else node.text)[:300]
    entities: dict[str, dict[str, list[str]]] = {}
    if node.title:
        entities[node.title] = {"details": [topic]}
    for sent in sents:
        for span in capitalised_spans(sent):
            entities.setdefault(span, {"details": []})
            if len(entities[span]["details"]) < 2:
                entities[span]["details"].append(sent[:200])
    timeline = []
    for sent in sents:
        m = _YEAR.search(sent)
        if m:
            timeline.append(f"{m.group(0)} - {sent[:120]}")
    meta = TextMetadata(entities=entities, events={}, timeline=timeline[:10], topic=topic)
    return {"title": node.title, **meta.model_dump()}


def heuristic_table_metadata(node: Node) -> dict[str, Any]:
    header: list[str] = node.metadata["header"]
    rows: list[list[str]] = node.metadata["rows"]
    links: list[list[list[str]]] = node.metadata.get("cell_links") or []
    heading = node.title
    section = node.metadata.get("section_title") or ""
    cols = ", ".join(h for h in header if h)
    entities: dict[str, dict[str, str]] = {}
    for r, row in enumerate(rows):
        for c, cell in enumerate(row):
            cell_links = links[r][c] if r < len(links) and c < len(links[r]) else []
            text_name = [cell.strip()] if cell.strip() and cell.strip()[0].isupper() and not _NUMBER.match(cell) else []
            names = [link_title(link) for link in cell_links] or text_name
            for name in names:
                if name and name not in entities and len(entities) < 60:
                    col = header[c] if c < len(header) else ""
                    entities[name] = {
                        "type": "thing",
                        "category": "named",
                        "description": f"{col} in {heading}".strip(),
                    }
    meta = TableMetadata(
        table_title=heading,
        table_description=f"{section or 'Table'} of {node.metadata.get('page_title') or heading} with columns {cols}.",
        table_summary=(node.metadata.get("context") or "")[:300],
        col_desc={h: f"{h} ({section or heading})" for h in header},
        col_format={h: column_format([row[i] for row in rows if i < len(row)]) for i, h in enumerate(header)},
        entities=entities,
    )
    return {"title": heading, **meta.model_dump()}


def heuristic_metadata(node: Node) -> dict[str, Any]:
    return heuristic_table_metadata(node) if node.modality == TABLE_CHUNK else heuristic_text_metadata(node)


# ---- LLM extractor ---------------------------------------------------------------------------------

TABLE_SYSTEM = """You extract metadata from one table segment and reply with a single JSON object, nothing else.
Keys:
- "table_title": the given source name, or a descriptive title inferred from the rows.
- "table_description": one sentence saying what the table records.
- "table_summary": one or two sentences on patterns or notable facts in the rows.
- "col_desc": for every column header, what the column holds and why it matters.
- "col_format": for every column header, its data format, e.g. "string - team names", "number - points", "date (Month Day)".
- "entities": every distinct entity in the rows, keyed by its name, each {"type": person|place|organization|event|concept|thing, "category": named|non-named, "description": a short gloss}.
No markdown, no comments, unique keys."""  # noqa: E501 - a prompt: its text is the recorded replies' key

TEXT_SYSTEM = """You extract metadata from one passage of text and reply with a single JSON object, nothing else.
Keys:
- "entities": one key per distinct NAMED entity (people, places, organisations, works, ...; not generic noun phrases), each {"details": [sentences from or about the passage where the entity is the subject]}. An alias or abbreviation gets its own key and names its original in details as "ORIGINAL: <name>".
- "events": one key per named event, each {"date": "YYYY-MM-DD" or null, "details": one sentence on its significance}.
- "timeline": the dated mentions in chronological order, each "<ISO date> - <what happened>".
- "topic": one sentence stating what the passage is about.
No markdown, no comments, unique keys."""  # noqa: E501 - a prompt: its text is the recorded replies' key


def _table_prompt(node: Node) -> list[dict[str, str]]:
    header, rows = node.metadata["header"], node.metadata["rows"]
    records = [dict(zip(header, row)) for row in rows]
    user = f'Source name: "{node.title}"\nRows (JSON):\n{json.dumps(records, ensure_ascii=False)}'
    return [{"role": "system", "content": TABLE_SYSTEM}, {"role": "user", "content": user}]


def _text_prompt(node: Node) -> list[dict[str, str]]:
    user = f'Title: "{node.title}"\nPassage:\n{node.text}'
    return [{"role": "system", "content": TEXT_SYSTEM}, {"role": "user", "content": user}]


def llm_prompt(node: Node) -> list[dict[str, str]]:
    return _table_prompt(node) if node.modality == TABLE_CHUNK else _text_prompt(node)


def _validate(node: Node, text: str) -> dict[str, Any]:
    obj = parse_json_reply(text)
    if node.modality == TABLE_CHUNK:
        obj.setdefault("table_title", node.title)
        meta = TableMetadata.model_validate(obj).model_dump()
    else:
        meta = TextMetadata.model_validate(obj).model_dump()
    return {"title": node.title, **meta}


def llm_metadata(node: Node, client: LLMClient, fallback: bool = True) -> tuple[dict[str, Any], bool]:
    """(metadata, ok). A reply that fails validation is not cached and, with fallback, the heuristic
    answers. Any other failure (no key, endpoint down after retries, auth) stops the batch, so no
    stage output holds fallbacks a resumed build would keep."""
    try:
        reply = client.complete(llm_prompt(node), json_mode=True, accept=lambda t: _validate(node, t))
        return _validate(node, reply.text), True
    except (ReplyRejected, ValueError):  # ValueError: a cached reply the current schema refuses
        if not fallback:
            raise
        return heuristic_metadata(node), False


def estimate_llm_tokens(nodes: list[Node], completion_per_call: int = 350) -> tuple[int, int]:
    """(prompt, completion) tokens expected for a metadata run, shown before any call is made."""
    prompt = sum(estimate_tokens("".join(m["content"] for m in llm_prompt(n))) for n in nodes)
    return prompt, completion_per_call * len(nodes)


def extract_metadata(
    nodes: list[Node],
    mode: str,
    client: LLMClient | None = None,
    fallback: bool = True,
    concurrency: int = 4,
    on_done: Callable[[], None] | None = None,
) -> tuple[list[dict[str, Any]], int]:
    """Metadata for each node, in order, plus the count of LLM replies that fell back to heuristics.
    `on_done` is called (from the worker threads) as each node's reply is in: an LLM batch takes
    minutes, and its progress is the caller's to report."""
    if mode == "heuristic":
        return [heuristic_metadata(n) for n in nodes], 0
    assert client is not None, "llm mode needs an LLMClient"
    stop = threading.Event()  # set by the first failure that is not a bad reply: no node asks after it

    def one(n: Node) -> tuple[dict[str, Any], bool]:
        if stop.is_set():
            raise LLMUnavailable("stopped: an earlier request of this batch failed")
        try:
            return llm_metadata(n, client, fallback)
        except Exception:
            stop.set()
            raise

    with ThreadPoolExecutor(max_workers=concurrency) as pool:
        futures = [pool.submit(one, n) for n in nodes]
        if on_done is not None:

            def answered(f) -> None:  # a failed or cancelled node is not progress
                if not f.cancelled() and f.exception() is None:
                    on_done()

            for f in futures:
                f.add_done_callback(answered)
        try:
            # In submission order: nodes start in that order, so the first error met is the real one,
            # never a later node's "stopped".
            results = [f.result() for f in futures]
        except BaseException:
            stop.set()
            for f in futures:
                f.cancel()
            raise
    return [r[0] for r in results], sum(1 for r in results if not r[1])


__all__ = [
    "extract_metadata",
    "heuristic_metadata",
    "llm_metadata",
    "estimate_llm_tokens",
    "TableMetadata",
    "TextMetadata",
    "DOC_CHUNK",
]
