"""Every test here is end to end: it starts a server or a subprocess (Prefect, FalkorDB, a loopback
LLM endpoint, the CLI) or runs whole builds, so `make test-quick` (tests/unit) leaves it out."""

from __future__ import annotations

from pathlib import Path

import pytest

HERE = Path(__file__).parent


def pytest_collection_modifyitems(config, items) -> None:
    for item in items:
        if HERE in Path(item.fspath).parents:
            item.add_marker(pytest.mark.e2e)
