"""GraphRAFT (graphraft.txt): Cypher from templates by constrained selection over the question's
linked entities; training labels and LoRA fine-tuning of the selector."""
