"""Seconds per DGR step on the local server with prompt-prefix reuse on and off.

An agent resends its whole history every step, so step t's prompt is step t-1's plus one reply and
one observation. llama.cpp keeps the last prompt's KV state and evaluates only the new suffix when
the next prompt starts with it ("on"); "off" sends an unrelated short prompt between steps, so each
step evaluates its whole history. The benchmark starts its own server (the local model, no RAM
cache, so nothing but the last prompt can be reused) on a spare port, replays the requests of
recorded trajectories from a dgr run (the histories the model really saw; the observations come
from the run, no tool runs) with greedy decoding and a fixed 32-token reply, and times each step.

    .venv/bin/python -m benchmarks.dgr_prompt_cache RUN_DIR [--trajectories 3] [--steps 8] [--threads 2]

Pause any other server on the machine first (`kill -STOP`), or the two share the cores. Prints one
JSON line: seconds per step in each mode, their ratio, and prompt tokens per step.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import time
import urllib.request
from pathlib import Path

import numpy as np

from benchmarks.machine import machine
from sagegraph.local_model import MODEL_ALIAS, default_model_path, serve_command
from sagegraph.runfiles import read_traces

FLUSH = [{"role": "user", "content": "Name three colours."}]


def step_requests(run_dir: Path, trajectories: int, steps: int) -> list[list[list[dict]]]:
    """Per trajectory, the message lists of its first `steps` calls (the longest agents first)."""
    agents = [a for row in read_traces(run_dir / "traces.jsonl") for a in row.get("agents") or []]
    agents.sort(key=lambda a: -a["steps"])
    out = []
    for a in agents[:trajectories]:
        msgs = a["messages"]
        cuts = [i for i, m in enumerate(msgs) if m["role"] == "assistant"][:steps]
        out.append([msgs[:i] for i in cuts])
    return out


def wait_ready(url: str, timeout: float = 120.0) -> None:
    t0 = time.time()
    while time.time() - t0 < timeout:
        try:
            urllib.request.urlopen(url + "/models", timeout=2)
            return
        except OSError:
            time.sleep(1)
    raise RuntimeError(f"server at {url} did not start in {timeout:.0f} s")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("run_dir", type=Path)
    ap.add_argument("--trajectories", type=int, default=3)
    ap.add_argument("--steps", type=int, default=8)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--port", type=int, default=8091)
    args = ap.parse_args()
    from openai import OpenAI

    reqs = step_requests(args.run_dir, args.trajectories, args.steps)
    cmd = serve_command(default_model_path(), port=args.port, threads=args.threads, prompt_cache=False)
    server = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{args.port}/v1"
    try:
        wait_ready(url)
        client = OpenAI(base_url=url, api_key="unused", timeout=600)

        def ask(messages: list[dict]) -> tuple[float, int]:
            t = time.perf_counter()
            r = client.chat.completions.create(model=MODEL_ALIAS, messages=messages, max_tokens=32, temperature=0.0)
            return time.perf_counter() - t, r.usage.prompt_tokens

        ask(FLUSH)
        result: dict[str, list[float]] = {"on": [], "off": []}
        tokens: list[list[int]] = []
        for traj in reqs:
            ask(FLUSH)
            toks = []
            for messages in traj:  # on: each step extends the last prompt
                s, n = ask(messages)
                result["on"].append(s)
                toks.append(n)
            tokens.append(toks)
            for messages in traj:  # off: an unrelated prompt in between
                ask(FLUSH)
                result["off"].append(ask(messages)[0])
    finally:
        server.terminate()
        server.wait(timeout=30)
    on, off = np.mean(result["on"]), np.mean(result["off"])
    print(
        json.dumps(
            {
                "benchmark": "dgr_prompt_cache",
                "machine": machine(),
                "model": MODEL_ALIAS,
                "run": str(args.run_dir),
                "trajectories": len(reqs),
                "steps": sum(len(t) for t in reqs),
                "reply_tokens": 32,
                "seconds_per_step_cache_on": round(float(on), 2),
                "seconds_per_step_cache_off": round(float(off), 2),
                "off_over_on": round(float(off / on), 2),
                "prompt_tokens_per_step": tokens,
            }
        )
    )


if __name__ == "__main__":
    main()
