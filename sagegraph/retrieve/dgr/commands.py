"""`sagegraph dgr ...`: DGR's own tools, registered by the registry's command list so the CLI names
no method."""

from __future__ import annotations

import argparse
import json
from pathlib import Path


def add_commands(sub: argparse._SubParsersAction) -> None:
    dg = sub.add_parser("dgr", help="DGR tools: export agent trajectories as fine-tuning data")
    dgr_sub = dg.add_subparsers(dest="dgr_command", required=True)
    dx = dgr_sub.add_parser("export-trajectories", help="write a run's DGR agent trajectories as chat-format SFT records (JSONL, no gold labels)")
    dx.add_argument("run_dir", type=Path, help="a run directory or a sweep's output directory")
    dx.add_argument("file", type=Path)
    dx.add_argument("--only-finished", action="store_true", help="only agents that stopped by calling finish (a label-free filter)")
    dx.set_defaults(func=_export)


def _export(args: argparse.Namespace) -> int:
    from sagegraph.retrieve.dgr.trajectories import export_trajectories

    print(json.dumps({**export_trajectories(Path(args.run_dir), Path(args.file), only_finished=args.only_finished), "file": str(args.file)}))
    return 0
