"""The end-to-end half of tests/unit/test_edges.py: servers, subprocesses or whole builds."""

from __future__ import annotations

import numpy as np
import pytest

from sagegraph.config import EdgeConfig
from sagegraph.construct import edges as edge_construction
from sagegraph.model import DOC_CHUNK, TABLE_CHUNK
from tests.unit.test_edges import _synthetic


@pytest.mark.parametrize("ann", ["hnsw", "cluster"])
def test_candidates_grow_linearly_never_all_pairs(ann):
    params = EdgeConfig(top_m=10, ann=ann, entity_max_df=20, cluster_size=64)
    counts = {}
    for n in (1000, 4000):
        modality, source, vectors, Emat, _ = _synthetic(n)
        total = sum(
            edge_construction.similarity_pair(p, modality, source, vectors, Emat, params).n_candidates
            for p in [(DOC_CHUNK, DOC_CHUNK), (DOC_CHUNK, TABLE_CHUNK)]
        )
        counts[n] = total
        # per node: <= top_m per vector signal (x2 directions cross-modally) + entity pairs bounded by max_df
        assert total <= n * (2 * 2 * params.top_m + 2 * params.entity_max_df)
        assert total < n * (n - 1) / 2 / 10
    assert 3.0 <= counts[4000] / counts[1000] <= 5.0


def test_cluster_search_finds_most_true_neighbours_and_auto_picks_flat_for_a_small_side():
    modality, source, vectors, Emat, _ = _synthetic(3000, seed=7)
    x = vectors["content"]
    exact = np.argsort(-(x @ x.T), axis=1)[:, :11]
    approx = edge_construction.cluster_search(x, x, 11, size=64, probes=8)
    recall = np.mean([len(set(approx[i]) & set(exact[i])) / 11 for i in range(len(x))])
    assert 0.85 <= recall <= 1.0 and (approx >= 0).all()
    # one cluster, or probes covering every cluster, is exhaustive search
    assert np.array_equal(
        np.sort(edge_construction.cluster_search(x[:100], x[:200], 5, size=256), axis=1),
        np.sort(np.argsort(-(x[:100] @ x[:200].T), axis=1)[:, :5], axis=1),
    )
    params = EdgeConfig(flat_below=1000)
    assert (
        edge_construction.ann_method(500, 30000, params) == "flat"
        and edge_construction.ann_method(30000, 500, params) == "flat"
    )
    assert (
        edge_construction.ann_method(3000, 3000, params) == "cluster"
        and edge_construction.ann_method(10, 10, EdgeConfig(ann="hnsw")) == "hnsw"
    )
