"""Texts per second of the build's encoder in the workers of sagegraph's local Dask cluster, against
the same encoder in plain one-thread processes side by side, on the same texts: what the cluster's
worker processes cost the encoding, in a minute instead of a whole build.

    .venv/bin/python -m benchmarks.worker_encoding [--texts 4000] [--kb DIR] [--dask-defaults]

The texts are a KB's node names, names with their type, and descriptions (by default the 0.1x
PRIME-shaped KB, where `benchmarks.scale` writes it: work/scale/data-0.1), shuffled with a fixed seed and
split between two workers (two processes) of one thread each, each encoding its half in the
build's windows. `--dask-defaults` starts the workers with Dask's own settings instead of
`flows.runtime.WORKER_SETTINGS`, for the comparison. Prints one JSON line: machine, per worker
texts/s of wall time and per CPU-second of its encoding thread, and the ratio of the workers'
summed rate to the plain processes'.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchmarks.machine import machine
from benchmarks.scale import ROOT, WORK, kb_data, write_kb

WINDOW = 2000  # texts per encode call: about what one build batch of 1,000 KB nodes hands the encoder


def kb_texts(kb: Path, count: int, seed: int = 0) -> list[str]:
    texts = []
    for line in (kb / "nodes.jsonl").read_text(encoding="utf-8").splitlines():
        node = json.loads(line)
        fields = node["fields"]
        texts += [fields["name"], f"{fields['name']} ({node['type']})"]
        if "description" in fields:
            texts.append(fields["description"])
    random.Random(seed).shuffle(texts)
    return texts[:count]


def encode_texts(texts: list[str]) -> dict[str, float]:
    """Encodes `texts` with the build's encoder on one torch thread, the model loaded and warmed
    first; the seconds of wall time and of this thread's CPU."""
    import torch

    from sagegraph.embed import SentenceTransformerEncoder, encode_reporting

    torch.set_num_threads(1)
    encoder = SentenceTransformerEncoder(device="cpu")
    encoder.encode(texts[:64])
    encode = encode_reporting(encoder.encode, lambda line: None, "benchmark", encoder.batch_size)
    started, started_cpu = time.perf_counter(), time.thread_time()
    for at in range(0, len(texts), WINDOW):
        encode(texts[at : at + WINDOW])
    wall, cpu = time.perf_counter() - started, time.thread_time() - started_cpu
    return {"texts": len(texts), "per_s": round(len(texts) / wall, 1), "per_cpu_s": round(len(texts) / cpu, 1)}


def plain_processes(halves: list[list[str]]) -> list[dict]:
    """Each half in its own plain interpreter, all at once."""
    with tempfile.TemporaryDirectory() as folder:
        runs = []
        for index, half in enumerate(halves):
            path = Path(folder) / f"{index}.json"
            path.write_text(json.dumps(half))
            code = (
                "import json, sys; from benchmarks.worker_encoding import encode_texts; "
                "print(json.dumps(encode_texts(json.load(open(sys.argv[1])))))"
            )
            env = {**os.environ, "OMP_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false"}
            runs.append(
                subprocess.Popen([sys.executable, "-c", code, str(path)], stdout=subprocess.PIPE, cwd=ROOT, env=env)
            )
        return [json.loads(run.communicate()[0].decode().strip().splitlines()[-1]) for run in runs]


def cluster_workers(halves: list[list[str]], dask_defaults: bool) -> list[dict]:
    """Each half on its own worker of a cluster made as a build makes it."""
    from distributed import Client, LocalCluster

    from sagegraph.config import RunnerConfig
    from sagegraph.flows.runtime import _local_cluster_kwargs, local_cluster

    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")  # as a build's runtime sets it
    kwargs = _local_cluster_kwargs(RunnerConfig(n_workers=len(halves), threads_per_worker=1))
    make = LocalCluster if dask_defaults else local_cluster
    with make(**kwargs) as cluster, Client(cluster) as client:
        workers = list(client.scheduler_info()["workers"])
        runs = [
            client.submit(encode_texts, half, workers=[worker], pure=False) for half, worker in zip(halves, workers)
        ]
        return client.gather(runs)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--texts", type=int, default=4000)
    parser.add_argument("--kb", type=Path, help="a KB folder (nodes.jsonl); by default the 0.1x PRIME-shaped KB")
    parser.add_argument("--dask-defaults", action="store_true", help="the workers with Dask's own settings")
    args = parser.parse_args()
    kb = args.kb
    if kb is None:
        kb = kb_data(WORK, 0.1)
        write_kb(kb, 0.1)
    texts = kb_texts(kb, args.texts)
    halves = [texts[0::2], texts[1::2]]
    plain = plain_processes(halves)
    workers = cluster_workers(halves, args.dask_defaults)
    line = {
        "benchmark": "worker_encoding",
        "machine": machine(),
        "texts": len(texts),
        "worker_settings": "dask defaults" if args.dask_defaults else "sagegraph",
        "plain_processes": plain,
        "cluster_workers": workers,
        "ratio": round(sum(w["per_s"] for w in workers) / sum(p["per_s"] for p in plain), 3),
    }
    print(json.dumps(line))


if __name__ == "__main__":
    main()
