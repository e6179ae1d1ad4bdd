"""The end-to-end half of tests/unit/test_api.py: servers, subprocesses or whole builds."""

from __future__ import annotations

import re
from concurrent.futures import ThreadPoolExecutor

import sagegraph
from tests.unit.test_api import README


def test_threads_get_what_serial_calls_get(synth_kb):
    questions = [q.text for q in synth_kb["questions"][:16]]
    with sagegraph.open(synth_kb["graph"]) as graph:
        serial = [
            [(h.node_id, round(h.score, 5)) for h in graph.retrieve(q, retriever="hybrid", k=10)] for q in questions
        ]
        with ThreadPoolExecutor(8) as pool:
            threaded = list(
                pool.map(
                    lambda q: [(h.node_id, round(h.score, 5)) for h in graph.retrieve(q, retriever="hybrid", k=10)],
                    questions,
                )
            )
    assert threaded == serial


def test_the_readmes_python_example_runs_as_written(synth_kb, capsys):
    """The README's snippet, run on the test KB (its path and question put in for the demo's)."""
    snippet = re.search(r"```python\n(.*?)```", README.read_text(encoding="utf-8"), re.DOTALL)
    assert snippet, "README has a Python example"
    code = snippet.group(1)
    assert 'sagegraph.open("work/kb-pathquestion")' in code
    code = code.replace('"work/kb-pathquestion"', repr(str(synth_kb["graph"].parent)))
    exec(compile(code, "README.md", "exec"), {})  # noqa: S102 - the README's own example, as a reader runs it
    printed = capsys.readouterr().out.strip().splitlines()
    assert len(printed) == 5 + 10  # five seeds and SAGE's ten neighbours (k_prime)
