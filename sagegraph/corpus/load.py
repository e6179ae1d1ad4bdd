"""One entry point from a corpus config to a Corpus of typed records."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa

from sagegraph.config import CorpusConfig
from sagegraph.corpus import kb_edges
from sagegraph.corpus.generic import load_generic
from sagegraph.corpus.jsonl import ErrorPolicy
from sagegraph.corpus.kb import NODES, load_kb
from sagegraph.corpus.ottqa import PASSAGES, QUESTIONS, TABLES, load_ottqa
from sagegraph.corpus.ottqa import load_questions as load_ottqa_questions
from sagegraph.corpus.questions import load_questions as _load_questions
from sagegraph.corpus.records import Corpus, Question
from sagegraph.errors import ConfigError


def check_corpus(cfg: CorpusConfig) -> None:
    """Before a build starts its server and workers: the files the loader will read are there.
    Finding out inside the flow cost a Prefect start-up and a task traceback in front of the one
    line that says what is wrong."""
    if cfg.kind == "generic":
        wanted = [
            (f"corpus.{name}", Path(path))
            for name, path in (("documents", cfg.documents), ("tables", cfg.tables))
            if path is not None
        ]
    else:
        if cfg.kind == "kb" and cfg.path is None:
            raise ConfigError(f"corpus.path: not set; corpus.kind 'kb' needs the directory that holds {NODES}")
        root = cfg.resolved_path()
        names = (TABLES, PASSAGES) if cfg.kind == "ottqa" else (NODES,)
        field = f"corpus.path ({cfg.kind} reads {', '.join(names)} there)"
        wanted = [(field, root / n) for n in names] if root.is_dir() else [(field, root)]
    missing = [f"{field}: {path} does not exist" for field, path in wanted if not path.exists()]
    if missing:
        raise ConfigError("; ".join(missing))


def load_corpus(
    cfg: CorpusConfig,
    max_sources: int | None = None,
    subset: str = "prefix",
    relations_before: pa.Table | None = None,
) -> Corpus:
    """`relations_before`: a KB's relations file as a build read it before, unchanged since (`load_kb`)."""
    policy = ErrorPolicy(cfg.on_error, cfg.on_duplicate)
    corpus = Corpus()
    if cfg.kind == "ottqa":
        around = None
        if subset == "around_questions" and max_sources is not None:
            qpath = cfg.questions or cfg.resolved_path() / "questions.jsonl"
            around = [q.gold_sources[0] for q in load_ottqa_questions(qpath, policy)]  # each question's table
        corpus.tables, corpus.documents = load_ottqa(cfg.resolved_path(), policy, max_sources, around)
    elif cfg.kind == "generic":
        corpus.tables, corpus.documents = load_generic(cfg.documents, cfg.tables, policy)
    else:
        corpus.kb_nodes, corpus.kb_edges = load_kb(cfg.resolved_path(), policy, relations_before)
        if max_sources is not None:
            corpus.kb_nodes = corpus.kb_nodes[:max_sources]
            keep = {n.id for n in corpus.kb_nodes}
            corpus.kb_edges = kb_edges.between(corpus.kb_edges, keep)
    if cfg.kind == "generic" and max_sources is not None:
        corpus.tables = corpus.tables[:max_sources]
        corpus.documents = corpus.documents[: max(0, max_sources - len(corpus.tables))]
    corpus.skipped = dict(policy.skipped)
    return corpus


def load_questions(cfg: CorpusConfig) -> list[Question]:
    path: Path = cfg.questions or cfg.resolved_path() / QUESTIONS
    return _load_questions(path, ErrorPolicy(cfg.on_error))
