"""A KB of STaRK-PRIME's shape built, opened and queried at several sizes: what a user who brings a
PRIME-sized KB can expect on this machine, and the curve to extrapolate from.

    .venv/bin/python -m benchmarks.scale [--scales 0.1,0.3,1] [--work work/scale] [--plot docs/img/scale.png]

Per size: the KB written by ../shared/tools/prime_like_kb.py (PRIME's ten node types and counts, its
relation types, Zipf degrees; 6.38M relations at 1x), then `sagegraph build` in a fresh folder
with the defaults (`corpus.kind: kb`, heuristic metadata, embedded FalkorDB) while the RSS of every
process of the build (the CLI, Dask workers, the store server) is summed twice a second. Reported:
wall seconds per stage and rows per second, the build's peak memory, the store's open time, and
query latency p50/p95 of hybrid, SAGE and DGR's chain fallback on the generator's one-hop
questions (ordinary nodes) and on questions naming the ten highest-degree nodes (hubs), and of
SPARK, AF and GraphRAFT on a loopback endpoint with scripted replies (their work outside the
model; not a model, not a quality figure). `--cache FROM` copies an embedding cache
first (say so when you report: encoding is then skipped). One JSON line per size.

    .venv/bin/python -m benchmarks.scale --scales 0.1 --encode-sample 4000

compares, on N texts the build of that size encoded, a plain sentence-transformers loop (one
process, all cores) with sagegraph's encoder run the same way; `--against-plain` times, right after
each build, a plain loop over every text that build encoded and reports the build's whole chunk,
metadata and embed stage against it (the encoding target, as a ratio of one run); `--rebuild 0.01` renames 1% of a
built size's nodes, rebuilds it, builds the changed KB again from nothing (embedding cache copied)
and compares the two graphs. One JSON line per size.
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from benchmarks.machine import PeakMemory, machine
from sagegraph.corpus.records import Question
from sagegraph.loopback import FakeOpenAI
from sagegraph.ownership import mark

ROOT = Path(__file__).resolve().parents[1]
GENERATOR = ROOT.parent / "shared" / "tools" / "prime_like_kb.py"
WORK = ROOT / "work" / "scale"  # where each size's KB, build and figures go, by default
HUBS = 10


def kb_data(work: Path, scale: float) -> Path:
    """Where the PRIME-shaped KB of one size is written (`write_kb`), shared by every benchmark that reads it."""
    return work / f"data-{scale:g}"


def percentiles(ms: list[float]) -> dict[str, float]:
    values = np.asarray(ms)
    return {"p50_ms": round(float(np.percentile(values, 50)), 1), "p95_ms": round(float(np.percentile(values, 95)), 1)}


def write_kb(data: Path, scale: float) -> dict:
    if not (data / "questions.jsonl").exists():
        subprocess.run(
            [sys.executable, str(GENERATOR), str(data), "--scale", str(scale)], check=True, stdout=sys.stderr
        )
    lines = {name: sum(1 for _ in (data / f"{name}.jsonl").open("rb")) for name in ("nodes", "edges")}
    return {"nodes": lines["nodes"], "relations": lines["edges"]}


def build(config: Path, log: Path) -> tuple[dict, float, dict[str, int]]:
    """The build's report, its wall seconds and the peak memory (MiB) of all its processes
    together, the store server's included: the sum of their resident sets, and of their
    proportional set sizes (`PeakMemory`)."""
    with log.open("w") as out:
        started = time.perf_counter()
        process = subprocess.Popen(
            [str(ROOT / ".venv" / "bin" / "sagegraph"), "build", str(config)],
            stdout=subprocess.PIPE,
            stderr=out,
            text=True,
            cwd=ROOT,
        )
        with PeakMemory(pid=process.pid) as peak:  # the build's processes, not this one's indexes
            stdout, _ = process.communicate()
        wall = time.perf_counter() - started
    done = subprocess.CompletedProcess(process.args, process.returncode, stdout)
    if done.returncode != 0:
        raise SystemExit(f"build of {config} failed ({done.returncode}); see {log}")
    memory = {"peak_rss_mb": round(peak.peak_mb), "peak_pss_mb": round(peak.peak_pss_mb)}
    return json.loads(done.stdout.strip().splitlines()[-1]), wall, memory


def hub_questions(graph: Path) -> list[str]:
    """Questions naming the highest-degree nodes, in the generator's phrasing."""
    edges = pq.read_table(graph / "edges.parquet", columns=["src", "dst"])
    ends = pa.chunked_array(edges["src"].chunks + edges["dst"].chunks)
    counts = pc.value_counts(ends).to_pylist()
    top = sorted(counts, key=lambda c: -c["counts"])[:HUBS]
    nodes = pq.read_table(graph / "nodes.parquet", columns=["id", "title"]).to_pydict()
    title = dict(zip(nodes["id"], nodes["title"]))
    return [f"Which nodes are linked to {title[c['values']]}?" for c in top]


LINKED = re.compile(r"linked to (?P<name>.+?)(?: by (?P<relation>.+))?\?$")


def scripted_questions(graph: Path, texts: list[str], answers: dict[str, list[str]]) -> list[Question]:
    """The generator's questions with what a model that read them right would answer: the node
    the question names (`linked to NAME`), the relation it says (`by WORDS`, stored with
    underscores) and the answers' type, as the store labels them. A hub question names no
    relation: its query walks the hub's commonest one to that relation's commonest neighbour type
    (tens of thousands of rows, which the executor's bounds meet). For the scripted endpoint only."""
    from sagegraph.model import safe_label

    nodes = pq.read_table(graph / "nodes.parquet", columns=["id", "title", "type", "source_id"]).to_pydict()
    by_name = {name: (node, kind) for node, name, kind in zip(nodes["id"], nodes["title"], nodes["type"])}
    kind_of = dict(zip(nodes["source_id"], nodes["type"]))
    node_kind = dict(zip(nodes["id"], nodes["type"]))
    found = {text: LINKED.search(text) for text in texts}
    unsaid = {by_name[m["name"]][0] for m in found.values() if m and not m["relation"] and m["name"] in by_name}
    commonest: dict[str, tuple[str, str]] = {}
    if unsaid:
        edges = pq.read_table(graph / "edges.parquet", columns=["src", "dst", "type"])
        for node in unsaid:
            mine = edges.filter(pc.or_(pc.equal(edges["src"], node), pc.equal(edges["dst"], node))).to_pydict()
            pairs = [
                (kind, dst if src == node else src) for src, dst, kind in zip(mine["src"], mine["dst"], mine["type"])
            ]
            relation = max(sorted({k for k, _ in pairs}), key=lambda k: sum(1 for r, _ in pairs if r == k))
            ends = [node_kind[other] for r, other in pairs if r == relation]
            commonest[node] = (relation, max(sorted(set(ends)), key=ends.count))
    out = []
    for at, text in enumerate(texts):
        match = found[text]
        if match is None or match["name"] not in by_name:
            continue
        name = match["name"]
        node, kind = by_name[name]
        if match["relation"]:
            relation = match["relation"].replace(" ", "_")
            answer = kind_of.get(next(iter(answers.get(text, [])), ""))
        else:
            relation, answer = commonest[node]
        target = f"(x:{safe_label(answer)})" if answer else "(x)"
        topic = f'(t:{safe_label(kind)} {{name: "{name}"}})'
        meta = {
            "gold_cypher": f"MATCH {topic}-[:{safe_label(relation)}]-{target} RETURN x",
            "target_type": answer,
            "entities": [{"name": name, "type": kind}],
        }
        out.append(Question(f"s{at}", text, [], meta=meta))
    return out


def scripted_endpoint(questions: list[Question]) -> FakeOpenAI:
    """A loopback endpoint with scripted replies (not a model): SPARK's and AF's from the oracle
    (`sagegraph.eval.oracle`) on `scripted_questions`' queries, GraphRAFT's entity step the named
    node; no delay, so a retriever's time is its own work plus a loopback round trip per call."""
    from sagegraph.eval.oracle import Oracle
    from sagegraph.loopback import completion
    from sagegraph.retrieve.kb.entities import NER_SYSTEM

    oracle = Oracle(questions)
    entities = {q.text: q.meta["entities"] for q in questions}
    ner_start = NER_SYSTEM.split("{")[0]

    def reply(body: dict) -> tuple[int, dict]:
        messages = body.get("messages", [])
        if messages and str(messages[0].get("content", "")).startswith(ner_start):
            asked = str(messages[-1]["content"]).removeprefix("Question: ").strip()
            return 200, completion(json.dumps({"entities": entities.get(asked, [])}))
        return oracle(body)

    return FakeOpenAI(reply)


def query_latency(out: Path, questions: Path) -> dict:
    import sagegraph

    started = time.perf_counter()
    graph = sagegraph.open(out)
    opened = time.perf_counter() - started
    rows = [json.loads(line) for line in questions.open(encoding="utf-8")]
    ordinary = [row["question"] for row in rows]
    hubs = hub_questions(out / "graph")
    result: dict = {"open_s": round(opened, 2)}
    # Questions encoded up front, as `evaluate` and sweeps do: the figures are retrieval time, the
    # encoding per question is its own figure.
    started = time.perf_counter()
    graph.index.encode_queries(ordinary + hubs)
    result["query_encode_ms"] = round((time.perf_counter() - started) * 1000 / len(ordinary + hubs), 1)
    started = time.perf_counter()
    store = graph._resources.store  # the embedded server starts and the graph is checked to be this one
    result["store_open_s"] = round(time.perf_counter() - started, 2) if store is not None else None
    # DGR's chain fallback alone is the non-LLM work of an LLM retriever that walks the KB (its
    # chains of up to 3 relations from the named nodes, bounded on hubs by `WalkBudget`).
    retrievers = {"hybrid": ("hybrid", {}), "sage": ("sage", {}), "dgr_chains": ("dgr", {"n_agents": 0})}
    with graph:
        result.update(timed(graph, retrievers, {"ordinary": ordinary, "hub": hubs}))
    result.update(
        llm_retrievers_latency(
            out, ordinary[:LLM_QUESTIONS], hubs, {row["question"]: row["answer_ids"] for row in rows}
        )
    )
    return result


LLM_QUESTIONS = 50


def llm_retrievers_latency(out: Path, ordinary: list[str], hubs: list[str], answers: dict[str, list[str]]) -> dict:
    """SPARK, AF and GraphRAFT at their defaults on the scripted endpoint: their work outside the
    model (prompts, parsing, grounding, the store's queries, templates and their ranking)."""
    import os
    import tempfile

    import sagegraph
    from sagegraph.config import LLMConfig

    os.environ.setdefault("OPENAI_API_KEY", "scripted")  # the loopback reads no key
    scripted = scripted_questions(out / "graph", ordinary + hubs, answers)
    result: dict = {"scripted_model": "loopback with scripted replies (not a model)"}
    with scripted_endpoint(scripted) as server, tempfile.TemporaryDirectory() as tmp:
        llm = LLMConfig(base_url=server.base_url, model="scripted", cache_dir=Path(tmp), max_retries=1)
        graph = sagegraph.open(out, llm=llm)
        graph.index.encode_queries(ordinary + hubs)
        retrievers = {"spark": ("spark", {}), "af": ("af", {"reranker": "none"}), "graphraft": ("graphraft", {})}
        with graph:
            result.update(timed(graph, retrievers, {"ordinary": ordinary[1:], "hub": hubs}, warm=ordinary[0]))
    return result


def timed(graph, retrievers: dict[str, tuple[str, dict]], groups: dict[str, list[str]], warm: str = "") -> dict:
    """p50/p95 milliseconds of each retriever (label -> name, params) on each group of questions, k =
    20, after one call (`warm`, else the first question) that loads what the retriever reads."""
    result = {}
    for label, (name, params) in retrievers.items():
        graph.retrieve(warm or next(iter(groups.values()))[0], retriever=name, k=20, **params)
        for group, texts in groups.items():
            ms = []
            for text in texts:
                t0 = time.perf_counter()
                graph.retrieve(text, retriever=name, k=20, **params)
                ms.append((time.perf_counter() - t0) * 1000)
            result[f"{label}_{group}"] = percentiles(ms)
    return result


def latency_only(scale: float, work: Path) -> dict:
    """Query latency of a size built before (its build's line, re-measured on a quiet machine)."""
    line = json.loads((work / f"prime-{scale:g}.build.json").read_text())
    line.update(query_latency(work / f"prime-{scale:g}", kb_data(work, scale) / "questions.jsonl"))
    return line


def fresh_folder(out: Path, cache: Path | None = None) -> None:
    """An empty build folder of sagegraph's own (with `cache` copied in, when given)."""
    if out.exists():
        shutil.rmtree(out)
    out.mkdir(parents=True)
    mark(out)  # the build's folder, made here; then the copied cache is sagegraph's own
    if cache is not None:
        shutil.copytree(cache, out / "cache", ignore=shutil.ignore_patterns("llm.sqlite*", "inflight"))


def prepare(out: Path, config: Path, scale: float, data: Path, cache: Path | None) -> None:
    """A fresh build folder (with `cache` copied in, when given) and the build config of `data` into it."""
    fresh_folder(out, cache)
    config.write_text(
        json.dumps(
            {
                "name": f"prime-{str(scale).replace('.', '-')}",
                "out": str(out.resolve()),
                "corpus": {
                    "kind": "kb",
                    "path": str(data.resolve()),
                    "questions": str((data / "questions.jsonl").resolve()),
                },
            }
        )
    )


def run(scale: float, work: Path, cache: Path | None, latency: bool = True, against_plain: bool = False) -> dict:
    data = kb_data(work, scale)
    kb = write_kb(data, scale)
    out, config = work / f"prime-{scale:g}", work / f"prime-{scale:g}.yaml"
    prepare(out, config, scale, data, cache)
    report, wall, memory = build(config, work / f"prime-{scale:g}.log")
    stages = report["stage_seconds"]
    rows = {"ingest": kb["nodes"] + kb["relations"], "chunk_metadata_embed": kb["nodes"], "edges": kb["nodes"]}
    rows.update(finalize_edges=report["edges"], load_store_and_stats=report["edges"])
    return {
        "benchmark": "scale",
        "machine": machine(),
        "scale": scale,
        **kb,
        "graph_edges": report["edges"],
        "build_wall_s": round(wall, 1),
        "build_peak_rss_mb": memory["peak_rss_mb"],
        "build_peak_pss_mb": memory["peak_pss_mb"],
        "encode_seconds": round(report["encode_seconds"], 1),
        "cache_copied": cache is not None,
        "stages": {
            name: {"s": seconds, "rows_per_s": round(rows[name] / seconds) if seconds and name in rows else None}
            for name, seconds in stages.items()
        },
        "outside_stages_s": round(wall - report["seconds"], 1),
        **(
            {"encoding": stage_against_plain_loop(out, stages["chunk_metadata_embed"])}
            if against_plain and cache is None
            else {}
        ),
        **(query_latency(out, data / "questions.jsonl") if latency else {}),
    }


def rename_share(data: Path, share: float, seed: int = 0) -> int:
    """`share` of the KB's nodes renamed in place (the benchmark's own copy): a 1% edit. Each
    seed draws other nodes, and a node renamed before is renamed again."""
    import random

    lines = (data / "nodes.jsonl").read_text(encoding="utf-8").splitlines()
    chosen = set(random.Random(seed).sample(range(len(lines)), int(len(lines) * share)))
    out = []
    for at, line in enumerate(lines):
        node = json.loads(line)
        if at in chosen:
            node["fields"]["name"] = node["fields"]["name"] + f" (renamed {seed})"
        out.append(json.dumps(node))
    (data / "nodes.jsonl").write_text("\n".join(out) + "\n", encoding="utf-8")
    return len(chosen)


def same_graph(a: Path, b: Path, tolerance: float = 1e-5) -> dict:
    """Two graphs compared as a user would: node ids, edge set, weights within `tolerance`."""
    nodes_a, nodes_b = (pq.read_table(g / "nodes.parquet", columns=["id"])["id"] for g in (a, b))
    edges_a, edges_b = (
        pq.read_table(g / "edges.parquet", columns=["src", "dst", "type", "weight"]).sort_by(
            [("src", "ascending"), ("dst", "ascending"), ("type", "ascending")]
        )
        for g in (a, b)
    )
    same_keys = edges_a.select(["src", "dst", "type"]).equals(edges_b.select(["src", "dst", "type"]))
    gap = (
        float(np.abs(edges_a["weight"].to_numpy() - edges_b["weight"].to_numpy()).max())
        if same_keys and edges_a.num_rows
        else None
    )
    return {
        "same_nodes": sorted(nodes_a.to_pylist()) == sorted(nodes_b.to_pylist()),
        "same_edges": bool(same_keys),
        "max_weight_gap": gap,
        "equal": sorted(nodes_a.to_pylist()) == sorted(nodes_b.to_pylist()) and same_keys and (gap or 0.0) <= tolerance,
    }


def rebuild(scale: float, work: Path, share: float, rounds: int = 2) -> Iterator[dict]:
    """The size's build rebuilt `rounds` times, each after another `share` of its nodes were
    renamed: the first rebuild has no generation kept for a rollback yet, the later ones are the
    steady state of scheduled rebuilds. After the last, a build of the changed KB from nothing
    (its embedding cache copied, so only the wall of everything else and the renamed texts'
    encoding differ) is compared with the rebuilt graph, nodes, edges and store. One line per
    round as it ends, then the comparison's."""
    data, out, config = kb_data(work, scale), work / f"prime-{scale:g}", work / f"prime-{scale:g}.yaml"
    full = json.loads((work / f"prime-{scale:g}.build.json").read_text())
    for round_ in range(1, rounds + 1):
        renamed = rename_share(data, share, seed=round_)
        report, wall, memory = build(config, work / f"prime-{scale:g}.rebuild-{round_}.log")
        changes = json.loads((out / "stats" / "changes.json").read_text())  # what changed and what the build redid
        yield (
            {
                "benchmark": "scale_rebuild",
                "machine": machine(),
                "scale": scale,
                "round": round_,
                "renamed_nodes": renamed,
                "rebuild_wall_s": round(wall, 1),
                "full_build_wall_s": full["build_wall_s"],
                "ratio": round(wall / full["build_wall_s"], 3),
                "rebuild_peak_rss_mb": memory["peak_rss_mb"],
                "rebuild_peak_pss_mb": memory["peak_pss_mb"],
                "stage_seconds": report["stage_seconds"],
                "outside_stages_s": round(wall - report["seconds"], 1),
                "changes": changes.get("counts"),
                "work": changes.get("work"),
            }
        )
    fresh, fresh_config = work / f"prime-{scale:g}-fresh", work / f"prime-{scale:g}-fresh.yaml"
    prepare(fresh, fresh_config, scale, data, out / "cache")
    build(fresh_config, work / f"prime-{scale:g}-fresh.log")
    yield {
        "benchmark": "scale_rebuild_equality",
        "machine": machine(),
        "scale": scale,
        "after_round": rounds,
        **same_graph(out / "graph", fresh / "graph"),
        "same_store": same_store(out, fresh),
    }


def same_store(a: Path, b: Path, page: int = 1000, graph: str = "sagegraph") -> bool:
    """The two builds' published store graphs hold the same node ids and (src, type, dst) edges,
    read a page of nodes at a time (the engine bounds one query's memory)."""
    from sagegraph.store import open_store
    from sagegraph.store.loaded import loaded_place

    held = []
    for out in (a, b):
        manifest = json.loads((out / "graph" / "manifest.json").read_text())
        key, _ = loaded_place("falkordb", out, out / "store", graph, manifest["fingerprint"])
        with open_store("falkordb", out / "store", key) as store:
            total = store.count_nodes()
            nodes, edges = [], []
            for skip in range(0, total, page):
                rows = store.read(
                    "MATCH (a) WITH a ORDER BY a.id SKIP $skip LIMIT $page OPTIONAL MATCH (a)-[r]->(b) "
                    "RETURN a.id AS a, type(r) AS t, b.id AS b",
                    {"skip": skip, "page": page},
                    timeout_ms=300_000,
                    max_rows=10**8,
                )
                nodes += {r["a"] for r in rows}
                edges += [(r["a"], r["t"], r["b"]) for r in rows if r["t"] is not None]
        held.append((sorted(nodes), sorted(edges)))
    return held[0] == held[1]


def build_texts(out: Path) -> list[str]:
    """The distinct texts a build of `out` encoded: every field of every node its metadata stage wrote."""
    from sagegraph.construct.fields import FIELDS, field_texts
    from sagegraph.model import read_nodes

    return sorted(
        {
            field_texts(node)[name]
            for path in sorted((out / "stages").glob("metadata-*/*.parquet"))
            for node in read_nodes(path)
            for name in FIELDS
        }
    )


def plain_loop_texts_per_s(texts: list[str]) -> float:
    """Texts per second of a plain sentence-transformers loop over `texts`: one process, all
    cores, `model.encode` (which sorts by length itself), after a warm-up call."""
    import os

    import torch
    from sentence_transformers import SentenceTransformer

    from sagegraph.embed import MINILM, _model_path

    torch.set_num_threads(os.cpu_count() or 1)
    model = SentenceTransformer(_model_path(MINILM), device="cpu")
    model.encode(texts[:64])
    started = time.perf_counter()
    model.encode(texts, batch_size=32)
    return len(texts) / (time.perf_counter() - started)


def encoding_against_plain_loop(out: Path, sample: int, seed: int = 0) -> dict:
    """Texts per second of a plain sentence-transformers loop over a sample of the texts a build
    encoded, against sagegraph's encoder on the same sample in the same way: what the encoder's
    batching, sorting and caching cost or save per text."""
    import random

    from sagegraph.embed import MINILM, SentenceTransformerEncoder

    texts = build_texts(out)
    chosen = random.Random(seed).sample(texts, min(sample, len(texts)))
    plain = plain_loop_texts_per_s(chosen)
    encoder = SentenceTransformerEncoder(MINILM, device="cpu")
    encoder.encode(chosen[:64])
    started = time.perf_counter()
    encoder.encode(chosen)
    ours = len(chosen) / (time.perf_counter() - started)
    return {
        "distinct_texts": len(texts),
        "sample": len(chosen),
        "plain_loop_texts_per_s": round(plain, 1),
        "sagegraph_encoder_texts_per_s": round(ours, 1),
        "ratio": round(ours / plain, 3),
    }


def stage_against_plain_loop(out: Path, stage_seconds: float) -> dict:
    """The build's whole chunk, metadata and embed stage (its wall time, Dask and all) as texts per
    second, against a plain loop over every text that build encoded, measured right after it on
    the same machine: the encoding target's ratio from one run."""
    encoded = json.loads((out / "stats" / "changes.json").read_text())["work"]["encoded"]
    texts = build_texts(out)
    plain = plain_loop_texts_per_s(texts)
    stage = encoded / stage_seconds
    return {
        "texts_encoded": encoded,
        "distinct_texts": len(texts),
        "build_stage_texts_per_s": round(stage, 1),
        "plain_loop_texts_per_s": round(plain, 1),
        "ratio": round(stage / plain, 3),
    }


def plot(lines: list[dict], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    relations = [line["relations"] / 1e6 for line in lines]
    figure, (time_axis, memory_axis) = plt.subplots(1, 2, figsize=(9, 3.5))
    for key, label in (("build_wall_s", "whole build"), ("encode_seconds", "encoding (worker s)")):
        time_axis.plot(relations, [line[key] / 60 for line in lines], "o-", label=label)
    time_axis.set(xlabel="KB relations (millions)", ylabel="minutes", title="build time")
    time_axis.legend()
    sums = (("build_peak_rss_mb", "resident sets summed"), ("build_peak_pss_mb", "proportional sets summed"))
    for key, label in sums:
        if all(key in line for line in lines):
            memory_axis.plot(relations, [line[key] / 1024 for line in lines], "o-", label=label)
    memory_axis.set(xlabel="KB relations (millions)", ylabel="GiB", title="peak memory, all processes")
    memory_axis.legend()
    figure.suptitle(
        f"PRIME-shaped KB on {lines[0]['machine']['cores']} cores ({lines[0]['machine']['cpu']})", fontsize=9
    )
    figure.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, dpi=110)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--scales", default="0.1,0.3,1")
    parser.add_argument("--work", type=Path, default=WORK)
    parser.add_argument("--cache", type=Path, help="an embedding cache to copy in first (encoding skipped)")
    parser.add_argument("--plot", type=Path)
    parser.add_argument("--encode-sample", type=int, help="only compare encoding on N texts of each size's build")
    parser.add_argument(
        "--rebuild", type=float, help="only rebuild each size's build after this share of nodes renamed"
    )
    parser.add_argument("--rounds", type=int, default=2, help="rebuilds in a row, each after another such change")
    parser.add_argument("--latency", action="store_true", help="only measure query latency again on each size's build")
    parser.add_argument("--no-latency", action="store_true", help="build only: no query latency after each build")
    parser.add_argument(
        "--against-plain",
        action="store_true",
        help="after each build, a plain sentence-transformers loop over every text it encoded",
    )
    args = parser.parse_args()
    scales = [float(s) for s in args.scales.split(",")]
    if args.latency:
        lines = []
        for scale in scales:
            line = latency_only(scale, args.work)
            (args.work / f"prime-{scale:g}.build.json").write_text(json.dumps(line))
            print(json.dumps(line), flush=True)
            lines.append(line)
        if args.plot:
            plot(lines, args.plot)
        return
    if args.rebuild:
        for scale in (float(s) for s in args.scales.split(",")):
            for line in rebuild(scale, args.work, args.rebuild, args.rounds):
                print(json.dumps(line), flush=True)
        return
    if args.encode_sample:
        for scale in (float(s) for s in args.scales.split(",")):
            line = encoding_against_plain_loop(args.work / f"prime-{scale:g}", args.encode_sample)
            print(json.dumps({"benchmark": "scale_encoding", "machine": machine(), "scale": scale, **line}))
        return
    args.work.mkdir(parents=True, exist_ok=True)
    lines = []
    for scale in (float(s) for s in args.scales.split(",")):
        line = run(scale, args.work, args.cache, latency=not args.no_latency, against_plain=args.against_plain)
        (args.work / f"prime-{scale:g}.build.json").write_text(json.dumps(line))
        print(json.dumps(line), flush=True)
        lines.append(line)
    if args.plot:
        plot(lines, args.plot)


if __name__ == "__main__":
    main()
