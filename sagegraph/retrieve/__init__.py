"""Retrievers behind one interface (`base`) and one registry (`registry`)."""

from sagegraph.retrieve.base import Retrieval, Retriever
from sagegraph.retrieve.registry import REGISTRY, get_retriever, register, retriever_names, uses_edges

__all__ = ["REGISTRY", "Retrieval", "Retriever", "get_retriever", "register", "retriever_names", "uses_edges"]
