"""A generic corpus: documents as JSONL, tables as CSV files or JSONL records."""

from __future__ import annotations

import csv
from pathlib import Path
from typing import Any

from sagegraph.corpus.jsonl import ErrorPolicy, load_records, read_jsonl, require
from sagegraph.corpus.records import Document, Table
from sagegraph.errors import InputError


def parse_document(obj: dict[str, Any], path: Path, lineno: int) -> Document:
    doc_id = require(obj, "id", str, path, lineno)
    return Document(id=doc_id, title=obj.get("title") or doc_id, text=require(obj, "text", str, path, lineno))


def parse_table_record(obj: dict[str, Any], path: Path, lineno: int) -> Table:
    header = [str(h) for h in require(obj, "header", list, path, lineno)]
    rows = require(obj, "rows", list, path, lineno)
    for r, row in enumerate(rows):
        if not isinstance(row, list) or len(row) != len(header):
            raise InputError(
                path,
                lineno,
                f"rows[{r}]",
                f"ragged row: {len(row) if isinstance(row, list) else 'not a list'} cells, header has {len(header)}",
            )
    return Table(
        id=require(obj, "id", str, path, lineno),
        title=obj.get("title") or obj["id"],
        header=header,
        rows=[[str(c) for c in row] for row in rows],
        section_title=obj.get("section_title") or "",
        intro=obj.get("description") or "",
    )


def read_csv_table(path: Path, policy: ErrorPolicy) -> Table | None:
    """One CSV file is one table: its stem is the id and title, its first row the header."""
    try:
        text = path.read_bytes().decode("utf-8")
    except UnicodeDecodeError as exc:
        line = path.read_bytes()[: exc.start].count(b"\n") + 1
        policy.handle(InputError(path, line, None, f"not valid UTF-8 (byte {exc.start})"))
        return None
    rows = list(csv.reader(text.splitlines()))
    if not rows:
        policy.handle(InputError(path, 1, "header", "empty table"))
        return None
    header = rows[0]
    body = []
    for lineno, row in enumerate(rows[1:], start=2):
        if len(row) != len(header):
            policy.handle(InputError(path, lineno, "row", f"ragged row: {len(row)} cells, header has {len(header)}"))
            if policy.on_error == "skip":
                continue
        body.append(row)
    return Table(id=path.stem, title=path.stem.replace("_", " "), header=header, rows=body)


def load_generic(
    documents: Path | None, tables: Path | None, policy: ErrorPolicy
) -> tuple[list[Table], list[Document]]:
    docs = load_records(documents, parse_document, policy, key=lambda d: d.id) if documents else []
    tabs: list[Table] = []
    if tables is not None:
        if tables.is_dir():
            for csv_path in sorted(tables.glob("*.csv")):
                t = read_csv_table(csv_path, policy)
                if t is not None:
                    tabs.append(t)
        else:
            tabs = load_records(tables, parse_table_record, policy, key=lambda t: t.id)
    return tabs, docs


__all__ = ["load_generic", "read_jsonl"]
