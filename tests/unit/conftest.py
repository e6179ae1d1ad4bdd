"""tests/unit stays the quick loop: a test that asks for a fixture starting a server or building a
store is refused at collection, with where it belongs."""

from __future__ import annotations

from pathlib import Path

import pytest

HERE = Path(__file__).parent
SERVER_FIXTURES = {"synth_kb", "falkordb_server"}


def pytest_collection_modifyitems(config, items) -> None:
    for item in items:
        if HERE in Path(item.fspath).parents and SERVER_FIXTURES & set(getattr(item, "fixturenames", ())):
            raise pytest.UsageError(f"{item.nodeid} starts a server: it belongs in tests/e2e")
