"""MLflow tracking for sweeps: one parent run per sweep, a child run per configuration.

MLflow rejects '@' in metric names (allowed: letters, digits, _ - . / : space), so `recall@20` is
logged as `recall_at_20`; JSON and CSV keep `recall@20`. A rerun of the same sweep reopens its
parent run and logs only configurations that have no finished child yet.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Any

from sagegraph.construct.variants import parse_label
from sagegraph.eval.runner import EvalConfig


def mlflow_key(name: str) -> str:
    """MLflow names allow letters, digits and _-. :/ only: 'recall@20' -> 'recall_at_20'."""
    return re.sub(r"[^\w\-. :/]", "_", name.replace("@", "_at_"))


def default_tracking_uri(out: Path) -> str:
    return f"sqlite:///{Path(out).resolve() / 'mlflow.db'}"


class SweepTracker:
    def __init__(self, tracking_uri: str, experiment: str, state_path: Path, sweep_name: str, params: dict[str, Any] | None = None):
        os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")
        from mlflow.tracking import MlflowClient

        self.client = MlflowClient(tracking_uri=tracking_uri)
        self.tracking_uri = tracking_uri
        exp = self.client.get_experiment_by_name(experiment)
        self.experiment_id = exp.experiment_id if exp else self.client.create_experiment(experiment)
        self.state_path = Path(state_path)
        self.parent_id = self._reopen_parent()
        if self.parent_id is None:
            run = self.client.create_run(self.experiment_id, run_name=sweep_name, tags={"sagegraph.kind": "sweep"})
            self.parent_id = run.info.run_id
            self.state_path.write_text(json.dumps({"parent_run_id": self.parent_id, "tracking_uri": tracking_uri}))
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
        runs = self.client.search_runs([self.experiment_id], filter_string=f"tags.mlflow.parentRunId = '{self.parent_id}' and attributes.status = 'FINISHED'", max_results=5000)
        return {f"{r.data.tags.get('sagegraph.config_key')}:{r.data.tags.get('sagegraph.inputs')}" for r in runs}

    def log_child(self, cfg: EvalConfig, metrics: dict[str, Any], run_dir: Path) -> str:
        from mlflow.entities import Metric, Param

        run = self.client.create_run(
            self.experiment_id,
            run_name=cfg.label(),
            tags={"mlflow.parentRunId": self.parent_id, "sagegraph.config_key": cfg.key(), "sagegraph.retriever": cfg.retriever, "sagegraph.inputs": str(metrics.get("inputs"))},
        )
        rid = run.info.run_id
        params = {**cfg.__dict__, "total_k": cfg.total}
        params.update({f"edges.{k}": v for k, v in parse_label(cfg.edges).items()})  # filterable per setting
        numeric = {mlflow_key(k): float(v) for k, v in metrics.items() if isinstance(v, (int, float))}
        self.client.log_batch(rid, metrics=[Metric(k, v, 0, 0) for k, v in numeric.items()], params=[Param(k, str(v)) for k, v in params.items()])
        for name in ("per_query.csv", "run.trec", "metrics.json", "config.json"):
            if (run_dir / name).exists():
                self.client.log_artifact(rid, str(run_dir / name))
        self.client.set_terminated(rid, "FINISHED")
        return rid

    def log_summary(self, files: list[Path], metrics: dict[str, float] | None = None) -> None:
        for f in files:
            if Path(f).exists():
                self.client.log_artifact(self.parent_id, str(f))
        for k, v in (metrics or {}).items():
            self.client.log_metric(self.parent_id, mlflow_key(k), float(v))

    def finish(self) -> None:
        self.client.set_terminated(self.parent_id, "FINISHED")
