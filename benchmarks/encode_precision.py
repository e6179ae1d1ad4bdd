"""fp32 against bf16 encoding of real OTT-QA sentence windows: speed and what changes downstream.

    .venv/bin/python -m benchmarks.encode_precision [--docs 600] [--threads 1]

Encodes the windows of the first --docs passages that chunking would encode, once per precision,
on one thread by default (as each build worker does). Prints one JSON line: machine, windows and
tokens per second per precision, cosine between the two vectors of each window, the share of
documents chunked identically, and top-10 neighbour overlap among the windows.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np

from benchmarks.machine import machine
from sagegraph.config import CorpusConfig
from sagegraph.construct.chunking import (
    adjacent_similarities,
    cut_can_survive,
    percentile_threshold,
    segment,
    window_texts,
)
from sagegraph.corpus.jsonl import ErrorPolicy
from sagegraph.corpus.ottqa import PASSAGES, load_records, parse_passage
from sagegraph.embed import SentenceTransformerEncoder, _cpu_has_bf16
from sagegraph.index.sentences import split_sentences


def _chunks(docs: list[list[str]], vecs: np.ndarray, spans: list[tuple[int, int]]) -> list[list[str]]:
    out = []
    for sents, (a, b) in zip(docs, spans):
        sims = adjacent_similarities(vecs[a:b])
        out.append(segment(sents, sims, percentile_threshold(sims, 20.0), 200, 2000))
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--data", type=Path, default=None, help="OTT-QA dir (default: ../shared/data/ottqa-dev)")
    ap.add_argument("--docs", type=int, default=600)
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args()
    import torch

    torch.set_num_threads(args.threads)
    root = args.data or CorpusConfig().resolved_path()
    docs, windows, spans = [], [], []
    for p in load_records(root / PASSAGES, parse_passage, ErrorPolicy()):
        sents = split_sentences(p.text) or [p.text]
        if cut_can_survive(sents, 200, 2000):
            spans.append((len(windows), len(windows) + len(sents)))
            windows.extend(window_texts(sents))
            docs.append(sents)
        if len(docs) >= args.docs:
            break
    result: dict = {
        "benchmark": "encode_precision",
        "machine": machine(),
        "cpu_native_bf16": _cpu_has_bf16(),
        "threads": args.threads,
        "docs": len(docs),
        "windows": len(windows),
    }
    vecs = {}
    for precision in ("fp32", "bf16"):
        enc = SentenceTransformerEncoder(device="cpu", precision=precision)
        enc.encode(windows[:64])  # load and warm up outside the timing
        tokens = sum(len(ids) for ids in enc.model.tokenizer(windows)["input_ids"])
        t0 = time.perf_counter()
        vecs[precision] = enc.encode(windows)
        sec = time.perf_counter() - t0
        result[precision] = {
            "seconds": round(sec, 2),
            "windows_per_s": round(len(windows) / sec, 1),
            "tokens_per_s": round(tokens / sec),
        }
    a, b = vecs["fp32"], vecs["bf16"]
    cos = (a * b).sum(1)
    same = [x == y for x, y in zip(_chunks(docs, a, spans), _chunks(docs, b, spans))]
    k = 10
    top_a = np.argsort(-(a @ a.T), axis=1)[:, 1 : k + 1]
    top_b = np.argsort(-(b @ b.T), axis=1)[:, 1 : k + 1]
    overlap = np.mean([len(set(x) & set(y)) / k for x, y in zip(top_a, top_b)])
    result.update(
        {
            "speedup_bf16": round(result["fp32"]["seconds"] / result["bf16"]["seconds"], 2),
            "cosine_fp32_bf16": {
                "min": round(float(cos.min()), 6),
                "p01": round(float(np.percentile(cos, 1)), 6),
                "mean": round(float(cos.mean()), 6),
            },
            "docs_chunked_identically": round(float(np.mean(same)), 4),
            "top10_neighbour_overlap": round(float(overlap), 4),
        }
    )
    print(json.dumps(result))


if __name__ == "__main__":
    main()
