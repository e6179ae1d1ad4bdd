"""Graph stores behind one interface (`base`): FalkorDB embedded (default) or as a server, and
Neo4j (production), opened by `factory`."""

from sagegraph.store.base import GraphStore
from sagegraph.store.factory import open_store
from sagegraph.store.readonly import assert_read_only
from sagegraph.store.schema import GraphSchema

__all__ = ["GraphSchema", "GraphStore", "open_store", "assert_read_only"]
