"""`sagegraph graphraft ...`: GraphRAFT's training side (labels from training questions, their
export, LoRA fine-tuning of a selector), registered by the registry's command list so the CLI
names no method."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path


def add_commands(sub: argparse._SubParsersAction) -> None:
    gr = sub.add_parser("graphraft", help="GraphRAFT tools: training labels, their export, LoRA fine-tuning")
    gr_sub = gr.add_subparsers(dest="graphraft_command", required=True)
    gl = gr_sub.add_parser(
        "labels",
        help="label each question with its best grounded template (reads gold: training data and the oracle "
        "ceiling, never retrieval)",
    )
    gl.add_argument("graph_dir", type=Path)
    gl.add_argument(
        "--questions", type=Path, required=True, help="questions with gold (e.g. data/kb-synth/questions-train.jsonl)"
    )
    gl.add_argument("--out", type=Path, required=True, help="labels JSONL to write")
    gl.add_argument(
        "--ner", choices=["llm", "gazetteer"], default="llm", help="how entities are named (as the retriever's `ner`)"
    )
    gl.add_argument("--k", type=int, default=20, help="the oracle ceiling's cutoff")
    gl.add_argument("--limit", type=int, help="first N questions only")
    gl.add_argument(
        "--run", type=Path, help="a graphraft run directory on the same questions: report its selection accuracy"
    )
    gl.add_argument(
        "-p",
        "--param",
        action="append",
        metavar="KEY=VALUE",
        help="a graphraft parameter (two_hop, paths, max_mid_degree)",
    )
    gl.add_argument("--llm", type=Path, help="LLM settings YAML for --ner llm (e.g. conf/llm_local.yaml)")
    gl.add_argument("--cache-mode", choices=["live", "replay"])
    gl.set_defaults(func=_labels)
    ge = gr_sub.add_parser(
        "export-labels",
        help="write kept labels as chat-format records (question and entities -> best template) for fine-tuning",
    )
    ge.add_argument("labels", type=Path)
    ge.add_argument("file", type=Path)
    ge.set_defaults(func=_export)
    gf = gr_sub.add_parser(
        "finetune", help="LoRA-tune a Hugging Face causal LM on exported label records (needs a GPU, or --allow-cpu)"
    )
    gf.add_argument("records", type=Path, help="chat records from `export-labels`")
    gf.add_argument("--model", required=True, help="a Hugging Face model name or local directory")
    gf.add_argument("--out", type=Path, required=True, help="where the adapter is saved")
    gf.add_argument("--epochs", type=float, default=1.0)
    gf.add_argument("--lr", type=float, default=2e-5, help="the paper's 2e-5")
    gf.add_argument("--r", type=int, default=64, help="LoRA rank (the paper's 64)")
    gf.add_argument("--alpha", type=int, default=16)
    gf.add_argument("--batch-size", type=int, default=4)
    gf.add_argument("--max-steps", type=int)
    gf.add_argument("--allow-cpu", action="store_true", help="run without a GPU (small models only)")
    gf.set_defaults(func=_finetune)
    gs = gr_sub.add_parser(
        "train-selector",
        help="tune a sentence encoder on labels for the `similar` selector (-p selector_encoder=OUT; CPU minutes)",
    )
    gs.add_argument("labels", type=Path, help="labels of training questions from `graphraft labels`")
    gs.add_argument("--out", type=Path, required=True, help="the tuned encoder's directory")
    gs.add_argument(
        "--base", help="a sentence-transformers directory to start from (default: the graph encoder all-MiniLM-L6-v2)"
    )
    gs.add_argument("--epochs", type=int, default=1)
    gs.add_argument("--batch-size", type=int, default=32)
    gs.add_argument("--lr", type=float, default=2e-5)
    gs.add_argument("--negatives", type=int, default=3, help="hard negatives drawn per label")
    gs.add_argument(
        "--mine-with",
        help="a tuned encoder: train on the negatives it reads closest (a second round; with --base the same)",
    )
    gs.set_defaults(func=_train_selector)


def _labels(args: argparse.Namespace) -> int:
    """Labels for a question file with the retriever's own entity and template steps; prints
    their statistics and the oracle ceiling, and with --run the selection accuracy of a run."""
    from sagegraph.cliargs import graph_dir, key_values, llm_config
    from sagegraph.corpus.jsonl import ErrorPolicy
    from sagegraph.corpus.questions import load_questions
    from sagegraph.retrieve.graph_index import GraphIndex
    from sagegraph.retrieve.graphraft.labels import label_questions, label_stats, selection_accuracy
    from sagegraph.retrieve.graphraft.retriever import GraphRAFTRetriever
    from sagegraph.retrieve.registry import get_retriever
    from sagegraph.retrieve.resources import open_resources

    g = GraphIndex(graph_dir(args.graph_dir))
    questions = load_questions(Path(args.questions), ErrorPolicy("raise"))[: args.limit or None]
    res = open_resources(g, llm_config(args, args.ner == "llm"))
    try:
        retriever = get_retriever(GraphRAFTRetriever.name, res, ner=args.ner, **key_values(args.param))
        assert isinstance(retriever, GraphRAFTRetriever)
        rows = label_questions(
            retriever,
            questions,
            args.out,
            k=args.k,
        )
    finally:
        res.close()
    out = {"labels": str(args.out), "ner": args.ner, **label_stats(rows, k=args.k)}
    if args.run:
        out["selection"] = selection_accuracy(args.run, rows)
    print(json.dumps(out))
    return 0


def _export(args: argparse.Namespace) -> int:
    from sagegraph.retrieve.graphraft.labels import export_labels

    print(json.dumps({"records": export_labels(args.labels, args.file), "file": str(args.file)}))
    return 0


def _finetune(args: argparse.Namespace) -> int:
    from sagegraph.retrieve.graphraft.finetune import FinetuneConfig, finetune

    cfg = FinetuneConfig(
        epochs=args.epochs,
        lr=args.lr,
        r=args.r,
        alpha=args.alpha,
        batch_size=args.batch_size,
        max_steps=args.max_steps,
        allow_cpu=args.allow_cpu,
    )
    print(json.dumps(finetune(args.records, args.model, args.out, cfg)))
    return 0


def _train_selector(args: argparse.Namespace) -> int:
    from sagegraph.retrieve.graphraft.labels import read_labels
    from sagegraph.retrieve.kb.chain_encoder import train_selector_encoder

    info = train_selector_encoder(
        read_labels(args.labels),
        args.out,
        base=args.base,
        epochs=args.epochs,
        batch_size=args.batch_size,
        lr=args.lr,
        negatives=args.negatives,
        report=lambda line: print(line, file=sys.stderr, flush=True),
        mine_with=args.mine_with,
    )
    print(json.dumps({"out": str(args.out), **info}))
    return 0
