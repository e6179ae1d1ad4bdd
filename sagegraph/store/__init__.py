"""Graph stores behind one interface: FalkorDB embedded (default) and Neo4j (production)."""

from sagegraph.store.base import GraphSchema, GraphStore, open_store
from sagegraph.store.readonly import assert_read_only

__all__ = ["GraphSchema", "GraphStore", "open_store", "assert_read_only"]
