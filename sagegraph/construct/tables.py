"""SAGE table segmentation: title, description, headers and column descriptions stay with every
segment; rows are split into segments of 5-10 rows, balanced so no segment is a tiny tail."""

from __future__ import annotations

import math

from sagegraph.corpus.records import Table

MIN_ROWS, MAX_ROWS = 5, 10


def segment_sizes(n_rows: int, target: int = 8) -> list[int]:
    """Balanced segment sizes near `target`, each at most MAX_ROWS; short tables stay whole."""
    if n_rows <= MAX_ROWS:
        return [n_rows]
    n_seg = max(1, round(n_rows / target))
    while math.ceil(n_rows / n_seg) > MAX_ROWS:
        n_seg += 1
    while n_seg > 1 and n_rows // n_seg < MIN_ROWS:
        n_seg -= 1
    base, extra = divmod(n_rows, n_seg)
    return [base + (1 if i < extra else 0) for i in range(n_seg)]


def render_rows(header: list[str], rows: list[list[str]]) -> str:
    lines = [" | ".join(header)]
    lines.extend(" | ".join(row) for row in rows)
    return "\n".join(lines)


def table_heading(table: Table) -> str:
    heading = table.title if not table.section_title else f"{table.title} - {table.section_title}"
    return heading


def segment_table(table: Table, target_rows: int = 8) -> list[tuple[int, int, str]]:
    """[(row_start, row_end, text)]; the text repeats the heading and header so each segment stands alone."""
    out, start = [], 0
    heading = table_heading(table)
    context = table.section_text or table.intro
    for size in segment_sizes(len(table.rows), target_rows):
        body = render_rows(table.header, table.rows[start : start + size])
        parts = [heading]
        if context:
            parts.append(context[:300])
        parts.append(body)
        out.append((start, start + size, "\n".join(parts)))
        start += size
    return out
