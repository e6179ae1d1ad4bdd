"""Whether a process is still running: what a killed run leaves behind (its run lock's note, its
hidden temporaries, its FalkorDB server registry) is judged by it, in one place."""

from __future__ import annotations

import psutil


def running(pid: int) -> bool:
    """A zombie (exited, not yet reaped by its parent) has stopped."""
    if pid <= 0:
        return False
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False
