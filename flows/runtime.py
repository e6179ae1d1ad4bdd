"""How flows run: quiet, offline-safe environment defaults; one local Prefect API server for the
whole run (instead of one ephemeral server per Dask worker); the Dask task runner from config."""

from __future__ import annotations

import contextlib
import logging
import os
import subprocess
import sys
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any

from sagegraph.config import RunnerConfig
from sagegraph.construct.changes import ChangeSet

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
    """Set defaults without overriding what the user exported; Prefect's home lives in the work dir,
    which must be sagegraph's (`ownership.claim`) before it is written."""
    from sagegraph.ownership import claim, mark

    claim(work_dir)
    for key, value in ENV_DEFAULTS.items():
        os.environ.setdefault(key, value)
    os.environ.setdefault("PREFECT_HOME", str(Path(work_dir).resolve() / ".prefect"))
    Path(os.environ["PREFECT_HOME"]).mkdir(parents=True, exist_ok=True)
    mark(work_dir)


@contextlib.contextmanager
def reaped() -> Iterator[None]:
    """While the block runs, a watcher (`sagegraph.flows.reaper`) stands ready to stop this process's helper
    processes (the API server, Dask workers) if this process is killed before it can. One watcher
    a process: nested blocks share it."""
    global _watching
    if _watching:
        yield
        return
    _watching = True
    import uuid

    from sagegraph.flows.reaper import TOKEN_VAR

    token = uuid.uuid4().hex
    before = os.environ.get(TOKEN_VAR)
    os.environ[TOKEN_VAR] = token  # inherited by every helper started in the block
    watcher = subprocess.Popen(
        [sys.executable, "-m", "sagegraph.flows.reaper", str(os.getpid()), token],
        start_new_session=True,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        yield
    finally:
        _watching = False
        if before is None:
            os.environ.pop(TOKEN_VAR, None)
        else:
            os.environ[TOKEN_VAR] = before
        watcher.terminate()
        with contextlib.suppress(subprocess.TimeoutExpired):
            watcher.wait(timeout=5)


_watching = False


def require_prefect_api(url: str, timeout_s: float = 10.0) -> None:
    """One line (InfraError) when the Prefect server at `url` does not answer its health check:
    otherwise the first flow run failed deep in Prefect's client with a traceback."""
    import httpx

    from sagegraph.errors import InfraError

    try:
        httpx.get(url.rstrip("/") + "/health", timeout=timeout_s).raise_for_status()
    except httpx.HTTPError as exc:
        raise InfraError(
            f"PREFECT_API_URL={url} does not answer ({type(exc).__name__}: {exc}); start that server, "
            "or unset PREFECT_API_URL to run with a temporary one"
        ) from None


@contextlib.contextmanager
def prefect_api(work_dir: Path, on_url: Callable[[str], None] | None = None) -> Iterator[str | None]:
    """Use the user's server when PREFECT_API_URL is set; otherwise start one local server for the
    run, so that Dask workers share it (each would otherwise start its own temporary server).

    `on_url` runs once the API address is known and exported, before the local server has started
    (7-8 s here): a caller can start its Dask workers meanwhile, and they inherit the address.
    """
    apply_env_defaults(work_dir)
    if os.environ.get("PREFECT_API_URL"):
        require_prefect_api(os.environ["PREFECT_API_URL"])
        if on_url:
            on_url(os.environ["PREFECT_API_URL"])
        yield os.environ["PREFECT_API_URL"]
        return
    from prefect.settings import PREFECT_API_URL, temporary_settings

    from sagegraph.flows.api_server import LocalAPIServer
    from sagegraph.flows.prefect_db import seed_home

    seed_home(Path(os.environ["PREFECT_HOME"]))  # a new home's database without running every migration
    server = LocalAPIServer()
    os.environ["PREFECT_API_URL"] = server.api_url  # inherited by Dask worker processes
    with reaped():
        try:
            if on_url:
                on_url(server.api_url)
            server.start(timeout_s=float(os.environ["PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS"]))
            os.environ["PREFECT_API_URL"] = server.api_url  # start() moves to another port if that one got taken
            with temporary_settings(updates={PREFECT_API_URL: server.api_url}):
                yield server.api_url
        finally:
            from prefect.logging.handlers import APILogWorker

            APILogWorker.drain_all(timeout=5)  # ship the last log lines before the server goes away
            os.environ.pop("PREFECT_API_URL", None)
            server.stop()


# Settings of the workers of a LocalCluster that sagegraph starts; the workers of a user's own
# scheduler (runner.dask_address) keep theirs. Given as Dask config while the cluster is made: a
# worker takes its nanny's config over what it would read from the environment.
WORKER_SETTINGS: dict[str, Any] = {
    # The statistical profiler samples a worker's task thread every 10 ms and folds the samples on
    # the worker's event loop, a tenth of a core beside a build's encoding; nothing reads them.
    "distributed.worker.profile.enabled": False,
    # The nanny exports MALLOC_TRIM_THRESHOLD_=65536 before it spawns a worker, to hand freed memory
    # back to the OS sooner. Setting it at all fixes glibc's mmap threshold at 128 KiB, so each
    # batch's activations are mapped, faulted in and unmapped again: a worker encoded at 0.6-0.7x of
    # a plain process (benchmarks.worker_encoding). None leaves glibc's own thresholds (or the value the user exported).
    "distributed.nanny.pre-spawn-environ.MALLOC_TRIM_THRESHOLD_": None,
}


def _local_cluster_kwargs(cfg: RunnerConfig) -> dict[str, Any]:
    """LocalCluster settings, after exporting what its worker processes inherit."""
    # One torch thread per worker thread: 2 processes x 1 thread beat 1 x 2 on a 2-core CPU.
    os.environ["SAGEGRAPH_TORCH_THREADS"] = str(cfg.threads_per_worker)
    os.environ.setdefault("OMP_NUM_THREADS", str(cfg.threads_per_worker))
    return {
        "n_workers": cfg.n_workers,
        "threads_per_worker": cfg.threads_per_worker,
        "processes": True,
        "dashboard_address": None,
    }


def local_cluster(**kwargs: Any):
    """A LocalCluster whose workers run with `WORKER_SETTINGS`: its nannies take the config as it
    is while they are made, and use it for every worker they start or restart."""
    import dask.config
    from distributed import LocalCluster

    with dask.config.set(WORKER_SETTINGS):
        return LocalCluster(**kwargs)


def fans_out(changes: ChangeSet | None, cfg: RunnerConfig) -> bool:
    """Whether a build is worth a Prefect server and Dask workers: a first build, an existing
    scheduler, or a change that fills more than one batch per worker. A smaller change runs in
    this process (`construct.inprocess`): its batches are mostly found in the embedding cache,
    and starting the server and the workers (about 25 s here) would cost more than the work."""
    if changes is None or changes.first_build or cfg.dask_address:
        return True
    return changes.sources_to_redo() > cfg.n_workers * cfg.batch_size


def dask_runner(cfg: RunnerConfig):
    """DaskTaskRunner on an existing scheduler (runner.dask_address) or a LocalCluster of processes
    that Prefect starts at the flow's first submitted task."""
    from prefect_dask import DaskTaskRunner

    if cfg.dask_address:
        return DaskTaskRunner(address=cfg.dask_address)
    return DaskTaskRunner(cluster_class=local_cluster, cluster_kwargs=_local_cluster_kwargs(cfg))


# How long a worker process may take to exit once asked to. Nanny.close's own 5 s (of which it
# waits 4) is less than a worker that held a large KB's tables takes to exit beside other work on
# a 2-core machine; past it the nanny kills the process and logs a warning, after the run's work
# was all done and written.
WORKER_EXIT_S = 30.0


def close_cluster(cluster: Any) -> None:
    """Close a LocalCluster, its workers first, each given `WORKER_EXIT_S` to exit (the cluster's
    own close would give them 4 s); a worker still there after that is killed as before."""
    import asyncio

    async def close_workers() -> None:
        await asyncio.gather(*(worker.close(timeout=WORKER_EXIT_S) for worker in list(cluster.workers.values())))

    with contextlib.suppress(Exception):  # the cluster's own close below stops whatever this left
        cluster.sync(close_workers)
    cluster.close()


def _local_cluster(cfg: RunnerConfig, warm: Callable[[], Any] | None):
    from distributed import Client

    cluster = local_cluster(**_local_cluster_kwargs(cfg))
    if warm is not None:
        try:
            with Client(cluster) as client:
                client.run(warm)
        except Exception:
            close_cluster(cluster)
            raise
    return cluster


@contextlib.contextmanager
def flow_runtime(
    work_dir: Path, cfg: RunnerConfig, warm: Callable[[], Any] | None = None
) -> Iterator[tuple[str | None, Any]]:
    """(API address, Dask task runner) for one run, the API server and the Dask cluster started side
    by side rather than one after the other.

    With a local cluster, `warm` runs on every worker while the API server starts (for a build: the
    imports and the embedding model, ~6 s per worker that the first batch would otherwise wait for).
    An existing scheduler (runner.dask_address) is used as it is.
    """
    apply_env_defaults(work_dir)  # before Dask is imported: it reads its logging settings then
    with reaped():
        yield from _flow_runtime(work_dir, cfg, warm)


def _flow_runtime(
    work_dir: Path, cfg: RunnerConfig, warm: Callable[[], Any] | None
) -> Iterator[tuple[str | None, Any]]:
    from prefect_dask import DaskTaskRunner

    if cfg.dask_address:
        with prefect_api(work_dir) as api:
            yield api, DaskTaskRunner(address=cfg.dask_address)
        return
    starting: list[tuple[str, Future]] = []
    with ThreadPoolExecutor(1, thread_name_prefix="dask-start") as pool:

        def start(url: str) -> None:
            starting.append((url, pool.submit(_local_cluster, cfg, warm)))

        taken = False
        try:
            with prefect_api(work_dir, on_url=start) as api:
                url, future = starting[0]
                cluster, taken = future.result(), True
                try:
                    if api != url:  # the server had to move: the workers must know its new address
                        close_cluster(cluster)
                        cluster = _local_cluster(cfg, warm)
                    yield api, DaskTaskRunner(address=cluster.scheduler_address)
                finally:
                    close_cluster(cluster)  # before the API server stops, so no worker logs into the void
        finally:
            if starting and not taken:  # the API server failed to start: wait for the workers, then stop them
                with contextlib.suppress(Exception):
                    close_cluster(starting[0][1].result())
