"""Evaluation: STaRK-style metrics, OTT-QA gold mapping, run files."""
