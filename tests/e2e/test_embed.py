"""The end-to-end half of tests/unit/test_embed.py: servers, subprocesses or whole builds."""

from __future__ import annotations

import pytest

from sagegraph import embed


def test_device_choice_needs_no_torch_import_without_gpu_device_nodes():
    """A flow's driver resolves the device (for its stage layout) without paying torch's import."""
    import subprocess
    import sys

    if not embed._no_gpu_device_nodes():
        pytest.skip("this host has GPU device nodes (or is not Linux): torch decides")
    code = "import sys; from sagegraph.embed import pick_device; print(pick_device(), 'torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    assert out == ["cpu", "False"]
