"""The temporary Prefect API server's launcher: its rules checked on stand-in processes (the real
server starts in the end-to-end tests of every build and sweep)."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

from sagegraph.flows import api_server
from sagegraph.flows.api_server import LocalAPIServer

# Answers GET /api/health with 200 on the port it is given, as Prefect's server does once started.
HEALTHY = textwrap.dedent(
    """
    import http.server, sys
    class Health(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            self.send_response(200 if self.path == "/api/health" else 404)
            self.end_headers()
        def log_message(self, *args):
            pass
    http.server.HTTPServer(("127.0.0.1", int(sys.argv[1])), Health).serve_forever()
    """
)


def stand_ins(monkeypatch, *scripts: str) -> list[int]:
    """`LocalAPIServer._spawn` runs each script in turn (with the port as its argument); the ports
    asked for are returned."""
    ports: list[int] = []
    queue = list(scripts)

    def spawn(self):
        ports.append(self.port)
        return subprocess.Popen([sys.executable, "-c", queue.pop(0), str(self.port)])

    monkeypatch.setattr(LocalAPIServer, "_spawn", spawn)
    return ports


def test_a_port_taken_before_the_server_binds_moves_it_to_another(monkeypatch):
    ports = stand_ins(monkeypatch, "raise SystemExit(3)", HEALTHY)  # uvicorn's status for a port it cannot bind
    server = LocalAPIServer()
    try:
        server.start(timeout_s=30)
        assert len(ports) == 2 and server.port == ports[1] and server.api_url.endswith(f":{ports[1]}/api")
        process = server.process
    finally:
        server.stop()
    assert process is not None and process.poll() is not None and server.process is None


def test_a_server_that_stops_or_never_answers_is_one_error_and_left_stopped(monkeypatch):
    stand_ins(monkeypatch, "raise SystemExit(1)")
    with pytest.raises(RuntimeError, match="exited with status 1 before it answered"):
        LocalAPIServer().start(timeout_s=30)
    stand_ins(monkeypatch, "import time; time.sleep(60)")
    server = LocalAPIServer()
    with pytest.raises(RuntimeError, match="did not answer .* within 1 s"):
        server.start(timeout_s=1)
    assert server.process is None


def test_the_launcher_does_not_import_prefects_server_application():
    """The point of the launcher: the process that starts the server does not import its modules."""
    code = (
        "import sys\n"
        "from sagegraph.flows.api_server import LocalAPIServer\n"
        "process = LocalAPIServer()._spawn()\n"
        "process.kill(); process.wait()\n"
        "print('prefect.server.api.server' in sys.modules)"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "False"


def test_the_command_and_environment_are_prefects_own(monkeypatch):
    """The launcher starts what Prefect's own launcher starts for the same port, so a Prefect
    upgrade that changes that command fails here rather than in a user's run."""
    from prefect.server.api import server as prefect_server

    started: list[tuple[list[str], dict[str, str]]] = []

    class Recorded:
        def __init__(self, args, env=None, **kwargs):
            started.append((list(args), dict(env or {})))

    monkeypatch.setattr(subprocess, "Popen", Recorded)
    monkeypatch.setattr(prefect_server.subprocess, "Popen", Recorded)
    port = api_server.free_port()
    LocalAPIServer(port)._spawn()
    prefect_server.SubprocessASGIServer(port)._run_uvicorn_command()
    (ours, our_env), (theirs, their_env) = started
    assert ours == theirs
    assert {k: v for k, v in our_env.items() if k != "PREFECT_SERVER_REGISTER_BLOCKS_ON_START"} == their_env
    assert our_env["PREFECT_SERVER_REGISTER_BLOCKS_ON_START"] == "false"


def test_free_port_says_when_there_is_none(monkeypatch):
    import socket

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        port = taken.getsockname()[1]
        with pytest.raises(RuntimeError, match="no free port"):
            api_server.free_port(range(port, port + 1))
