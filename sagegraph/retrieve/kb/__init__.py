"""What the KB methods share: the KB view over the graph (names, types, directed relations), the
schema card, name linking, Cypher grounding and the answer reranker."""
