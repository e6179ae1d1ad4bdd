"""Prefect flows: they only compose tasks; `sagegraph.flows.runtime` sets up the server and task runner."""
