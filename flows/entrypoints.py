"""Flows that deployments run: they take file paths (what a schedule can pass) and run the build
or the sweep with the Dask task runner from config."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from prefect import flow

from sagegraph.config import RunnerConfig, load_config
from sagegraph.eval.sweep import load_sweep
from sagegraph.flows.build_graph import build_graph
from sagegraph.flows.runtime import apply_env_defaults, dask_runner
from sagegraph.flows.sweep import ensure_graph, sweep


@flow(name="rebuild-graph")
def rebuild(config: str = "conf/ottqa.yaml", max_sources: int | None = None) -> dict[str, Any]:
    cfg = load_config(Path(config), max_sources=max_sources)
    apply_env_defaults(cfg.out)
    return build_graph.with_options(task_runner=dask_runner(cfg.runner))(cfg)


@flow(name="run-sweep")
def run_sweep(sweep_file: str = "conf/sweep_ottqa.yaml", workers: int = 2) -> dict[str, Any]:
    cfg = load_sweep(Path(sweep_file))
    apply_env_defaults(cfg.out)
    ensure_graph(cfg)
    return sweep.with_options(task_runner=dask_runner(RunnerConfig(n_workers=workers)))(cfg)
