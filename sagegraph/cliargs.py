"""Command-line values every command reads the same way (`--param key=value`, a graph given as a
build's output dir, `--llm` / `--cache-mode`), below the CLI so that a method's own commands
(`sagegraph dgr ...`, registered from its package) read them as the CLI does."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from sagegraph.config import LLMConfig, load_llm_config
from sagegraph.errors import SageGraphError


def key_values(pairs: list[str] | None) -> dict:
    """--param key=value (value read as JSON when it parses: 3, 0.5, true, ["a"]; else text)."""
    out = {}
    for pair in pairs or []:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise SageGraphError(f"--param {pair!r}: expected key=value")
        try:
            out[key] = json.loads(value)
        except json.JSONDecodeError:
            out[key] = value
    return out


def graph_dir(path: Path) -> Path:
    """A build's output dir works as well as its graph/ folder."""
    path = Path(path)
    return (
        path / "graph"
        if not (path / "nodes.parquet").exists() and (path / "graph" / "nodes.parquet").exists()
        else path
    )


def llm_config(args: argparse.Namespace, needs_llm: bool) -> LLMConfig | None:
    """`--llm FILE` (and `--cache-mode`), else the environment's endpoint when the command needs a
    model, else None."""
    if getattr(args, "llm", None):
        cfg = load_llm_config(args.llm)
    elif needs_llm:
        cfg = LLMConfig()  # the environment alone: OPENAI_BASE_URL / OPENAI_API_KEY
    else:
        return None
    if getattr(args, "cache_mode", None):
        cfg.cache_mode = args.cache_mode
    return cfg
