"""Prefect tasks for the graph build; all logic lives in sagegraph.construct.stages."""

from __future__ import annotations

from typing import Any

from prefect import get_run_logger, task
from prefect.cache_policies import NO_CACHE

from sagegraph.config import BuildConfig
from sagegraph.construct import stages
from sagegraph.tasks.console import run_log

# Results are small dicts of paths; resuming is done by the stages' own files, not Prefect caching.
_opts: dict[str, Any] = {"cache_policy": NO_CACHE, "persist_result": False}


def _log(stage: str, res: dict[str, Any], name: str = "") -> None:
    """A batch's line, for Prefect's task log (its UI, `-v`): the console follows the stage's line."""
    state = "reused" if res.get("resumed") else f"{res.get('seconds', 0):.1f}s"
    extra = f", {res['nodes']} nodes" if "nodes" in res else ""
    extra += f", {res['edges']} edges" if "edges" in res else ""
    get_run_logger().info("%s %s done (%s%s)", stage, name, state, extra)


@task(name="ingest", **_opts)
def ingest(cfg: BuildConfig) -> dict[str, Any]:
    res = stages.ingest(cfg)
    run_log().info(
        "ingest: %s in %d batches; skipped records: %s",
        res["counts"],
        len(res["batches"]),
        res["skipped_records"] or "none",
    )
    return res


@task(name="chunk", **_opts)
def chunk(cfg: BuildConfig, batch_path: str) -> dict[str, Any]:
    res = stages.chunk_batch(cfg, batch_path, report=run_log().progress)
    _log("chunk", res, batch_path.rsplit("/", 1)[-1])
    return res


@task(name="estimate-llm-cost", **_opts)
def estimate_cost(cfg: BuildConfig, chunks: list[dict[str, Any]]) -> dict[str, Any]:
    est = stages.estimate_metadata_cost(cfg, [c["path"] for c in chunks])
    run_log().info(
        "LLM metadata estimate: %d calls, ~%d prompt + ~%d completion tokens, ~$%.2f with %s (cached replies "
        "cost nothing)",
        est["calls"],
        est["prompt_tokens"],
        est["completion_tokens"],
        est["estimated_usd"],
        est["model"],
    )
    return est


@task(name="metadata", **_opts)
def metadata(cfg: BuildConfig, chunk_result: dict[str, Any]) -> dict[str, Any]:
    res = stages.metadata_batch(cfg, chunk_result["path"], report=run_log().progress)
    _log("metadata", res, chunk_result["path"].rsplit("/", 1)[-1])
    return res


@task(name="embed", **_opts)
def embed(cfg: BuildConfig, metadata_result: dict[str, Any]) -> dict[str, Any]:
    res = stages.embed_batch(cfg, metadata_result["path"], report=run_log().progress)
    _log("embed", res, metadata_result["path"].rsplit("/", 1)[-1])
    return res


@task(name="batch", **_opts)
def batch(cfg: BuildConfig, batch_path: str) -> dict[str, dict[str, Any]]:
    """Chunk, metadata and embedding of one source batch in one task: a build of a large KB has
    hundreds of batches, and three tasks each cost three times Prefect's per-task overhead."""
    chunked = chunk.fn(cfg, batch_path)
    described = metadata.fn(cfg, chunked)
    return {"chunk": chunked, "metadata": described, "embed": embed.fn(cfg, described)}


@task(name="assemble", **_opts)
def assemble(cfg: BuildConfig, metas: list[dict[str, Any]], vecs: list[dict[str, Any]]) -> dict[str, Any]:
    res = stages.assemble(cfg, [m["path"] for m in metas], [v["path"] for v in vecs])
    _log("assemble", res)
    return res


@task(name="edges", **_opts)
def edges(cfg: BuildConfig, pair: tuple[str, str]) -> dict[str, Any]:
    res = stages.edges_for_pair(cfg, (pair[0], pair[1]))
    _log("edges", res, "-".join(pair))
    return res


@task(name="finalize-edges", **_opts)
def finalize_edges(cfg: BuildConfig, pair_results: list[dict[str, Any]], kb_edges: str) -> dict[str, Any]:
    res = stages.finalize_edges(cfg, [p["path"] for p in pair_results], kb_edges)
    _log("finalize-edges", res)
    return res


@task(name="load-store", **_opts)
def load_store(cfg: BuildConfig) -> dict[str, Any]:
    res = stages.load_store(cfg)
    _log("load-store", res, res.get("backend", ""))
    return res


@task(name="graph-stats", **_opts)
def graph_stats(cfg: BuildConfig, pair_results: list[dict[str, Any]]) -> dict[str, Any]:
    res = stages.graph_stats(cfg, [p["stats"] for p in pair_results])
    _log("graph-stats", res)
    return res


@task(name="edge-variant", **_opts)
def edge_variant(cfg: BuildConfig, overrides: dict[str, Any]) -> str:
    """One edge-setting variant of the built graph (same nodes, rebuilt edges) for a sweep."""
    from sagegraph.construct.variants import build_variant, label

    graph = build_variant(cfg, overrides)
    run_log().info("edge variant %s: %s", label(overrides), graph)
    return str(graph)
