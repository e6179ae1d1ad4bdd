"""The end-to-end half of tests/unit/test_hostile_inputs.py: servers, subprocesses or whole builds."""

from __future__ import annotations

import time

import pytest


def test_the_embedded_server_stops_when_its_starter_is_killed(tmp_path):
    import signal
    import subprocess
    import sys

    import psutil

    script = (
        "import sys, time; from sagegraph.store import open_store\n"
        "s = open_store('falkordb', sys.argv[1], graph='g'); s.write('CREATE (:Node {id: \"a\"})')\n"
        "print(s.db.client.pid, flush=True); time.sleep(600)\n"
    )
    child = subprocess.Popen([sys.executable, "-c", script, str(tmp_path / "store")], stdout=subprocess.PIPE, text=True)
    server_pid = int(child.stdout.readline())
    assert psutil.pid_exists(server_pid)
    child.send_signal(signal.SIGKILL)
    child.wait(10)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            if psutil.Process(server_pid).status() == psutil.STATUS_ZOMBIE:
                break
        except psutil.NoSuchProcess:
            break
        time.sleep(0.2)
    else:
        pytest.fail("the embedded server outlived the process that started it")
    from sagegraph.store import open_store

    with open_store("falkordb", tmp_path / "store", graph="g") as again:  # nothing lost: restarted from its AOF
        assert again.count_nodes() == 1


def test_a_tracking_store_that_fails_is_one_line(tmp_path):
    """A database another process holds locked fails the same way after MLflow's own 20 s busy
    timeout (measured once: one line after 20.1 s); a file that is no database fails at once."""
    from sagegraph.errors import InfraError
    from sagegraph.tracking import SweepTracker, default_tracking_uri

    (tmp_path / "mlflow.db").write_bytes(b"not a database, " * 512)
    with pytest.raises(InfraError, match="MLflow tracking store .* failed"):
        SweepTracker(default_tracking_uri(tmp_path), "sweeps", tmp_path / "parent.json", "first")
