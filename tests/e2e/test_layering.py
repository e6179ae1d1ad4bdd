"""The end-to-end half of tests/unit/test_layering.py: servers, subprocesses or whole builds."""

from __future__ import annotations

import shutil
import subprocess
import sys

from tests.unit.test_layering import ROOT


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
