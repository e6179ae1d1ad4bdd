"""A sweep run in this process, and what the `sweep` flow shares with it: its inputs, its MLflow
parent run, its report (summary, Figure 4 rows and plot, side-by-side comparison). A sweep with
nothing left to run (`finished_sweep`) or a small one (`sweep_in_process`) starts no Prefect
server and no Dask worker; `sagegraph.sweep` (the Python API) runs any sweep this way."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from sagegraph.construct.variants import base_config_of, build_variant, label
from sagegraph.errors import InfraError
from sagegraph.eval import sweep_steps
from sagegraph.eval.compare import compare_files, ordered
from sagegraph.eval.runner import EvalConfig, failed_questions
from sagegraph.eval.sweep import (
    SweepConfig,
    configurations,
    figure4,
    graph_dir_of,
    groups,
    llm_settings,
    plot_figure4,
    sweep_questions,
)
from sagegraph.eval.sweep_report import brief_table, plain_lines, variant_summary, write_summary
from sagegraph.llm import resolved_base_url
from sagegraph.progress import show, write
from sagegraph.runlock import hold
from sagegraph.tracking import SweepTracker, default_tracking_uri, view_columns


def inputs(cfg: SweepConfig) -> tuple[Path, Path, list[EvalConfig]]:
    """The built graph, the sweep's questions file (its sample written in the out dir) and its
    configurations."""
    out = Path(cfg.out)
    out.mkdir(parents=True, exist_ok=True)
    graph = graph_dir_of(cfg)
    if not (graph / "edges.parquet").exists():
        raise FileNotFoundError(f"{graph}: no built graph; run `sagegraph build` or give the sweep a `build:` config")
    return graph, sweep_questions(cfg, graph, out), configurations(cfg)


def llm_record(cfg: SweepConfig) -> dict[str, Any] | None:
    llm = llm_settings(cfg)
    return llm.model_dump(mode="json") if llm else None


def tracker_for(cfg: SweepConfig, graph: Path, questions: Path, cfgs: list[EvalConfig]) -> SweepTracker:
    """The sweep's parent run, opened (or found again, on a rerun) with the sweep's parameters."""
    params: dict[str, Any] = {
        "graph": graph,
        "questions": questions,
        "configurations": len(cfgs),
        "concurrency": cfg.concurrency,
    }
    if cfg.sample:
        params["sample"] = cfg.sample.model_dump()
    llm = llm_settings(cfg)
    if llm:
        params.update(
            {
                "llm.model": llm.model,
                "llm.base_url": resolved_base_url(llm) or "(openai default)",
                "llm.cache_mode": llm.cache_mode,
            }
        )
    out = Path(cfg.out)
    return SweepTracker(
        cfg.mlflow.tracking_uri or default_tracking_uri(out),
        cfg.mlflow.experiment,
        out / "mlflow_parent.json",
        cfg.name,
        params=params,
    )


def finished_sweep(cfg: SweepConfig) -> dict[str, Any] | None:
    """The sweep's report when every configuration already ran to the end on these inputs (the
    rerun of a finished sweep, or of one stopped while it logged or wrote its report): made from
    the run directories in this process, with no API server or Dask worker. None when a graph, an
    edge variant or any configuration is still to be built or run: the flow does that.

    A configuration counts as finished by the evaluation's own rule (`runner.finished_summary`).
    Under the sweep folder's lock, as the flow and `sweep_in_process` are (re-entrant: the CLI
    holds it already): the report and the MLflow runs it logs are the folder's."""
    with hold(Path(cfg.out), "sweep"):
        return _finished_sweep(cfg)


def _finished_sweep(cfg: SweepConfig) -> dict[str, Any] | None:
    from sagegraph.construct.variants import built_variant
    from sagegraph.eval.evaluate import read_questions
    from sagegraph.eval.runner import finished_summary, inputs_stamp, run_dir
    from sagegraph.retrieve.graph_index import GraphIndex

    t0 = time.perf_counter()
    out = Path(cfg.out)
    graph = graph_dir_of(cfg)
    if not (out / "runs").is_dir() or not (graph / "edges.parquet").exists():
        return None
    graphs = {"": graph}
    variants = cfg.edge_variants()
    if variants:
        base = base_config_of(graph)
        for overrides in variants:
            built = built_variant(base, overrides)
            if built is None:
                return None
            graphs[label(overrides)] = built
    questions = sweep_questions(cfg, graph, out)
    asked = read_questions(questions)
    indexes: dict[str, GraphIndex] = {}
    results: list[tuple[EvalConfig, dict[str, Any]]] = []
    for c in configurations(cfg):
        index = indexes.setdefault(c.edges, GraphIndex(graphs[c.edges]))
        stamp = inputs_stamp(index, asked, c.retriever_class.graph_inputs(index, c.validated()))
        summary = finished_summary(run_dir(out / "runs", c), stamp)
        if summary is None:
            return None
        results.append((c, summary))
    tracker = tracker_for(cfg, graph, questions, [c for c, _ in results])
    try:
        logged = tracker.log_as_finished([lambda: results], out / "runs", llm=llm_record(cfg), traces=cfg.mlflow_traces)
        return report(cfg, tracker, graph, graphs, logged, t0)
    except BaseException as exc:
        tracker.fail(exc)
        raise


def plan_line(cfgs: list[EvalConfig], grouped: list[list[EvalConfig]], graphs: dict[str, Path]) -> str:
    return f"{len(cfgs)} configurations in {len(grouped)} seed groups on {len(graphs)} graph(s)"


def _terminal_line(line: str) -> None:
    write(line + "\n")


def outcomes(records: list[dict[str, Any]]) -> list[tuple[EvalConfig, dict[str, Any]]]:
    return [(EvalConfig.from_record(r["config"]), r["metrics"]) for r in records]


# A sweep of at most this many question-configuration evaluations (and nothing to build) runs in the
# CLI's process: starting the API server and the Dask workers costs 25-35 s of wall time on 2 cores,
# more than such a sweep's work, and two workers at most halve the rest.
IN_PROCESS_EVALUATIONS = 500


def evaluations(cfg: SweepConfig) -> int:
    """Questions times configurations: the sweep's size, finished runs included."""
    from sagegraph.eval.evaluate import read_questions

    _, questions, cfgs = inputs(cfg)
    return len(read_questions(questions)) * len(cfgs)


def sweep_in_process(cfg: SweepConfig, report_line: Callable[[str], None] = _terminal_line) -> dict[str, Any]:
    """The sweep run in this process, its configuration groups in turn, with no API server and no
    Dask worker: the same run directories, MLflow runs and report as the `sweep` flow, so each
    resumes the other's work. Edge variants not built yet are built here first. `report_line`
    takes the lines a person follows the run by (stderr by default); progress lines are shown live
    at a terminal."""
    with hold(Path(cfg.out), "sweep"):  # re-entrant: the CLI holds it already
        return _sweep_in_process(cfg, report_line)


def _sweep_in_process(cfg: SweepConfig, report_line: Callable[[str], None]) -> dict[str, Any]:
    t0 = time.perf_counter()
    out = Path(cfg.out)
    graph, questions, cfgs = inputs(cfg)
    llm_dict = llm_record(cfg)
    qvec = sweep_steps.prepare(str(graph), str(questions), str(out), [c.record() for c in cfgs], report_line)
    tracker = tracker_for(cfg, graph, questions, cfgs)
    try:
        graphs = {"": graph}
        if variants := cfg.edge_variants():
            base = base_config_of(graph)
            for overrides in variants:
                graphs[label(overrides)] = build_variant(base, overrides)
                report_line(f"edge variant {label(overrides)}: {graphs[label(overrides)]}")
        grouped = groups(cfgs)
        report_line(plan_line(cfgs, grouped, graphs))

        stopped: list[InfraError] = []

        def outcome(group: list[EvalConfig]):
            def run() -> list[tuple[EvalConfig, dict[str, Any]]]:
                try:
                    records = sweep_steps.evaluate_configs(
                        str(graphs[group[0].edges]),
                        str(questions),
                        qvec,
                        [c.record() for c in group],
                        str(out / "runs"),
                        llm_dict,
                        cfg.concurrency,
                        cfg.timeout_s,
                        report=report_line,
                        progress=show if report_line is _terminal_line else report_line,
                    )
                except InfraError as exc:  # the endpoint or the store is down: no later group would fare better
                    stopped.append(exc)
                    raise
                return outcomes(records)

            return run

        results = tracker.log_as_finished(
            (outcome(group) for group in grouped if not stopped),
            out / "runs",
            llm=llm_dict,
            traces=cfg.mlflow_traces,
        )
        return report(cfg, tracker, graph, graphs, results, t0)
    except BaseException as exc:
        tracker.fail(exc)
        raise


def report(
    cfg: SweepConfig,
    tracker: SweepTracker,
    graph: Path,
    graphs: dict[str, Path],
    results: list[tuple[EvalConfig, dict[str, Any]]],
    t0: float,
) -> dict[str, Any]:
    """The sweep's files (summary, Figure 4 rows and plot, side-by-side comparison), its parent
    run's summary in MLflow, and the result the CLI prints."""
    out = Path(cfg.out)
    rows = [
        row for variant in sorted({c.edges for c, _ in results}) for row in figure4(results, cfg.plot_totals, variant)
    ]
    rows = [r for r in rows if r["edges"] or not cfg.edges] or rows
    (out / "figure4.json").write_text(json.dumps(rows, indent=1))
    plot = plot_figure4(rows, out / "recall_at_k.png")
    table = write_summary(out / "summary.csv", results)
    files = [table, *([plot] if plot else []), out / "figure4.json", graph.parent / "stats" / "graph_stats.json"]
    files += compare_files(
        ordered(results), out / "runs", out
    )  # several retrievers: side by side, CIs against the default baseline
    if cfg.edges:
        files.append(out / "edge_variants.json")
        (out / "edge_variants.json").write_text(json.dumps(variant_summary(graphs), indent=1))
    gains = {
        f"bl_graph_gain@{r['k']}" + (f"/{r['edges']}" if r["edges"] else ""): r["gain"]
        for r in rows
        if r.get("gain") is not None
    }
    tracker.log_summary(files, gains)
    view = tracker.share_view(view_columns(results, cfg.plot_totals))
    tracker.finish()
    errored = {c.label(): failed_questions(m) for c, m in ordered(results) if failed_questions(m)}
    asked = max((int(m.get("questions", 0)) for _, m in results), default=0)
    return {
        "configurations": len(results),
        "summary": str(table),
        "table": brief_table(results),
        "errors": errored,
        "plot": str(plot) if plot else None,
        "figure4": rows,
        "lines": plain_lines(rows, graph, asked),
        "seconds": round(time.perf_counter() - t0, 1),
        "mlflow": {
            "tracking_uri": tracker.tracking_uri,
            "experiment": cfg.mlflow.experiment,
            "parent_run_id": tracker.parent_id,
            "view": view,
        },
    }
