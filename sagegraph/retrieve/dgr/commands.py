"""`sagegraph dgr ...`: DGR's own tools (its trajectories as training data, where its fallback
ranks the gold answers), registered by the registry's command list so the CLI names no method."""

from __future__ import annotations

import argparse
import json
from pathlib import Path


def add_commands(sub: argparse._SubParsersAction) -> None:
    dg = sub.add_parser(
        "dgr", help="DGR tools: agent trajectories as fine-tuning data, where the fallback ranks the gold answers"
    )
    dgr_sub = dg.add_subparsers(dest="dgr_command", required=True)
    dx = dgr_sub.add_parser(
        "export-trajectories",
        help="write a run's DGR agent trajectories as chat-format SFT records (JSONL, no gold labels)",
    )
    dx.add_argument("run_dir", type=Path, help="a run directory or a sweep's output directory")
    dx.add_argument("file", type=Path)
    dx.add_argument(
        "--only-finished", action="store_true", help="only agents that stopped by calling finish (a label-free filter)"
    )
    dx.set_defaults(func=_export)
    dr = dgr_sub.add_parser(
        "gold-rank",
        help="where the gold answers sit in the fallback's whole chain ranking, per question "
        "(replies replayed from the cache: 0 calls; gold read only to score)",
    )
    dr.add_argument("sweep", type=Path, help="a sweep directory (its questions.sample.jsonl)")
    dr.add_argument("--graph", type=Path, help="the built graph (default: the sweep's first run's)")
    dr.add_argument(
        "--where", action="append", default=[], metavar="FIELD=VALUE", help="keep questions whose field has this value"
    )
    dr.add_argument(
        "-p", "--param", action="append", default=[], metavar="KEY=VALUE", help="a DGR parameter, as the run was made"
    )
    dr.add_argument(
        "--llm", type=Path, default=Path("conf/llm_local.yaml"), help="the LLM settings the run used (its reply cache)"
    )
    dr.set_defaults(func=_gold_rank)


def _export(args: argparse.Namespace) -> int:
    from sagegraph.retrieve.dgr.trajectories import export_trajectories

    print(
        json.dumps(
            {
                **export_trajectories(Path(args.run_dir), Path(args.file), only_finished=args.only_finished),
                "file": str(args.file),
            }
        )
    )
    return 0


def _gold_rank(args: argparse.Namespace) -> int:
    from sagegraph.cliargs import key_values
    from sagegraph.config import load_llm_config
    from sagegraph.corpus.questions import load_questions, matching_questions
    from sagegraph.retrieve.dgr.gold_rank import gold_ranks
    from sagegraph.retrieve.dgr.params import DGRParams
    from sagegraph.retrieve.graph_index import GraphIndex
    from sagegraph.retrieve.registry import validate_params

    sweep = Path(args.sweep)
    graph = args.graph or Path(json.loads(next((sweep / "runs").glob("*/config.json")).read_text())["graph"])
    questions = matching_questions(
        load_questions(sweep / "questions.sample.jsonl"), dict(c.split("=", 1) for c in args.where)
    )
    params = validate_params("dgr", key_values(args.param))
    assert isinstance(params, DGRParams)
    found = gold_ranks(GraphIndex(Path(graph)), questions, params, load_llm_config(args.llm))
    texts = {q.id: q.text for q in questions}
    for qid, position in found["positions"].items():
        print(f"{qid}: first gold answer at {position} of {found['ranked'][qid]} ranked  {texts[qid]}")
    print(json.dumps({"sweep": str(sweep), "params": args.param, **{k: v for k, v in found.items() if k != "ranked"}}))
    return 0
