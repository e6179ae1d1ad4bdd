"""Lexical (BM25) and dense (faiss) indexes over node texts and vectors."""
