"""The `sweep` flow: (build if needed) -> prepare indexes and question vectors -> evaluation groups
fanned out on Dask (seeds computed once per group and reused across k') -> MLflow parent run with a
child per configuration, a summary table and the Recall@k plot (SAGE Fig. 4)."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from prefect import flow, unmapped
from prefect.futures import PrefectFuture, as_completed

from sagegraph.config import BuildConfig
from sagegraph.construct.variants import base_config_of, label
from sagegraph.eval.runner import EvalConfig
from sagegraph.eval.sweep import (
    SweepConfig,
    graph_dir_of,
    graph_to_build,
    groups,
)
from sagegraph.runlock import hold
from sagegraph.sweeps import inputs, llm_record, outcomes, plan_line, report, tracker_for
from sagegraph.tasks import build as build_tasks
from sagegraph.tasks import evaluate as eval_tasks
from sagegraph.tasks.console import run_log
from sagegraph.tracking import SweepTracker

_UNCHECKED: Any = object()


def ensure_graph(cfg: SweepConfig, build_cfg: BuildConfig | None = _UNCHECKED, task_runner: Any = None) -> Path:
    """Build the sweep's graph first when it is missing or was built from other settings (the
    build resumes every stage that still fits). `build_cfg`: what `graph_to_build` returned, where
    the caller asked already (the CLI, before a server starts): the corpus is then not read again.
    `task_runner`: the sweep's own, so the build runs on the workers already started."""
    if build_cfg is _UNCHECKED:
        build_cfg = graph_to_build(cfg)
    if build_cfg is not None:
        from sagegraph.flows.build_graph import build_graph
        from sagegraph.flows.runtime import dask_runner

        build_graph.with_options(task_runner=task_runner or dask_runner(build_cfg.runner))(build_cfg)
    return graph_dir_of(cfg)


def warm_up_worker() -> None:
    """Imports the evaluation code and the sentence encoder's libraries on a Dask worker while the
    API server starts; the first task would otherwise wait for them. The questions are encoded on
    a worker (`prepare`), so the process that runs the flow never loads the encoder."""
    import sentence_transformers  # noqa: F401

    import sagegraph.tasks.evaluate  # noqa: F401


def edge_variant_graphs(cfg: SweepConfig, graph: Path) -> dict[str, Path]:
    """Variant label -> graph dir, building missing variants on Dask ("" is the graph as built)."""
    variants = cfg.edge_variants()
    if not variants:
        return {"": graph}
    base = base_config_of(graph)
    dirs = build_tasks.edge_variant.map(unmapped(base), variants).result()
    return {"": graph, **{label(v): Path(d) for v, d in zip(variants, dirs)}}


@flow(name="sweep", log_prints=True)
def sweep(cfg: SweepConfig) -> dict[str, Any]:
    with hold(Path(cfg.out), "sweep"):  # the CLI holds it already; a deployment's run takes it here
        return _sweep(cfg)


def _sweep(cfg: SweepConfig) -> dict[str, Any]:
    t0 = time.perf_counter()
    out = Path(cfg.out)
    graph, questions, cfgs = inputs(cfg)
    llm_dict = llm_record(cfg)
    # On a worker, whose imports were made while the API server started, and meanwhile the MLflow
    # store opens here: neither waits for the other.
    prepared = eval_tasks.prepare.submit(str(graph), str(questions), str(out), [c.record() for c in cfgs])
    try:
        tracker = tracker_for(cfg, graph, questions, cfgs)
    except BaseException:
        prepared.wait()  # a task left running would outlive the flow's workers
        raise
    try:
        return _run(cfg, tracker, graph, questions, cfgs, llm_dict, t0, prepared)
    except BaseException as exc:
        tracker.fail(exc)
        raise


def _run(
    cfg: SweepConfig,
    tracker: SweepTracker,
    graph: Path,
    questions: Path,
    cfgs: list[EvalConfig],
    llm_dict: dict[str, Any] | None,
    t0: float,
    prepared: PrefectFuture[str],
) -> dict[str, Any]:
    out = Path(cfg.out)
    qvec = prepared.result()  # BM25 is built before variants link it
    graphs = edge_variant_graphs(cfg, graph)
    grouped = groups(cfgs)
    run_log().info("%s", plan_line(cfgs, grouped, graphs))
    futures = eval_tasks.evaluate_configs.map(
        [str(graphs[grp[0].edges]) for grp in grouped],
        unmapped(str(questions)),
        unmapped(qvec),
        [[c.record() for c in grp] for grp in grouped],
        unmapped(str(out / "runs")),
        unmapped(llm_dict),
        unmapped(cfg.concurrency),
        unmapped(cfg.timeout_s),
    )

    def outcome(future):
        return lambda: outcomes(future.result())

    results = tracker.log_as_finished(
        (outcome(f) for f in as_completed(futures)), out / "runs", llm=llm_dict, traces=cfg.mlflow_traces
    )
    return report(cfg, tracker, graph, graphs, results, t0)
