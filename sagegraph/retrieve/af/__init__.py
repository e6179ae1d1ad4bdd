"""AF-Retriever (af.txt): the model derives a Cypher-like query with conditions; answers are
grounded by conditions and topic linking, then reranked."""
