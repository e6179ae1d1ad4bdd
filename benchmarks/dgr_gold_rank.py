"""Where the gold answers sit in DGR's fallback ranking (`fallback: chain`), per question: the
position of the first gold answer in the whole list `rank_chains` returns (not cut at k), so a
change to the ranking can be read as a distance moved, not only as Hit@1 on a few questions. Gold
is read only to score the list (a diagnostic; it reaches no retrieval path). The agents' replies are
replayed from the reply cache (0 calls; a request without a recorded reply is an error).

    .venv/bin/python -m benchmarks.dgr_gold_rank work/sweeps/kb-synth-all --where family=three_hop \\
        -p n_agents=1 -p t_max=10 [-p chain_order=0] [--llm conf/llm_local.yaml]

Questions: the sweep directory's `questions.sample.jsonl`. Prints a line per question, then one
JSON line: positions (None: no gold answer ranked, or the agents answered themselves), their
median and how many are first.
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path

from benchmarks.machine import machine
from sagegraph.cliargs import key_values
from sagegraph.config import load_llm_config
from sagegraph.corpus.questions import matching_questions
from sagegraph.eval.evaluate import read_questions
from sagegraph.retrieve.dgr.retriever import DGRRetriever
from sagegraph.retrieve.graph_index import GraphIndex
from sagegraph.retrieve.resources import open_resources


class RankSpy(DGRRetriever):
    """DGR keeping each fallback ranking it makes, whole."""

    def rank_chains(self, query, run, named=None):
        ranked = super().rank_chains(query, run, named)
        self.rankings.append(ranked)
        return ranked


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("sweep", type=Path, help="a sweep directory (its questions.sample.jsonl)")
    ap.add_argument("--graph", type=Path, help="the built graph (default: read from the sweep's first run)")
    ap.add_argument("--where", action="append", default=[], help="FIELD=VALUE: keep questions whose field has this value")
    ap.add_argument("-p", "--param", action="append", default=[], help="a DGR parameter, KEY=VALUE")
    ap.add_argument("--llm", type=Path, default=Path("conf/llm_local.yaml"))
    args = ap.parse_args()
    graph = args.graph or Path(json.loads(next((args.sweep / "runs").glob("*/config.json")).read_text())["graph"])
    questions = read_questions(args.sweep / "questions.sample.jsonl")
    questions = matching_questions(questions, dict(cond.split("=", 1) for cond in args.where))
    llm = load_llm_config(args.llm)
    llm.cache_mode = "replay"
    g = GraphIndex(graph)
    res = open_resources(g, llm)
    dgr = RankSpy(res, DGRRetriever.Params(**key_values(args.param)))
    positions: dict[str, int | None] = {}
    for q in questions:
        dgr.rankings = []
        dgr.search(q.text, 1)
        gold = set(g.rows_for_ids(list(q.gold_sources)))
        firsts = [next((i for i, r in enumerate(ranked) if r in gold), None) for ranked in dgr.rankings]
        found = [p for p in firsts if p is not None]
        positions[q.id] = min(found) if found else None
        print(f"{q.id}: first gold answer at {positions[q.id]} of {max((len(r) for r in dgr.rankings), default=0)} ranked  {q.text}")
    known = [p for p in positions.values() if p is not None]
    print(json.dumps({"benchmark": "dgr_gold_rank", "machine": machine(), "sweep": str(args.sweep), "params": args.param,
                      "questions": len(positions), "first": sum(p == 0 for p in known),
                      "median_position": statistics.median(known) if known else None, "positions": positions}))


if __name__ == "__main__":
    main()
