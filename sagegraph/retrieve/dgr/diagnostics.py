"""What DGR's agents did in a run (`sagegraph diagnose report`); where its fallback ranks the gold
answers is `gold_rank.py` (`sagegraph dgr gold-rank`)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from sagegraph.runfiles import read_traces


def run_report(run_dir: Path, metrics: dict[str, Any]) -> dict[str, Any]:
    """The agents' behaviour over a run: the tool mix (global against neighbourhood calls, the
    paper's Fig. 2), steps per agent, how agents stopped or fell back, and the prompt tokens by
    step (the resent history's growth)."""
    counts = {k[len("count_") :]: v for k, v in metrics.items() if k.startswith("count_")}
    agents = max(1, counts.get("agents", 0))
    calls = counts.get("global_calls", 0) + counts.get("neighbour_calls", 0)
    by_step: dict[int, list[int]] = {}
    if (run_dir / "traces.jsonl").exists():
        for row in read_traces(run_dir / "traces.jsonl"):
            for agent in row.get("agents") or []:
                for step, tokens in enumerate(agent.get("prompt_tokens", []), start=1):
                    by_step.setdefault(step, []).append(tokens)

    def share(name: str) -> float:
        return round(counts.get(name, 0) / agents, 3)

    return {
        "global_share": round(counts.get("global_calls", 0) / calls, 3) if calls else None,
        "steps_per_agent": round(counts.get("steps", 0) / agents, 2),
        "t_max_share": share("stop_t_max"),
        "finish_share": share("stop_finish"),
        "repeats_share": share("stop_repeats"),
        "fallback_share": share("fallback_answers"),
        "prompt_tokens_by_step": {
            s: int(np.mean(v)) for s, v in sorted(by_step.items()) if s in (1, 2, 3, 5, 10, 15, 20)
        },
    }
