"""The layering of STYLE.md is a contract, not a convention: import-linter checks it on every run."""

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def test_import_contracts_hold():
    exe = shutil.which("lint-imports", path=str(Path(sys.executable).parent))
    if exe is None:
        pytest.fail("lint-imports is not installed: `make setup` installs the test extra (import-linter)")
    res = subprocess.run(
        [exe, "--config", str(ROOT / "pyproject.toml"), "--no-cache"], cwd=ROOT, capture_output=True, text=True
    )
    assert res.returncode == 0, res.stdout[-4000:] + res.stderr[-2000:]
    assert "6 kept, 0 broken" in res.stdout


def test_no_import_cycles_in_the_library():
    """A module never reaches itself through its imports (a registry that imported the retrievers
    registering with it, a store interface that imported its backends, were two such cycles)."""
    import graphlib

    import grimp

    graph = grimp.build_graph("sagegraph", include_external_packages=False)
    deps = {m: graph.find_modules_directly_imported_by(m) for m in graph.modules}
    try:
        graphlib.TopologicalSorter(deps).prepare()
    except graphlib.CycleError as exc:
        pytest.fail(f"import cycle: {' -> '.join(exc.args[1])}")
