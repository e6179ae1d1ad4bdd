"""MLflow tracking for sweeps: one parent run per sweep, a child run per configuration.

MLflow rejects '@' in metric names (allowed: letters, digits, _ - . / : space), so `recall@20` is
logged as `recall_at_20`; JSON and CSV keep `recall@20`. A rerun of the same sweep reopens its
parent run and logs only configurations that have no finished child yet.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import re
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

from sagegraph import empty_db
from sagegraph.construct.variants import parse_label
from sagegraph.errors import InfraError
from sagegraph.eval.runner import EvalConfig, run_dir
from sagegraph.runfiles import read_traces, write_text_whole


def mlflow_key(name: str) -> str:
    """MLflow names allow letters, digits and _-. :/ only: 'recall@20' -> 'recall_at_20'."""
    return re.sub(r"[^\w\-. :/]", "_", name.replace("@", "_at_"))


def default_tracking_uri(out: Path) -> str:
    return f"sqlite:///{Path(out).resolve() / 'mlflow.db'}"


# MLflow 3 opens an experiment on its GenAI overview unless told it holds model-development runs;
# a sweep's experiment is a table of runs to compare, so it says so.
EXPERIMENT_KIND = ("mlflow.experimentKind", "custom_model_development")


def is_server(tracking_uri: str) -> bool:
    """A tracking server (it serves its own UI and artifacts), not a local store."""
    return tracking_uri.startswith(("http://", "https://"))


def artifact_location(tracking_uri: str) -> str | None:
    """Artifacts beside a local tracking database (`<db dir>/mlartifacts`), so `mlflow ui` started
    from any directory finds them; a tracking server keeps its own default."""
    if not tracking_uri.startswith("sqlite:///"):
        return None
    return (Path(tracking_uri.removeprefix("sqlite:///")).resolve().parent / "mlartifacts").as_uri()


# MLflow's "share view" stores a runs-table layout as an experiment tag and opens it from the URL
# (`?viewStateShareKey=<key>`); plain JSON is read as-is. The UI has no server-side default
# columns, so this is how a sweep's metrics are in view when its runs open.
VIEW_TAG_PREFIX = "mlflow.sharedViewState."
VIEW_KEY = "sagegraph"
_VIEW_METRICS = (
    "hit@1",
    "hit@5",
    "mrr",
    "recall@{k}",
    "errors",
    "llm_calls_per_query",
    "llm_work_prompt_tokens_per_query",
    "llm_work_completion_tokens_per_query",
    "latency_p50_ms",
)  # work: what the answers cost, paid now or replayed


def view_columns(results: Iterable[tuple[EvalConfig, dict[str, Any]]], totals: Iterable[int] = ()) -> list[str]:
    """The runs table's columns for a sweep: what was configured (retriever, k, each parameter a
    configuration set), then the quality, cost and time metrics some configuration logged, Recall
    at each k the sweep plots (or that its configurations return)."""
    results = list(results)
    ks = sorted({int(k) for k in totals} or {c.total for c, _ in results})
    logged = {
        mlflow_key(k)
        for _, m in results
        for k, v in m.items()
        if isinstance(v, (int, float)) and not isinstance(v, bool)
    }
    metrics = [mlflow_key(n.format(k=k)) for n in _VIEW_METRICS for k in (ks if "{k}" in n else [0])]
    params = ["retriever", "k", *sorted({f"params.{p}" for c, _ in results for p in c.params})]
    return [f"params.`{p}`" for p in params] + [f"metrics.`{m}`" for m in dict.fromkeys(metrics) if m in logged]


def runs_view_url(experiment_id: str, tracking_uri: str = "") -> str:
    """Where the UI shows the sweep's runs with its columns in view: the tracking server itself,
    or `mlflow ui`'s default address for a local store."""
    host = tracking_uri.rstrip("/") if is_server(tracking_uri) else "http://127.0.0.1:5000"
    return f"{host}/#/experiments/{experiment_id}/runs?viewStateShareKey={VIEW_KEY}"


def seed_local_store(tracking_uri: str) -> bool:
    """A new local tracking database as a copy of an empty one MLflow migrated once for its
    version (`empty_db`), so a new out dir's first MLflow call does not run every migration; True
    if it was copied. A server, or a database already there, is left as it is."""
    if not tracking_uri.startswith("sqlite:///"):
        return False
    import sqlite3

    import mlflow

    path = Path(tracking_uri.removeprefix("sqlite:///"))
    if not empty_db.seed(path, empty_db.template_path("mlflow", mlflow.__version__), _migrate):
        return False
    # MLflow puts its Default experiment's artifacts under the folder it was started from: here, beside the database
    try:
        with contextlib.closing(sqlite3.connect(path)) as db, db:
            db.execute(
                "UPDATE experiments SET artifact_location = ? WHERE experiment_id = 0",
                (f"{artifact_location(tracking_uri)}/0",),
            )
    except sqlite3.Error:
        path.unlink(missing_ok=True)  # MLflow makes its own
        return False
    return True


def _migrate(folder: Path) -> Path:
    """MLflow's own migrations, run by opening its store on a new database."""
    from mlflow.tracking import MlflowClient

    made = folder / "mlflow.db"
    MlflowClient(tracking_uri=f"sqlite:///{made}").search_experiments()
    return made


@contextlib.contextmanager
def tracking_store(tracking_uri: str) -> Iterator[None]:
    """MLflow's store failing (a database another process holds locked, a server that does not
    answer) as one line (InfraError) instead of a traceback from deep in MLflow."""
    from mlflow.exceptions import MlflowException
    from sqlalchemy.exc import SQLAlchemyError

    quiet = logging.getLogger("mlflow.store.db.utils")  # it logs the whole traceback before raising
    level = quiet.level
    quiet.setLevel(logging.CRITICAL)
    try:
        yield
    except (MlflowException, SQLAlchemyError) as exc:
        reason = " ".join(str(exc).split())[:300]
        raise InfraError(
            f"MLflow tracking store {tracking_uri} failed: {reason}; finished runs are kept, rerun to log them"
        ) from None
    finally:
        quiet.setLevel(level)


class SweepTracker:
    def __init__(
        self,
        tracking_uri: str,
        experiment: str,
        state_path: Path,
        sweep_name: str,
        params: dict[str, Any] | None = None,
    ):
        with tracking_store(tracking_uri):
            self._open(tracking_uri, experiment, state_path, sweep_name, params)

    def _open(
        self, tracking_uri: str, experiment: str, state_path: Path, sweep_name: str, params: dict[str, Any] | None
    ) -> None:
        os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")
        from mlflow.tracking import MlflowClient

        seed_local_store(tracking_uri)
        self.client = MlflowClient(tracking_uri=tracking_uri)
        self.tracking_uri = tracking_uri
        exp = self.client.get_experiment_by_name(experiment)
        if exp is None:
            self.experiment_id = self.client.create_experiment(
                experiment, artifact_location=artifact_location(tracking_uri), tags=dict([EXPERIMENT_KIND])
            )
        else:
            self.experiment_id = exp.experiment_id
            if not str(exp.tags.get(EXPERIMENT_KIND[0], "")).startswith(
                EXPERIMENT_KIND[1]
            ):  # unset or inferred as GenAI
                self.client.set_experiment_tag(self.experiment_id, *EXPERIMENT_KIND)
        self.state_path = Path(state_path)
        reopened = self._reopen_parent()
        self.parent_id: str = reopened or ""
        if reopened is None:
            run = self.client.create_run(self.experiment_id, run_name=sweep_name, tags={"sagegraph.kind": "sweep"})
            self.parent_id = run.info.run_id
            write_text_whole(
                self.state_path, json.dumps({"parent_run_id": self.parent_id, "tracking_uri": tracking_uri})
            )
            for k, v in (params or {}).items():
                self.client.log_param(self.parent_id, k, str(v)[:500])

    def _reopen_parent(self) -> str | None:
        if not self.state_path.exists():
            return None
        state = json.loads(self.state_path.read_text())
        if state.get("tracking_uri") != self.tracking_uri:
            return None
        try:
            run = self.client.get_run(state["parent_run_id"])
        except Exception:
            return None
        if run.info.lifecycle_stage != "active":
            return None
        self.client.update_run(run.info.run_id, status="RUNNING")
        return run.info.run_id

    def finished_children(self) -> set[str]:
        """'<config key>:<inputs stamp>' of every finished child: a configuration rerun on another
        graph or question set is logged again."""
        runs = self.client.search_runs(
            [self.experiment_id],
            filter_string=f"tags.mlflow.parentRunId = '{self.parent_id}' and attributes.status = 'FINISHED'",
            max_results=5000,
        )
        return {f"{r.data.tags.get('sagegraph.config_key')}:{r.data.tags.get('sagegraph.inputs')}" for r in runs}

    def drop_interrupted_children(self) -> int:
        """Child runs a killed sweep left RUNNING while it logged them (their traces half written):
        deleted, as MLflow deletes (kept in its trash), so the rerun's complete child is the
        configuration's only one in the view. None can be another process's: a sweep folder, and
        so its parent run, is written by one process at a time (`runlock.hold`)."""
        runs = self.client.search_runs(
            [self.experiment_id],
            filter_string=f"tags.mlflow.parentRunId = '{self.parent_id}' and attributes.status = 'RUNNING'",
            max_results=5000,
        )
        for run in runs:
            self.client.delete_run(run.info.run_id)
        return len(runs)

    def log_child(
        self,
        cfg: EvalConfig,
        metrics: dict[str, Any],
        run_dir: Path,
        llm: dict[str, Any] | None = None,
        traces: bool = True,
    ) -> str:
        from mlflow.entities import Metric, Param

        run = self.client.create_run(
            self.experiment_id,
            run_name=cfg.label(),
            tags={
                "mlflow.parentRunId": self.parent_id,
                "sagegraph.config_key": cfg.key(),
                "sagegraph.retriever": cfg.retriever,
                "sagegraph.inputs": str(metrics.get("inputs")),
            },
        )
        rid = run.info.run_id
        params = {
            "retriever": cfg.retriever,
            "k": cfg.k,
            "edges": cfg.edges,
            "prompt": cfg.prompt,
            "total_k": cfg.total,
        }
        params.update({f"params.{k}": v for k, v in cfg.params.items()})  # filterable per retriever parameter
        params.update({f"edges.{k}": v for k, v in parse_label(cfg.edges).items()})  # filterable per setting
        if llm and metrics.get("llm_calls"):
            params.update(
                {
                    f"llm.{k}": llm.get(k)
                    for k in ("model", "base_url", "temperature", "max_tokens")
                    if llm.get(k) is not None
                }
            )
        flat = {
            **metrics,
            **{
                f"{f}={v}/{m}": val
                for f, values in (metrics.get("by_group") or {}).items()
                for v, ms in values.items()
                for m, val in ms.items()
            },
        }
        numeric = {
            mlflow_key(k): float(v) for k, v in flat.items() if isinstance(v, (int, float)) and not isinstance(v, bool)
        }
        self.client.log_batch(
            rid,
            metrics=[Metric(k, v, 0, 0) for k, v in numeric.items()],
            params=[Param(k, str(v)) for k, v in params.items()],
        )
        for name in ("per_query.csv", "run.trec", "metrics.json", "config.json", "traces.jsonl"):
            if (run_dir / name).exists():
                self.client.log_artifact(rid, str(run_dir / name))
        if traces and metrics.get("llm_calls"):
            self.log_query_traces(rid, cfg, run_dir, (llm or {}).get("model"))
        self.client.set_terminated(rid, "FINISHED")
        return rid

    def log_query_traces(self, run_id: str, cfg: EvalConfig, run_dir: Path, model: str | None = None) -> int:
        """Each traced query of a finished configuration as an MLflow trace linked to its child run,
        so MLflow's GenAI views (Traces, token usage, tool calls) show what the retriever did."""
        rows = read_traces(run_dir / "traces.jsonl")
        if not rows:
            return 0
        with tracing_to(self.tracking_uri):
            for row in rows:
                log_trace(self.client, self.experiment_id, run_id, cfg, row, model)
        return len(rows)

    def log_summary(self, files: list[Path], metrics: dict[str, float] | None = None) -> None:
        for f in files:
            if Path(f).exists():
                self.client.log_artifact(self.parent_id, str(f))
        for k, v in (metrics or {}).items():
            self.client.log_metric(self.parent_id, mlflow_key(k), float(v))

    def share_view(self, columns: list[str]) -> str:
        """Saves the runs-table layout (`view_columns`) as the experiment's shared view; returns
        the URL that opens it. Rewritten by every sweep into the experiment: the columns follow the
        latest sweep's configurations."""
        view: dict[str, Any] = {"selectedColumns": columns, "columnOrder": columns}
        if "metrics.`mrr`" in columns:  # sorted, the UI lists child runs flat, not under a collapsed parent
            view.update(orderByKey="metrics.`mrr`", orderByAsc=False)
        self.client.set_experiment_tag(self.experiment_id, VIEW_TAG_PREFIX + VIEW_KEY, json.dumps(view))
        return runs_view_url(self.experiment_id, self.tracking_uri)

    def finish(self) -> None:
        self.client.set_terminated(self.parent_id, "FINISHED")

    def fail(self, exc: BaseException) -> None:
        """The parent run of a sweep that stopped: KILLED when interrupted, else FAILED, with the
        reason as a tag (`sagegraph.failure`), so the MLflow UI does not show it RUNNING forever.
        A resumed sweep reopens this same run."""
        killed = isinstance(exc, (KeyboardInterrupt, SystemExit)) or type(exc).__name__ in (
            "CancelledError",
            "TerminationSignal",
        )
        reason = (str(exc).strip().splitlines() or [type(exc).__name__])[0][:500]
        with contextlib.suppress(Exception):  # the reason must not hide the failure it reports
            self.client.set_tag(self.parent_id, "sagegraph.failure", f"{type(exc).__name__}: {reason}")
            self.client.set_terminated(self.parent_id, "KILLED" if killed else "FAILED")

    def log_as_finished(
        self,
        finished: Iterable[Callable[[], list[tuple[EvalConfig, dict[str, Any]]]]],
        runs: Path,
        llm: dict[str, Any] | None = None,
        traces: bool = True,
    ) -> list[tuple[EvalConfig, dict[str, Any]]]:
        """Each group's configurations logged as a child run as soon as the group finishes (not
        at the end of the sweep: a sweep that stopped used to leave only its parent run). A group
        that raised does not stop the others from being logged; the first such error is raised
        once every group is done."""
        self.drop_interrupted_children()
        logged = self.finished_children()
        results: list[tuple[EvalConfig, dict[str, Any]]] = []
        failure: BaseException | None = None
        for outcome in finished:
            try:
                batch = outcome()
            except Exception as exc:
                failure = failure or exc
                continue
            for c, m in batch:
                results.append((c, m))
                if not any(f"{key}:{m.get('inputs')}" in logged for key in (c.key(), c.legacy_key())):
                    self.log_child(c, m, run_dir(runs, c), llm=llm, traces=traces)
        if failure is not None:
            raise failure
        return results


@contextlib.contextmanager
def tracing_to(uri: str) -> Iterator[None]:
    """MLflow exports trace spans to the global tracking URI, not the client's: point it at ours
    for the duration, synchronously, so traces land in the sweep's store before the run closes."""
    import mlflow

    os.environ["MLFLOW_ENABLE_ASYNC_TRACE_LOGGING"] = "false"
    before = mlflow.get_tracking_uri()
    mlflow.set_tracking_uri(uri)
    try:
        yield
    finally:
        mlflow.set_tracking_uri(before)


_SPAN_TYPES = {"llm": "CHAT_MODEL", "cypher": "TOOL", "tool": "TOOL"}


def _ns(t: float) -> int:
    return int(t * 1e9)


def log_trace(client, experiment_id: str, run_id: str, cfg: EvalConfig, row: dict[str, Any], model: str | None) -> str:
    """One query: a RETRIEVER root span, an AGENT span per event group, a CHAT_MODEL span per LLM
    call (messages in, reply out, token usage) and a TOOL span per Cypher run or tool call."""
    events = row["events"]
    start = row.get("started_at") or min(e["start"] for e in events)
    end = max([start + (row.get("latency_ms") or 0) / 1000] + [e["start"] + e.get("seconds", 0) for e in events])
    summary: dict[str, Any] = {
        k: row[k]
        for k in ("plan", "cypher_executed", "cypher_rows", "fallback", "target", "edge_constrained")
        if k in row
    }
    root = client.start_trace(
        f"{cfg.retriever} {row['qid']}",
        span_type="RETRIEVER",
        inputs={"question": row.get("question")},
        attributes={"sagegraph.counters": row.get("counters", {}), "sagegraph.config": cfg.label()},
        tags={"sagegraph.qid": str(row["qid"]), "sagegraph.config_key": cfg.key()},
        experiment_id=experiment_id,
        run_id=run_id,
        start_time_ns=_ns(start),
    )
    tid = root.trace_id
    groups: dict[str, str] = {}
    for g in dict.fromkeys(e["group"] for e in events if e.get("group")):
        members = [e for e in events if e.get("group") == g]
        span = client.start_span(
            g,
            trace_id=tid,
            parent_id=root.span_id,
            span_type="AGENT",
            start_time_ns=_ns(min(e["start"] for e in members)),
        )
        groups[g] = span.span_id
        client.end_span(tid, span.span_id, end_time_ns=_ns(max(e["start"] + e.get("seconds", 0) for e in members)))
    for e in events:
        attrs: dict[str, Any] = {}
        inputs: Any = e.get("inputs")
        outputs: Any = e.get("outputs")
        if e["kind"] == "llm":
            tok = e.get("tokens") or {}
            attrs = {
                "mlflow.chat.tokenUsage": {
                    "input_tokens": tok.get("input", 0),
                    "output_tokens": tok.get("output", 0),
                    "total_tokens": tok.get("input", 0) + tok.get("output", 0),
                },
                "sagegraph.cached": bool(e.get("cached")),
                "sagegraph.cache_key": e.get("key", ""),
            }
            if model:
                attrs["mlflow.llm.model"] = model
            inputs = {"messages": inputs} if isinstance(inputs, list) else inputs
            outputs = {"content": outputs, **({"tool_calls": e["tool_calls"]} if e.get("tool_calls") else {})}
        span = client.start_span(
            e["name"],
            trace_id=tid,
            parent_id=groups.get(e.get("group", ""), root.span_id),
            span_type=_SPAN_TYPES.get(e["kind"], "UNKNOWN"),
            inputs=inputs,
            attributes=attrs,
            start_time_ns=_ns(e["start"]),
        )
        client.end_span(
            tid,
            span.span_id,
            outputs=outputs if not e.get("error") else {"error": e["error"]},
            status="ERROR" if e.get("error") else "OK",
            end_time_ns=_ns(e["start"] + e.get("seconds", 0)),
        )
    client.end_trace(tid, outputs={"top": row.get("top", []), **summary}, end_time_ns=_ns(end))
    return tid
