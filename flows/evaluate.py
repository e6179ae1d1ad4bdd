"""The `evaluate` flow: one retriever configuration over a question set."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from prefect import flow

from sagegraph.eval.runner import EvalConfig
from sagegraph.tasks import evaluate as eval_tasks


@flow(name="evaluate", log_prints=True)
def evaluate(graph_dir: str, questions: str, cfg: dict[str, Any], out: str) -> dict[str, Any]:
    Path(out).mkdir(parents=True, exist_ok=True)
    qvec = eval_tasks.prepare(graph_dir, questions, out, [cfg])
    result = eval_tasks.evaluate_configs(
        graph_dir, questions, qvec, [EvalConfig.from_record(cfg).record()], str(Path(out) / "runs")
    )
    return result[0]
