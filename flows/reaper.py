"""Stops a run's helper processes when the run itself dies without stopping them.

A `sagegraph build` killed with -9 left its temporary Prefect API server (and the Dask workers)
running as orphans: the kernel does not take a process's children with it, and Prefect starts the
server with a plain Popen that this code cannot give a parent-death signal. So each run starts
this watcher in a session of its own: it notes the run's descendants every half second and, once
the run is gone, terminates the ones still alive (SIGKILL after 5 s), together with any process
that carries the run's token in its environment (a helper started in the last half second, which
the kernel handed to init before it was noted). A run that ends normally stops the watcher first
(`sagegraph.flows.runtime.reaped`).

    python -m sagegraph.flows.reaper PARENT_PID TOKEN
"""

from __future__ import annotations

import os
import sys
import time

import psutil

TOKEN_VAR = "SAGEGRAPH_RUN_TOKEN"


def _carrying(token: str) -> list[psutil.Process]:
    found = []
    for p in psutil.process_iter():
        try:
            if p.pid != os.getpid() and p.environ().get(TOKEN_VAR) == token:
                found.append(p)
        except (psutil.Error, OSError):
            continue
    return found


def watch(parent_pid: int, token: str = "", interval_s: float = 0.5) -> int:
    try:
        parent = psutil.Process(parent_pid)
    except psutil.NoSuchProcess:
        return 0
    known: dict[int, psutil.Process] = {}
    while True:
        try:
            if not parent.is_running() or parent.status() == psutil.STATUS_ZOMBIE:
                break
            for child in parent.children(recursive=True):
                if child.pid != os.getpid():
                    known.setdefault(child.pid, child)
        except psutil.NoSuchProcess:
            break
        time.sleep(interval_s)
    if token:
        for p in _carrying(token):
            known.setdefault(p.pid, p)
    alive = [p for p in known.values() if p.is_running()]  # is_running also checks the start time: no pid reuse
    for p in alive:
        try:
            p.terminate()
        except psutil.NoSuchProcess:
            pass
    _, left = psutil.wait_procs(alive, timeout=5)
    for p in left:
        try:
            p.kill()
        except psutil.NoSuchProcess:
            pass
    return len(alive)


if __name__ == "__main__":
    sys.exit(0 if watch(int(sys.argv[1]), sys.argv[2] if len(sys.argv) > 2 else "") >= 0 else 1)
