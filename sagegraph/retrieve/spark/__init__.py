"""SPARK (spark.txt): the model plans a Cypher query over the KB's schema card, deterministic
grounding repairs it, the store runs it read-only."""
