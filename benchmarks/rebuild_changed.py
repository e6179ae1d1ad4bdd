"""A rebuild after the corpus changed, against a build from nothing of the same corpus: the seconds
per stage of each, and what the rebuild reused.

    .venv/bin/python -m benchmarks.rebuild_changed [--docs 300] [--added 10] [--out work/bench-rebuild]

A generic corpus of the first `--docs` OTT-QA dev passages is built as `sagegraph build` builds it
(the embedded store, heuristic metadata; the first build through the Prefect flow, a small change
in the process itself); `--added` passages are appended and the same command runs
again, then once more unchanged, then with one passage in the middle edited; the grown corpus
is then built in a fresh directory with fresh caches. Prints one JSON line.
"""

from __future__ import annotations

import argparse
import functools
import json
import shutil
import time
from pathlib import Path

from benchmarks.machine import machine


def _passages(n: int) -> list[dict]:
    from sagegraph.config import SHARED_OTTQA

    out = []
    with (SHARED_OTTQA / "passages.jsonl").open(encoding="utf-8") as f:
        for line in f:
            p = json.loads(line)
            out.append({"id": p["id"], "title": p["id"].rsplit("/", 1)[-1].replace("_", " "), "text": p["text"]})
            if len(out) == n:
                break
    return out


def _build(cfg_path: Path, flow: bool = False) -> tuple[dict, float]:
    """One `sagegraph build` as the CLI decides it: nothing when up to date, a small change in this
    process (unless `flow`, as `--flow`), anything else through the Prefect flow on a Dask
    LocalCluster."""
    from sagegraph.config import load_config
    from sagegraph.construct.inprocess import build_in_process
    from sagegraph.construct.stages import resolve_corpus, up_to_date, warm_up
    from sagegraph.flows.build_graph import build_graph
    from sagegraph.flows.runtime import fans_out, flow_runtime

    cfg = load_config(cfg_path)
    t0 = time.perf_counter()
    resolved, changes = resolve_corpus(cfg)
    if changes is not None and changes.empty and (done := up_to_date(resolved)) is not None:
        result = {**done, "changes": changes.as_dict(), "ran": "nothing"}
    elif not flow and not fans_out(changes, cfg.runner):
        result = {**build_in_process(cfg), "ran": "in process"}
    else:
        with flow_runtime(cfg.out, cfg.runner, warm=functools.partial(warm_up, cfg)) as (_, runner):
            result = {**build_graph.with_options(task_runner=runner)(cfg), "ran": "flow"}
    return result, round(time.perf_counter() - t0, 1)


def _config(root: Path, name: str, docs: Path) -> Path:
    import yaml

    path = root / f"{name}.yaml"
    path.write_text(
        yaml.safe_dump(
            {
                "name": name,
                "out": str((root / name).resolve()),
                "corpus": {"kind": "generic", "documents": str(docs.resolve())},
                "metadata": {"mode": "heuristic"},
                "runner": {"n_workers": 2},
            }
        )
    )
    return path


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--docs", type=int, default=300)
    ap.add_argument("--added", type=int, default=10)
    ap.add_argument("--out", default="work/bench-rebuild")
    ap.add_argument("--flow", action="store_true", help="every build through the flow, as `sagegraph build --flow`")
    args = ap.parse_args()
    root = Path(args.out)
    if root.exists():
        shutil.rmtree(root)
    root.mkdir(parents=True)
    passages = _passages(args.docs + args.added)
    living, grown = root / "living.jsonl", root / "grown.jsonl"
    living.write_text("".join(json.dumps(p) + "\n" for p in passages[: args.docs]))
    cfg = _config(root, "living", living)
    first, first_s = _build(cfg, args.flow)
    with living.open("a", encoding="utf-8") as f:
        f.write("".join(json.dumps(p) + "\n" for p in passages[args.docs :]))
    rebuilt, rebuilt_s = _build(cfg, args.flow)
    same, same_s = _build(cfg, args.flow)
    shutil.copy(living, grown)
    # one passage in the middle edited: its batch (and at most the next) is redone, not every one after it
    lines = living.read_text(encoding="utf-8").splitlines()
    middle = json.loads(lines[len(lines) // 2])
    lines[len(lines) // 2] = json.dumps({**middle, "text": middle["text"] + " (edited)"})
    living.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    edited, edited_s = _build(cfg, args.flow)
    scratch, scratch_s = _build(_config(root, "scratch", grown), args.flow)

    def row(r: dict, s: float) -> dict:
        return {
            "seconds": s,
            "ran": r["ran"],
            "stage_seconds": r["stage_seconds"],
            "encode_seconds": r["encode_seconds"],
            "nodes": r["counts"]["nodes"],
            "edges": r["edges"],
            "resumed_batches": r["resumed_batches"],
            "changes": (r.get("changes") or {}).get("counts"),
            "up_to_date": bool(r.get("up_to_date")),
            "store": {k: (r.get("store") or {}).get(k) for k in ("mode", "seconds", "rows_written", "difference")},
        }

    print(
        json.dumps(
            {
                "benchmark": "rebuild_changed",
                "machine": machine(),
                "docs": args.docs,
                "flow": args.flow,
                "added": args.added,
                "first_build": row(first, first_s),
                "rebuild_after_adding": row(rebuilt, rebuilt_s),
                "rebuild_unchanged": row(same, same_s),
                "rebuild_after_editing_one": row(edited, edited_s),
                "scratch_build_of_the_grown_corpus": row(scratch, scratch_s),
                "rebuild_over_scratch": round(rebuilt_s / scratch_s, 3),
                "same_graph": rebuilt["counts"] == scratch["counts"] and rebuilt["edges"] == scratch["edges"],
            }
        )
    )


if __name__ == "__main__":
    main()
