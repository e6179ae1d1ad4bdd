"""Prefect flows: they only compose tasks; `flows.runtime` sets up the server and task runner."""
