"""A KB rebuild after 1% of its objects were removed: the store written as the difference from the
published generation (`store.update: difference`), against loading the same new graph whole,
measured in one run.

    .venv/bin/python -m benchmarks.rebuild_kb_changed [--kb data/kb-synth] [--drop 0.01]
        [--cache work/kb-synth/cache] [--out work/bench-rebuild-kb] [--update difference]

Copies the KB (`sagegraph data synth-kb` writes the default) into `--out`, builds it through the
Prefect flow with the embedded store, removes a random `--drop` share of its objects (seed 0) with
their edges, and builds again: the rebuild recomputes the edges whole (thresholds included) and
writes the store graph as the difference. Then the new generation is loaded whole into a scratch
graph of the same store, for the ratio, and the published store graph is compared with the
generation's files, node for node and edge for edge (metadata included). `--cache` copies an
embedding cache first, so no object is encoded again (say so when you report it). One JSON line.
"""

from __future__ import annotations

import argparse
import json
import random
import shutil
import time
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq

from benchmarks.machine import machine
from benchmarks.rebuild_changed import _build
from sagegraph.ownership import mark


def _drop(kb: Path, share: float) -> int:
    nodes = [json.loads(line) for line in (kb / "nodes.jsonl").open(encoding="utf-8")]
    random.seed(0)
    gone = {n["id"] for n in random.sample(nodes, int(len(nodes) * share))}
    (kb / "nodes.jsonl").write_text(
        "".join(json.dumps(n) + "\n" for n in nodes if n["id"] not in gone), encoding="utf-8"
    )
    edges = [json.loads(line) for line in (kb / "edges.jsonl").open(encoding="utf-8")]
    (kb / "edges.jsonl").write_text(
        "".join(json.dumps(e) + "\n" for e in edges if e["src"] not in gone and e["dst"] not in gone), encoding="utf-8"
    )
    return len(gone)


def _load_whole(store_dir: Path, gen: Path, batch: int) -> float:
    """What `load_store` does without a base, into a scratch store graph."""
    from sagegraph.model import read_nodes
    from sagegraph.store import open_store

    with open_store("falkordb", store_dir, "scratch-whole") as s:
        t0 = time.perf_counter()
        nodes, vectors, edges = (
            read_nodes(gen / "nodes.parquet"),
            np.load(gen / "vectors" / "content.npy"),
            pq.read_table(gen / "edges.parquet"),
        )
        s.ensure_indexes(None)
        s.load_nodes(nodes, vectors, batch, create=True)
        s.load_edge_table(edges, batch, create=True)
        assert (s.count_nodes(), s.count_edges()) == (len(nodes), edges.num_rows)
        seconds = time.perf_counter() - t0
        s.clear()
    return seconds


def _store_equals_generation(store_dir: Path, key: str, gen: Path) -> bool:
    from sagegraph.store import open_store

    with open_store("falkordb", store_dir, key) as s:
        ids = sorted(r["id"] for r in s.read("MATCH (n) RETURN n.id AS id", max_rows=10**7, timeout_ms=600_000))
        edges = sorted(
            (r["a"], r["t"], r["b"], round(r["w"], 6), r["m"])
            for r in s.read(
                "MATCH (a)-[r]->(b) RETURN a.id AS a, type(r) AS t, b.id AS b, r.weight AS w, r.metadata AS m",
                max_rows=10**7,
                timeout_ms=600_000,
            )
        )
    table = pq.read_table(gen / "edges.parquet").to_pylist()
    want = sorted((e["src"], e["type"], e["dst"], round(e["weight"], 6), e["metadata"] or "{}") for e in table)
    return ids == sorted(pq.read_table(gen / "nodes.parquet").column("id").to_pylist()) and edges == want


def main() -> None:
    import yaml

    ap = argparse.ArgumentParser()
    ap.add_argument("--kb", default="data/kb-synth")
    ap.add_argument("--drop", type=float, default=0.01)
    ap.add_argument(
        "--cache", default=None, help="an embedding cache dir to start from (OUT/cache of an earlier build)"
    )
    ap.add_argument("--out", default="work/bench-rebuild-kb")
    ap.add_argument(
        "--update", default="difference", choices=["difference", "whole", "auto"], help="store.update of the build"
    )
    args = ap.parse_args()
    root = Path(args.out).resolve()
    if root.exists():
        shutil.rmtree(root)
    kb = root / "kb"
    shutil.copytree(args.kb, kb, ignore=shutil.ignore_patterns("questions*"))
    if args.cache:
        (root / "out").mkdir()
        mark(root / "out")  # made here: the copied cache is then sagegraph's own
        shutil.copytree(args.cache, root / "out" / "cache", ignore=shutil.ignore_patterns("llm.sqlite*", "inflight"))
    cfg = root / "kb.yaml"
    cfg.write_text(
        yaml.safe_dump(
            {
                "name": "bench-kb",
                "out": str(root / "out"),
                "corpus": {"kind": "kb", "path": str(kb)},
                "store": {"update": args.update},
            }
        )
    )
    first, first_s = _build(cfg)
    dropped = _drop(kb, args.drop)
    second, second_s = _build(cfg)
    store = second["store"]
    gen = Path(second["graph"]).resolve()
    whole_s = _load_whole(Path(store["path"]), gen, 1000)
    print(
        json.dumps(
            {
                "benchmark": "rebuild_kb_changed",
                "machine": machine(),
                "kb": args.kb,
                "dropped_objects": dropped,
                "embedding_cache": bool(args.cache),
                "update": args.update,
                "first_build": {
                    "seconds": first_s,
                    "store_seconds": round(first["store"]["seconds"], 1),
                    "nodes": first["counts"]["nodes"],
                    "edges": first["edges"],
                },
                "rebuild": {
                    "seconds": second_s,
                    "stage_seconds": second["stage_seconds"],
                    "changes": (second.get("changes") or {}).get("counts"),
                    "store": {
                        k: store.get(k) for k in ("mode", "seconds", "rows_written", "difference", "nodes", "edges")
                    },
                },
                "store_whole_seconds": round(whole_s, 1),
                "store_difference_over_whole": round(store["seconds"] / whole_s, 3),
                "store_equals_generation": _store_equals_generation(Path(store["path"]), store["graph"], gen),
            }
        )
    )


if __name__ == "__main__":
    main()
