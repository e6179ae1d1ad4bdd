"""`sagegraph data fetch ottqa DIR`: download the OTT-QA dev set from the OTT-QA repository's public
raw files and write the same three JSONL files the shared copy has (tables, passages, questions).

Per dev question the repository holds its table (data/traindev_tables_tok/<table_id>.json) and the
passages linked from that table (data/traindev_request_tok/<table_id>.json).
"""

from __future__ import annotations

import json
import logging
import time
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any
from urllib.parse import quote

from sagegraph.corpus.ottqa import PASSAGES, QUESTIONS, TABLES
from sagegraph.errors import SageGraphError
from sagegraph.runfiles import write_jsonl_whole

log = logging.getLogger("sagegraph.fetch")
OTTQA_RAW = "https://raw.githubusercontent.com/wenhuchen/OTT-QA/master"


def _get_json(url: str, retries: int = 4, timeout: float = 60.0) -> Any:
    delay = 1.0
    for attempt in range(retries + 1):
        try:
            with urllib.request.urlopen(url, timeout=timeout) as resp:
                return json.loads(resp.read().decode("utf-8"))
        except urllib.error.HTTPError as exc:
            if exc.code == 404:
                raise SageGraphError(f"not found: {url}") from None
            if attempt == retries:
                raise SageGraphError(f"download failed ({exc.code}): {url}") from None
        except (urllib.error.URLError, TimeoutError, ConnectionError) as exc:
            if attempt == retries:
                raise SageGraphError(f"download failed: {url}: {exc}") from None
        time.sleep(delay)
        delay *= 2
    raise SageGraphError(f"download failed: {url}")


def fetch_ottqa(dest: Path, base_url: str = OTTQA_RAW, workers: int = 8, limit: int | None = None) -> dict[str, int]:
    """Download and convert; idempotent (existing complete output is kept)."""
    dest = Path(dest)
    dest.mkdir(parents=True, exist_ok=True)
    if all((dest / f).exists() for f in (TABLES, PASSAGES, QUESTIONS)):
        return {f: sum(1 for _ in (dest / f).open(encoding="utf-8")) for f in (TABLES, PASSAGES, QUESTIONS)}
    questions = _get_json(f"{base_url}/released_data/dev.json")
    if limit is not None:
        questions = questions[:limit]
    table_ids = list(dict.fromkeys(q["table_id"] for q in questions))
    log.info("fetching %d tables and their passages", len(table_ids))

    def one(tid: str) -> tuple[dict[str, Any], dict[str, str]]:
        name = quote(tid, safe="")
        table = _get_json(f"{base_url}/data/traindev_tables_tok/{name}.json")
        passages = _get_json(f"{base_url}/data/traindev_request_tok/{name}.json")
        return table, passages

    with ThreadPoolExecutor(max_workers=workers) as pool:
        results = list(pool.map(one, table_ids))
    tables = []
    passages: dict[str, str] = {}
    for tid, (table, linked) in zip(table_ids, results):
        table.setdefault("uid", tid)
        tables.append(table)
        for pid, text in linked.items():
            passages.setdefault(pid, text)
    write_jsonl_whole(dest / TABLES, tables)
    write_jsonl_whole(dest / PASSAGES, [{"id": k, "text": v} for k, v in sorted(passages.items())])
    write_jsonl_whole(dest / QUESTIONS, questions)
    return {TABLES: len(tables), PASSAGES: len(passages), QUESTIONS: len(questions)}
