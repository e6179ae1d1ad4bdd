"""The temporary Prefect API server of one run, started without importing Prefect's server code.

Why: Prefect's own launcher (`prefect.server.api.server.SubprocessASGIServer`) lives in the module
that defines the whole server application; importing it for the launcher alone cost the CLI about
4 CPU seconds on every build and sweep (2-core AMD EPYC), on the path before the first task. This
starts the same command Prefect's launcher starts (uvicorn on Prefect's app factory, in Prefect's
ephemeral mode: no UI, only the services a run needs) and keeps its rules: a port taken between
choosing and binding (uvicorn exits 3) moves the server to another port, and the server counts as
started once its health check answers.
"""

from __future__ import annotations

import contextlib
import os
import random
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx

# What Prefect's launcher sets for its temporary server (no UI, ephemeral services, a final app),
# and no registration of Prefect's block types at start (1.3 CPU s of a new home's start): no
# flow or task of sagegraph stores a block or persists a result. A setting the user exported wins.
SERVER_ENV = {
    "PREFECT_UI_ENABLED": "0",
    "PREFECT__SERVER_EPHEMERAL": "1",
    "PREFECT__SERVER_FINAL": "1",
    "PREFECT_SERVER_REGISTER_BLOCKS_ON_START": "false",
}
PORTS = range(8000, 9000)
PORT_TAKEN = 3  # uvicorn's exit status when it cannot bind


def free_port(ports: range = PORTS) -> int:
    """A port of `ports` that nothing listens on now (another process may take it before the
    server binds: `LocalAPIServer.start` then moves)."""
    for _ in range(50):
        port = random.choice(ports)
        with contextlib.closing(socket.socket(socket.AF_INET, socket.SOCK_STREAM)) as sock:
            try:
                sock.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    raise RuntimeError(f"no free port in {ports.start}-{ports.stop - 1} for the Prefect API server")


class LocalAPIServer:
    """A Prefect API server on 127.0.0.1 in a child process, for one run."""

    def __init__(self, port: int | None = None):
        self.port = port or free_port()
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def api_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/api"

    def _spawn(self) -> subprocess.Popen[bytes]:
        import prefect
        from prefect.settings import get_current_settings

        app_dir = Path(prefect.__file__).resolve().parent.parent
        env = {**os.environ, **SERVER_ENV, **get_current_settings().to_environment_variables(exclude_unset=True)}
        return subprocess.Popen(
            [
                sys.executable,
                "-m",
                "uvicorn",
                "--app-dir",
                str(app_dir),
                "--factory",
                "prefect.server.api.server:create_app",
                "--host",
                "127.0.0.1",
                "--port",
                str(self.port),
                "--log-level",
                "error",
                "--lifespan",
                "on",
            ],
            env=env,
            stdin=subprocess.DEVNULL,
        )

    def start(self, timeout_s: float) -> None:
        """Start the server and wait for its health check; a RuntimeError names its exit status
        when it stops first or does not answer within `timeout_s`."""
        self.process = self._spawn()
        deadline = time.monotonic() + timeout_s
        with httpx.Client() as client:
            while time.monotonic() < deadline:
                status = self.process.poll()
                if status == PORT_TAKEN:
                    self.port = free_port()
                    self.process = self._spawn()
                    continue
                if status is not None:
                    raise RuntimeError(f"the Prefect API server exited with status {status} before it answered")
                with contextlib.suppress(httpx.TransportError):
                    if client.get(f"{self.api_url}/health", timeout=5).status_code == 200:
                        return
                time.sleep(0.1)
        self.stop()
        raise RuntimeError(f"the Prefect API server did not answer on {self.api_url} within {timeout_s:.0f} s")

    def stop(self) -> None:
        """Stop the server: asked first, killed after 5 s."""
        process, self.process = self.process, None
        if process is None:
            return
        process.terminate()
        try:
            process.wait(timeout=5)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
