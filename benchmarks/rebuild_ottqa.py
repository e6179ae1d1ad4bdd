"""The full OTT-QA dev corpus built from nothing, then rebuilt after 1% of its sources changed
(passages edited, removed and added), against a build of the changed corpus from nothing.

    .venv/bin/python -m benchmarks.rebuild_ottqa [--work work/rebuild-ottqa] [--share 0.01] [--rounds 2]

The corpus (789 tables, 17,841 passages: `conf/ottqa.yaml`'s settings, heuristic metadata, the
embedded store) is copied into `--work`, so the change is made to a copy. Each round changes
another `--share` of the sources, three fifths of it passages edited, one fifth removed and one
fifth added, and runs `sagegraph build` as a user would (a small change rebuilds in process); the
first round has no generation kept for a rollback yet, the later ones are the steady state of
scheduled rebuilds. After the last round the changed corpus is built in a fresh folder with the
rebuild's embedding cache copied in (so only the changed texts' encoding differs) and the two
graphs and store graphs are compared. One JSON line per build, appended to
`benchmarks/results/rebuild_ottqa.jsonl`.
"""

from __future__ import annotations

import argparse
import json
import random
import shutil
from collections.abc import Iterator
from pathlib import Path

from benchmarks.machine import machine
from benchmarks.scale import ROOT, build, fresh_folder, same_graph, same_store

RESULTS = ROOT / "benchmarks" / "results" / "rebuild_ottqa.jsonl"
STORE_GRAPH = "ottqa"


def write_config(out: Path, data: Path, config: Path) -> None:
    """`conf/ottqa.yaml`'s settings with this benchmark's corpus copy and build folder."""
    import yaml

    settings = yaml.safe_load((ROOT / "conf" / "ottqa.yaml").read_text())
    settings.update({"out": str(out.resolve()), "name": out.name})
    settings["corpus"] = {**settings["corpus"], "path": str(data.resolve())}
    settings["store"] = {**settings["store"], "graph": STORE_GRAPH}
    config.write_text(json.dumps(settings))


def change_share(data: Path, share: float, seed: int) -> dict[str, int]:
    """`share` of the sources changed in place: of that many, three fifths of the passages edited
    (a sentence added), one fifth removed and one fifth added (another passage's text, reworded,
    under a new id). Tables are left as they are: a passage a table links to may be among the
    removed, as in a real update."""
    passages_path = data / "passages.jsonl"
    passages = [json.loads(line) for line in passages_path.read_text(encoding="utf-8").splitlines() if line.strip()]
    tables = sum(1 for line in (data / "tables.jsonl").open(encoding="utf-8") if line.strip())
    total = round(share * (len(passages) + tables))
    rng = random.Random(seed)
    chosen = rng.sample(range(len(passages)), total)
    cut, later = total * 3 // 5, total * 4 // 5
    edited, removed, added = chosen[:cut], set(chosen[cut:later]), chosen[later:]
    for i in edited:
        passages[i]["text"] += f" This passage was revised in round {seed}."
    new = [
        {"id": f"{passages[i]['id']}_(revised_{seed})", "text": f"A revised account ({seed}): {passages[i]['text']}"}
        for i in added
    ]
    kept = [p for i, p in enumerate(passages) if i not in removed] + new
    passages_path.write_text("".join(json.dumps(p, ensure_ascii=False) + "\n" for p in kept), encoding="utf-8")
    return {"edited": len(edited), "removed": len(removed), "added": len(new)}


def run(work: Path, share: float, rounds: int) -> Iterator[dict]:
    data, out, config = work / "data", work / "build", work / "build.json"
    if data.exists():
        shutil.rmtree(data)
    from sagegraph.config import SHARED_OTTQA

    shutil.copytree(SHARED_OTTQA, data)
    for path in data.iterdir():
        path.chmod(0o644)
    fresh_folder(out)
    write_config(out, data, config)
    report, full_wall, memory = build(config, work / "build.log")
    yield {
        "benchmark": "rebuild_ottqa_full",
        "machine": machine(),
        "build_wall_s": round(full_wall, 1),
        "peak_rss_mb": memory["peak_rss_mb"],
        "nodes": report["counts"]["nodes"],
        "edges": report["edges"],
        "stage_seconds": report["stage_seconds"],
        "encode_seconds": report.get("encode_seconds"),
    }
    for round_ in range(1, rounds + 1):
        changed = change_share(data, share, seed=round_)
        report, wall, memory = build(config, work / f"rebuild-{round_}.log")
        changes = json.loads((out / "stats" / "changes.json").read_text())
        yield {
            "benchmark": "rebuild_ottqa",
            "machine": machine(),
            "round": round_,
            "changed_sources": changed,
            "rebuild_wall_s": round(wall, 1),
            "full_build_wall_s": round(full_wall, 1),
            "ratio": round(wall / full_wall, 3),
            "rebuild_peak_rss_mb": memory["peak_rss_mb"],
            "stage_seconds": report.get("stage_seconds"),
            "outside_stages_s": round(wall - report.get("seconds", wall), 1),
            "changes": changes.get("counts"),
            "work": changes.get("work"),
        }
    fresh, fresh_config = work / "fresh", work / "fresh.json"
    fresh_folder(fresh, out / "cache")
    write_config(fresh, data, fresh_config)
    build(fresh_config, work / "fresh.log")
    yield {
        "benchmark": "rebuild_ottqa_equality",
        "machine": machine(),
        "after_round": rounds,
        **same_graph(out / "graph", fresh / "graph"),
        "same_store": same_store(out, fresh, graph=STORE_GRAPH),
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--work", type=Path, default=ROOT / "work" / "rebuild-ottqa")
    parser.add_argument("--share", type=float, default=0.01, help="share of the sources changed each round")
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    args.work.mkdir(parents=True, exist_ok=True)
    for line in run(args.work, args.share, args.rounds):
        text = json.dumps(line)
        print(text, flush=True)
        with RESULTS.open("a", encoding="utf-8") as results:
            results.write(text + "\n")


if __name__ == "__main__":
    main()
