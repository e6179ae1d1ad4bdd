"""What machine a benchmark ran on, stated in its JSON line."""

from __future__ import annotations

import os
import platform
import threading
import time

import psutil


def machine() -> dict:
    cpu = platform.processor() or ""
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    gpu = None
    try:
        import torch

        if torch.cuda.is_available():
            gpu = torch.cuda.get_device_name(0)
    except Exception:
        pass
    return {
        "cpu": cpu,
        "cores": os.cpu_count(),
        "ram_gb": round(psutil.virtual_memory().total / 2**30, 1),
        "gpu": gpu,
        "python": platform.python_version(),
    }


class PeakMemory:
    """Samples the memory of this process (or of process `pid`) and all its children (Dask
    workers, the Prefect server), and of every graph-store server started since sampling began
    (the embedded FalkorDB's redis-server detaches from its parent, and forks a copy of itself
    for each log rewrite), once a second.

    Two peaks: `peak_mb`, the largest sum of their resident sets, which counts a page shared by
    several processes (libraries mapped by every worker, the rewrite child's copy-on-write pages)
    once per process; and `peak_pss_mb`, the largest sum of their proportional set sizes, which
    counts each such page once, split among its sharers: the memory they take together."""

    STORE_SERVERS = ("redis-",)  # redis-server and the children it forks (redis-aof-rewrite, ...)

    def __init__(self, interval: float = 1.0, pid: int | None = None):
        self.interval = interval
        self.pid = pid
        self.peak_mb = 0.0
        self.peak_pss_mb = 0.0
        self._since = time.time() - 1.0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _processes(self, me: psutil.Process) -> list[psutil.Process]:
        found = {p.pid: p for p in [me, *me.children(recursive=True)]}
        for p in psutil.process_iter(["name", "create_time"]):
            if p.pid not in found and (p.info["name"] or "").startswith(self.STORE_SERVERS):
                if (p.info["create_time"] or 0) >= self._since:
                    found[p.pid] = p
        return list(found.values())

    def _run(self) -> None:
        try:
            me = psutil.Process(self.pid)
        except psutil.Error:
            return
        while not self._stop.is_set():
            rss = pss = 0
            for p in self._processes(me):
                try:
                    info = p.memory_full_info()
                except psutil.Error:
                    continue
                rss += info.rss
                pss += getattr(info, "pss", info.rss)
            self.peak_mb = max(self.peak_mb, rss / 2**20)
            self.peak_pss_mb = max(self.peak_pss_mb, pss / 2**20)
            time.sleep(self.interval)

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join()
