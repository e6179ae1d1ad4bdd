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


def test_flows_tasks_and_deployments_are_installed_under_the_sagegraph_name(tmp_path):
    """The wheel holds sagegraph.flows, sagegraph.tasks and sagegraph.deployments (from the links
    in sagegraph/ to the top-level folders) and no top-level package of those generic names; the
    flows import from the installed copy, away from the checkout."""
    import zipfile

    src = tmp_path / "src"  # a copy, so the build leaves nothing in the checkout
    shutil.copytree(
        ROOT,
        src,
        symlinks=True,
        ignore=shutil.ignore_patterns(".venv", ".git", "work", "data", "build", "*.egg-info", "__pycache__", "mlruns"),
    )
    built = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "-q",
            "--no-deps",
            "--no-build-isolation",
            "-w",
            str(tmp_path / "dist"),
            str(src),
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert built.returncode == 0, built.stderr[-3000:]
    (wheel,) = (tmp_path / "dist").glob("sagegraph-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    assert {
        "sagegraph/flows/sweep.py",
        "sagegraph/tasks/evaluate.py",
        "sagegraph/deployments/deploy.py",
        "sagegraph/cli.py",
    } <= set(names)
    assert not [n for n in names if n.split("/")[0] in ("flows", "tasks", "deployments", "tests", "benchmarks")]
    zipfile.ZipFile(wheel).extractall(tmp_path / "site")
    code = "import sagegraph.flows.sweep as s, sagegraph.tasks.build, sagegraph.deployments.deploy; print(s.__file__)"
    ran = subprocess.run(
        [sys.executable, "-c", code],
        cwd=tmp_path,
        env={"PYTHONPATH": str(tmp_path / "site"), "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert ran.returncode == 0, ran.stderr[-3000:]
    assert ran.stdout.strip().startswith(str(tmp_path / "site"))
