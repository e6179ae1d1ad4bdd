"""Per-test CPU, for finding where `make test`'s time goes on a machine it saturates: each test's
wall seconds, this process's CPU seconds and those of the child processes it waited for (a CLI
run, its Dask workers, a server it stopped), one JSON line per test in $SAGEGRAPH_CPU_REPORT.
Not loaded by default: `pytest -p tests.cpu_report` (CONTRIBUTING.md)."""

from __future__ import annotations

import json
import os
import resource
import time
from collections.abc import Iterator

import pytest


def _cpu_seconds() -> tuple[float, float]:
    own = resource.getrusage(resource.RUSAGE_SELF)
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime, children.ru_utime + children.ru_stime


def pytest_configure(config: pytest.Config) -> None:
    if not os.environ.get("SAGEGRAPH_CPU_REPORT"):
        raise pytest.UsageError("tests.cpu_report: set SAGEGRAPH_CPU_REPORT to the file its lines are appended to")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> Iterator[None]:
    started = time.monotonic()
    own_before, children_before = _cpu_seconds()
    yield
    own_after, children_after = _cpu_seconds()
    row = {
        "test": item.nodeid,
        "wall_s": round(time.monotonic() - started, 2),
        "cpu_s": round(own_after - own_before, 2),
        "children_cpu_s": round(children_after - children_before, 2),
    }
    with open(os.environ["SAGEGRAPH_CPU_REPORT"], "a") as report:
        report.write(json.dumps(row) + "\n")
