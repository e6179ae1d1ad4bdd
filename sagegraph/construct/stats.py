"""Graph statistics (sage.txt Tables 3, 5, 17-19): counts by type, degree distribution, per-signal
similarity histograms, thresholds and correlations between signals; JSON plus PNG plots."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from sagegraph.corpus.kb_edges import index_of
from sagegraph.model import SIMILAR_PREFIX


def degree_stats(src: pa.ChunkedArray, dst: pa.ChunkedArray, node_ids: pa.ChunkedArray) -> dict[str, Any]:
    """Counted in columns: a KB of STaRK-PRIME's size has millions of edges."""
    ends = pa.chunked_array(src.chunks + dst.chunks, type=pa.string())
    counted = pc.value_counts(ends).flatten() if len(ends) else None
    d = np.zeros(len(node_ids), dtype=np.int64)
    if counted is not None:
        found = index_of(node_ids, counted[0])
        counts = counted[1].to_numpy()
        d[found >= 0] = counts[found[found >= 0]]
    if len(d) == 0:
        return {"mean": 0.0, "median": 0.0, "max": 0, "isolated": 0, "histogram": {}}
    edges = [0, 1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 10**9]
    hist, _ = np.histogram(d, bins=edges)
    labels = [
        f"{edges[i]}-{edges[i + 1] - 1}" if edges[i + 1] < 10**9 else f">={edges[i]}" for i in range(len(edges) - 1)
    ]
    return {
        "mean": round(float(d.mean()), 3),
        "median": float(np.median(d)),
        "p95": float(np.percentile(d, 95)),
        "max": int(d.max()),
        "isolated": int((d == 0).sum()),
        "histogram": dict(zip(labels, hist.tolist())),
    }


def _counts(column: pa.ChunkedArray) -> dict[str, int]:
    """Value -> count, in first-seen order (as a Counter over the values gave)."""
    if not len(column):
        return {}
    counted = pc.value_counts(column).flatten()
    return dict(zip(counted[0].to_pylist(), counted[1].to_pylist()))


def signal_stats(values: np.ndarray, signals: list[str], thresholds: np.ndarray, keep: np.ndarray) -> dict[str, Any]:
    out: dict[str, Any] = {
        "candidates": int(len(values)),
        "kept": int(keep.sum()),
        "kept_share": round(float(keep.mean()) if len(keep) else 0.0, 4),
        "signals": {},
    }
    for k, s in enumerate(signals):
        v = values[:, k]
        hist, bins = np.histogram(v, bins=20) if len(v) else (np.zeros(0), np.zeros(0))
        out["signals"][s] = {
            "threshold": round(float(thresholds[k]), 4),
            "mean": round(float(v.mean()), 4) if len(v) else None,
            "std": round(float(v.std()), 4) if len(v) else None,
            "above_threshold": int((v > thresholds[k]).sum()),
            "histogram": {"counts": hist.tolist(), "bins": [round(float(b), 4) for b in bins]},
        }
    if len(values) > 2 and len(signals) > 1:
        with np.errstate(invalid="ignore", divide="ignore"):
            corr = np.corrcoef(values.T)
        out["correlation"] = {
            a: {b: (None if np.isnan(corr[i, j]) else round(float(corr[i, j]), 3)) for j, b in enumerate(signals)}
            for i, a in enumerate(signals)
        }
    return out


def compute_stats(graph_dir: Path, pair_stats: dict[str, Path]) -> dict[str, Any]:
    nodes = pq.read_table(graph_dir / "nodes.parquet", columns=["id", "modality"])
    edges = pq.read_table(graph_dir / "edges.parquet", columns=["src", "dst", "type"])
    node_ids = nodes.column("id")
    sim = pc.starts_with(edges.column("type"), SIMILAR_PREFIX)
    similar = edges.filter(sim)
    n = len(node_ids)
    stats: dict[str, Any] = {
        "nodes": n,
        "nodes_by_modality": _counts(nodes.column("modality")),
        "edges": edges.num_rows,
        "edges_by_type": _counts(edges.column("type")),
        "similarity_edges": similar.num_rows,
        "density": round(2 * edges.num_rows / (n * (n - 1)), 8) if n > 1 else 0.0,
        "degree_all": degree_stats(edges.column("src"), edges.column("dst"), node_ids),
        "degree_similarity": degree_stats(similar.column("src"), similar.column("dst"), node_ids),
        "pairs": {},
    }
    for name, path in pair_stats.items():
        z = np.load(path)
        stats["pairs"][name] = signal_stats(z["values"], [str(s) for s in z["signals"]], z["thresholds"], z["keep"])
    return stats


def plot_stats(stats: dict[str, Any], pair_stats: dict[str, Path], out_dir: Path) -> list[Path]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    out_dir.mkdir(parents=True, exist_ok=True)
    paths = []
    fig, ax = plt.subplots(figsize=(7, 4))
    h = stats["degree_all"]["histogram"]
    ax.bar(list(h.keys()), list(h.values()), color="#4c72b0", label="all edges")
    hs = stats["degree_similarity"]["histogram"]
    ax.bar(list(hs.keys()), list(hs.values()), color="#dd8452", alpha=0.7, label="similarity edges")
    ax.set_xlabel("degree")
    ax.set_ylabel("nodes")
    ax.set_title("Degree distribution")
    ax.legend()
    plt.setp(ax.get_xticklabels(), rotation=45)
    fig.tight_layout()
    paths.append(out_dir / "degree_histogram.png")
    fig.savefig(paths[-1], dpi=110)
    plt.close(fig)
    for name, path in pair_stats.items():
        z = np.load(path)
        values, sigs, thr = z["values"], [str(s) for s in z["signals"]], z["thresholds"]
        if len(values) == 0:
            continue
        fig, axes = plt.subplots(1, len(sigs), figsize=(4 * len(sigs), 3.2), squeeze=False)
        for k, s in enumerate(sigs):
            ax = axes[0][k]
            ax.hist(values[:, k], bins=40, color="#55a868")
            ax.axvline(thr[k], color="red", linestyle="--", label=f"p-threshold {thr[k]:.3f}")
            ax.set_title(f"{name}: {s}")
            ax.legend(fontsize=7)
        fig.tight_layout()
        paths.append(out_dir / f"similarity_{name}.png")
        fig.savefig(paths[-1], dpi=110)
        plt.close(fig)
    return paths
