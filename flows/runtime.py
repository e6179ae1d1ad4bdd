"""How flows run: quiet, offline-safe environment defaults; one local Prefect API server for the
whole run (instead of one ephemeral server per Dask worker); the Dask task runner from config."""

from __future__ import annotations

import contextlib
import logging
import os
from pathlib import Path
from typing import Iterator

from sagegraph.config import RunnerConfig

log = logging.getLogger("sagegraph.runtime")

ENV_DEFAULTS = {
    "DO_NOT_TRACK": "true",
    "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
    "MLFLOW_DISABLE_TELEMETRY": "true",
    "HF_HUB_OFFLINE": "1",
    "TRANSFORMERS_OFFLINE": "1",
    "TOKENIZERS_PARALLELISM": "false",
    # Ephemeral start took 13-26 s on these machines; Prefect's default timeout is shorter.
    "PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS": "120",
    "PREFECT_LOGGING_EXTRA_LOGGERS": "sagegraph",
    "DASK_LOGGING__DISTRIBUTED": "warning",
}


def apply_env_defaults(work_dir: Path) -> None:
    """Set defaults without overriding what the user exported; Prefect's home lives in the work dir."""
    for key, value in ENV_DEFAULTS.items():
        os.environ.setdefault(key, value)
    os.environ.setdefault("PREFECT_HOME", str(Path(work_dir).resolve() / ".prefect"))
    Path(os.environ["PREFECT_HOME"]).mkdir(parents=True, exist_ok=True)


@contextlib.contextmanager
def prefect_api(work_dir: Path) -> Iterator[str | None]:
    """Use the user's server when PREFECT_API_URL is set; otherwise start one local server for the
    run, so that Dask workers share it (each would otherwise start its own temporary server)."""
    apply_env_defaults(work_dir)
    if os.environ.get("PREFECT_API_URL"):
        yield os.environ["PREFECT_API_URL"]
        return
    from prefect.server.api.server import SubprocessASGIServer
    from prefect.settings import PREFECT_API_URL, temporary_settings

    server = SubprocessASGIServer()
    server.start(timeout=int(os.environ["PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS"]))
    os.environ["PREFECT_API_URL"] = server.api_url  # inherited by Dask worker processes
    try:
        with temporary_settings(updates={PREFECT_API_URL: server.api_url}):
            yield server.api_url
    finally:
        from prefect.logging.handlers import APILogWorker

        APILogWorker.drain_all(timeout=5)  # ship the last log lines before the server goes away
        os.environ.pop("PREFECT_API_URL", None)
        server.stop()


def dask_runner(cfg: RunnerConfig):
    """DaskTaskRunner on an existing scheduler (runner.dask_address) or a LocalCluster of processes."""
    from prefect_dask import DaskTaskRunner

    if cfg.dask_address:
        return DaskTaskRunner(address=cfg.dask_address)
    # One torch thread per worker thread: 2 processes x 1 thread beat 1 x 2 on a 2-core CPU.
    os.environ["SAGEGRAPH_TORCH_THREADS"] = str(cfg.threads_per_worker)
    os.environ.setdefault("OMP_NUM_THREADS", str(cfg.threads_per_worker))
    return DaskTaskRunner(
        cluster_kwargs={"n_workers": cfg.n_workers, "threads_per_worker": cfg.threads_per_worker, "processes": True, "dashboard_address": None}
    )
