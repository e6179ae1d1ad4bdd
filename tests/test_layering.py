"""The layering of STYLE.md is a contract, not a convention: import-linter checks it on every run."""

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def test_import_contracts_hold():
    exe = shutil.which("lint-imports", path=str(Path(sys.executable).parent))
    if exe is None:
        pytest.fail("lint-imports is not installed: `make setup` installs the test extra (import-linter)")
    res = subprocess.run([exe, "--config", str(ROOT / "pyproject.toml"), "--no-cache"], cwd=ROOT, capture_output=True, text=True)
    assert res.returncode == 0, res.stdout[-4000:] + res.stderr[-2000:]
    assert "3 kept, 0 broken" in res.stdout
