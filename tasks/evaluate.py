"""Prefect tasks for evaluation and sweeps; logic lives in sagegraph.eval."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from prefect import task
from prefect.cache_policies import NO_CACHE

from sagegraph.eval import sweep_steps
from sagegraph.tasks.console import run_log

_opts: dict[str, Any] = {"cache_policy": NO_CACHE, "persist_result": False}


@task(name="prepare-retrieval", **_opts)
def prepare(graph_dir: str, questions_path: str, out: str, cfgs: Sequence[dict[str, Any]] = ()) -> str:
    """BM25, what each configuration's retriever reads beside the graph, and every question's vector,
    once before the fan-out (`eval.sweep_steps.prepare`)."""
    return sweep_steps.prepare(graph_dir, questions_path, out, cfgs, report=run_log().info)


@task(name="evaluate-group", **_opts)
def evaluate_configs(
    graph_dir: str,
    questions_path: str,
    qvec_path: str,
    cfgs: list[dict[str, Any]],
    out_root: str,
    llm: dict[str, Any] | None = None,
    concurrency: int = 1,
    timeout_s: float | None = None,
) -> list[dict[str, Any]]:
    """One group of configurations (`eval.sweep_steps.evaluate_configs`); its progress in the
    flow's log and UI."""
    log = run_log()
    return sweep_steps.evaluate_configs(
        graph_dir,
        questions_path,
        qvec_path,
        cfgs,
        out_root,
        llm,
        concurrency,
        timeout_s,
        report=log.info,
        progress=log.progress,
    )
