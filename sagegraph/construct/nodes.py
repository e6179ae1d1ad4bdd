"""Source records -> chunk nodes (documents by semantic chunking, tables by segmentation, KB objects
one node each)."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from sagegraph.config import ChunkingConfig
from sagegraph.construct.chunking import chunk_documents
from sagegraph.construct.tables import segment_table, table_heading
from sagegraph.corpus.records import Document, KBObject, Table
from sagegraph.index.sentences import split_sentences
from sagegraph.model import DOC_CHUNK, ENTITY, TABLE_CHUNK, Node, node_id

Encode = Callable[[Sequence[str]], np.ndarray]


def document_nodes(docs: list[Document], encode: Encode, cfg: ChunkingConfig) -> list[Node]:
    sentences = [split_sentences(d.text) or [d.text] for d in docs]
    chunked = chunk_documents(sentences, encode, cfg.percentile, cfg.scope, cfg.min_chunk_chars, cfg.max_chunk_chars)
    nodes = []
    for doc, chunks in zip(docs, chunked):
        for pos, text in enumerate(chunks):
            nodes.append(Node(node_id(DOC_CHUNK, doc.id, text), DOC_CHUNK, "Passage", text, doc.id, doc.title, pos))
    return nodes


def table_nodes(tables: list[Table], rows_per_segment: int, keep_links: bool = False) -> list[Node]:
    """Table chunks carry their rows and header in metadata; hyperlinks only as an opt-in ablation
    (OTT-QA's table->passage links would otherwise leak the answer structure into the edges)."""
    nodes = []
    for t in tables:
        for pos, (start, end, text) in enumerate(segment_table(t, rows_per_segment)):
            meta = {
                "header": t.header,
                "rows": t.rows[start:end],
                "row_start": start,
                "row_end": end,
                "section_title": t.section_title,
                "page_title": t.title,
                "context": t.section_text or t.intro,
            }
            if keep_links and t.cell_links:
                meta["cell_links"] = t.cell_links[start:end]
            nodes.append(
                Node(node_id(TABLE_CHUNK, t.id, text), TABLE_CHUNK, "Table", text, t.id, table_heading(t), pos, meta)
            )
    return nodes


def kb_nodes(objects: list[KBObject]) -> list[Node]:
    nodes = []
    for obj in objects:
        text = "\n".join(f"{k}: {', '.join(map(str, v)) if isinstance(v, list) else v}" for k, v in obj.fields.items())
        nodes.append(
            Node(node_id(ENTITY, obj.id, obj.type), ENTITY, obj.type, text, obj.id, obj.name, 0, {"fields": obj.fields})
        )
    return nodes
