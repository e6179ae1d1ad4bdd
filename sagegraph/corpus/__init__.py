"""Loaders that turn corpora on disk into typed source records (documents, tables, KB objects)."""

from sagegraph.corpus.load import load_corpus, load_questions
from sagegraph.corpus.records import Corpus, Document, KBObject, KBRelation, Question, Table

__all__ = ["Corpus", "Document", "KBObject", "KBRelation", "Question", "Table", "load_corpus", "load_questions"]
