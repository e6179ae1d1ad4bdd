"""DGR (dgr.txt): n tool-using LLM agents walk the KB per question; their answers are merged;
trajectories export as fine-tuning data."""
