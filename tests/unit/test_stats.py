"""Graph statistics counted in columns, as a Counter over the values counts them."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.parquet as pq

from sagegraph.construct.stats import compute_stats, degree_stats


def test_degrees_count_both_ends_and_isolated_nodes():
    src, dst = pa.chunked_array([["a", "a", "b"]]), pa.chunked_array([["b", "c", "c"]])
    stats = degree_stats(src, dst, pa.chunked_array([["a", "b", "c", "d"]]))
    assert (stats["max"], stats["isolated"], stats["mean"]) == (2, 1, 1.5)
    assert stats["histogram"]["2-4"] == 3 and stats["histogram"]["0-0"] == 1
    empty = pa.chunked_array([], type=pa.string())
    assert degree_stats(empty, empty, pa.chunked_array([["a"]]))["isolated"] == 1


def test_statistics_of_a_graph_on_disk(tmp_path):
    pq.write_table(
        pa.table({"id": ["a", "b", "c"], "modality": ["entity", "entity", "passage"]}), tmp_path / "nodes.parquet"
    )
    edges = {"src": ["a", "a", "b"], "dst": ["b", "c", "c"], "type": ["SIMILAR_CONTENT", "R", "R"]}
    pq.write_table(pa.table(edges), tmp_path / "edges.parquet")
    stats = compute_stats(tmp_path, {})
    assert stats["nodes_by_modality"] == {"entity": 2, "passage": 1}
    assert stats["edges_by_type"] == {"SIMILAR_CONTENT": 1, "R": 2} and stats["similarity_edges"] == 1
    assert stats["degree_similarity"]["isolated"] == 1 and stats["degree_all"]["max"] == 2
