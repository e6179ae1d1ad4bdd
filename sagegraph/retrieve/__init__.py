"""Retrievers behind one interface and one registry."""

from sagegraph.retrieve.base import REGISTRY, Retrieval, Retriever, get_retriever, register, retriever_names, uses_edges

__all__ = ["REGISTRY", "Retrieval", "Retriever", "get_retriever", "register", "retriever_names", "uses_edges"]
