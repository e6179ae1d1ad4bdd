"""Offline SAGE graph construction: chunking, tables, metadata, embeddings, edges, statistics."""
