"""The build's model-bound stages (chunk, metadata, embed) in one process, on the device given:
the figure for a GPU host, where the whole build is no longer bound by the model.

    .venv/bin/python -m benchmarks.embed_stage [--device auto] [--precisions fp32,bf16] [--max-sources N]

Runs the same stage functions the flow maps over batches (sagegraph.construct.stages), serially, from
an empty embedding cache, once per precision. Prints one JSON line: machine, per precision the
seconds of each stage and of model encode, texts encoded per second, peak GPU memory; and, between
the first precision and each other one, the share of chunks that came out identical (content-hash
ids) and the cosine between the vectors of identical chunks.
"""

from __future__ import annotations

import argparse
import json
import shutil
import time
from pathlib import Path

import numpy as np

from benchmarks.machine import PeakMemory, machine
from sagegraph.config import load_config
from sagegraph.construct import stages
from sagegraph.model import read_nodes


def _gpu_peak_mb() -> float | None:
    import torch

    return round(torch.cuda.max_memory_allocated() / 2**20) if torch.cuda.is_available() else None


def run_stages(cfg) -> tuple[dict, dict[str, np.ndarray]]:
    enc = stages.get_encoder(cfg)
    inner = getattr(enc, "inner", enc)
    t0 = time.perf_counter()
    inner.encode(["warm up the model and the device"] * 8)  # model load and CUDA init, outside the timings
    load_seconds = time.perf_counter() - t0
    inner.encode_seconds, inner.encoded = 0.0, 0
    seconds = {"ingest": 0.0, "chunk": 0.0, "metadata": 0.0, "embed": 0.0}
    t = time.perf_counter()
    batches = stages.ingest(cfg)["batches"]
    seconds["ingest"] = time.perf_counter() - t
    chunk_encoded = 0
    vectors: dict[str, np.ndarray] = {}
    for batch in batches:
        t, before = time.perf_counter(), inner.encoded
        chunks = stages.chunk_batch(cfg, batch)["path"]
        seconds["chunk"] += time.perf_counter() - t
        chunk_encoded += inner.encoded - before
        t = time.perf_counter()
        meta = stages.metadata_batch(cfg, chunks)["path"]
        seconds["metadata"] += time.perf_counter() - t
        t = time.perf_counter()
        vec_path = stages.embed_batch(cfg, meta)["path"]
        seconds["embed"] += time.perf_counter() - t
        ids = [n.id for n in read_nodes(Path(meta))]
        with np.load(vec_path) as z:
            vectors.update(zip(ids, z["content"]))
    total = sum(seconds.values())
    encoded = inner.encoded
    return {
        "device": inner.device,
        "precision": inner.precision,
        "batch_size": inner.batch_size,
        "model_load_seconds": round(load_seconds, 2),
        "stage_seconds": {k: round(v, 2) for k, v in seconds.items()},
        "total_seconds": round(total, 2),
        "encode_seconds": round(inner.encode_seconds, 2),
        "encode_share": round(inner.encode_seconds / total, 3) if total else None,
        "texts_encoded": encoded,
        "texts_encoded_in_chunking": chunk_encoded,
        "texts_per_encode_second": round(encoded / inner.encode_seconds) if inner.encode_seconds else None,
        "nodes": len(vectors),
        "gpu_peak_mb": _gpu_peak_mb(),
    }, vectors


def compare(a: dict[str, np.ndarray], b: dict[str, np.ndarray]) -> dict:
    same = sorted(set(a) & set(b))
    cos = np.array([float(a[i] @ b[i]) for i in same]) if same else np.zeros(0)
    return {
        "chunks_identical": round(len(same) / max(len(a), 1), 4),
        "cosine_min": round(float(cos.min()), 6) if len(cos) else None,
        "cosine_mean": round(float(cos.mean()), 6) if len(cos) else None,
    }


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--config", default="conf/ottqa.yaml")
    ap.add_argument("--data", type=Path, default=None, help="OTT-QA dir (default: the config's)")
    ap.add_argument("--out", default="work/bench-embed")
    ap.add_argument("--max-sources", type=int)
    ap.add_argument("--device", default="auto", choices=["auto", "cpu", "cuda"])
    ap.add_argument("--precisions", default="fp32,bf16")
    ap.add_argument("--batch-size", type=int)
    args = ap.parse_args()

    runs, vectors = {}, {}
    with PeakMemory() as mem:
        for precision in args.precisions.split(","):
            cfg = load_config(
                args.config, out=Path(args.out) / precision, max_sources=args.max_sources, metadata="heuristic"
            )
            if args.data:
                cfg.corpus.path = args.data
            cfg.embedding.device, cfg.embedding.precision, cfg.embedding.batch_size = (
                args.device,
                precision,
                args.batch_size,
            )
            if cfg.out.exists():
                shutil.rmtree(cfg.out)  # empty embedding cache: every text is encoded
            runs[precision], vectors[precision] = run_stages(cfg)
    first, *others = list(runs)
    summary = {
        "benchmark": "embed_stage",
        "machine": machine(),
        "sources": args.max_sources or "all",
        "runs": runs,
        "against_" + first: {p: compare(vectors[first], vectors[p]) for p in others},
        "peak_rss_mb": round(mem.peak_mb),
    }
    print(json.dumps(summary))


if __name__ == "__main__":
    main()
