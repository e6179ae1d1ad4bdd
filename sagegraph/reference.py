"""docs/reference.md, generated from the code itself: every CLI command with its options, every
field of a build config and a sweep file with its type, default and meaning, and every
retriever's parameters. Written by `make docs` (`python -m sagegraph.reference`); a test fails
when the page and the code disagree, so the reference cannot go stale."""

from __future__ import annotations

import argparse
import sys
import typing
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from sagegraph.cli import parser
from sagegraph.config import BuildConfig
from sagegraph.eval.sweep import GridBlock, SweepConfig
from sagegraph.retrieve.base import GroupedParams
from sagegraph.retrieve.registry import retriever_class, retriever_names

PAGE = Path(__file__).resolve().parents[1] / "docs" / "reference.md"


def _type(annotation: Any) -> str:
    if typing.get_origin(annotation) is typing.Literal:
        return " \\| ".join(repr(a) for a in typing.get_args(annotation))
    text = getattr(annotation, "__name__", None) if typing.get_origin(annotation) is None else None
    text = text or str(annotation).replace("typing.", "").replace("pathlib.", "").replace("NoneType", "None")
    return text.replace("|", "\\|")


def _cell(text: Any) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def _nested(annotation: Any) -> type[BaseModel] | None:
    for a in (annotation, *typing.get_args(annotation)):
        if isinstance(a, type) and issubclass(a, BaseModel):
            return a
    return None


def model_rows(model: type[BaseModel], prefix: str = "") -> list[str]:
    """One table row per field, nested settings as `section.field`."""
    rows = []
    for name, info in model.model_fields.items():
        key = f"{prefix}{name}"
        sub = _nested(info.annotation)
        if sub is not None and sub is not model and typing.get_origin(info.annotation) is not list:
            rows.extend(model_rows(sub, f"{key}."))
            continue
        default = info.get_default(call_default_factory=True)
        if info.is_required():
            shown = "required"
        elif isinstance(default, Path):
            shown = f"`{default}`"
        else:
            shown = f"`{default!r}`" if not isinstance(default, BaseModel) else "(section)"
        rows.append(f"| `{key}` | {_type(info.annotation)} | {_cell(shown)} | {_cell(info.description or '')} |")
    return rows


def _table(rows: list[str]) -> list[str]:
    return ["| key | type | default | meaning |", "|---|---|---|---|", *rows, ""]


def _commands(p: argparse.ArgumentParser, prefix: str = "sagegraph") -> list[str]:
    out = []
    for action in p._actions:
        if not isinstance(action, argparse._SubParsersAction):
            continue
        helps = {a.dest: a.help for a in action._choices_actions}
        for name, sub in action.choices.items():
            out += [f"### `{prefix} {name}`", "", _cell(helps.get(name) or ""), ""]
            options = [a for a in sub._actions if not isinstance(a, (argparse._HelpAction, argparse._SubParsersAction))]
            if options:
                out += ["| argument | meaning |", "|---|---|"]
                for a in options:
                    flags = ", ".join(f"`{s}`" for s in a.option_strings) or f"`{a.dest}`"
                    default = (
                        f" (default: `{a.default}`)"
                        if a.option_strings and a.default not in (None, False, argparse.SUPPRESS)
                        else ""
                    )
                    out.append(f"| {flags} | {_cell(a.help or '')}{_cell(default)} |")
                out.append("")
            out += _commands(sub, f"{prefix} {name}")
    return out


def render() -> str:
    lines = [
        "# Reference",
        "",
        "Generated from the code by `make docs` (`python -m sagegraph.reference`); a test keeps it equal to the code.",
        "Back to the [README](../README.md).",
        "",
        "## Commands",
        "",
    ]
    lines += _commands(parser())
    lines += ["## Build config (`sagegraph build CONFIG`)", "", "YAML; unknown keys are refused with their path.", ""]
    lines += _table(model_rows(BuildConfig))
    lines += ["## Sweep file (`sagegraph sweep FILE`)", ""]
    lines += _table(model_rows(SweepConfig))
    lines += [
        "### A grid block (`grid:` entries)",
        "",
        "Besides these keys a block takes any parameter of one of its retrievers (a list is an axis) and a "
        "retriever's own"
        " grid keys (SAGE: `total_k`, `seed_share`); a key no retriever of the block takes is refused.",
        "",
    ]
    lines += _table(model_rows(GridBlock))
    lines += ["## Retriever parameters (`-p KEY=VALUE`, or a sweep block's `params`)", ""]
    for name in retriever_names():
        cls = retriever_class(name)
        doc = (cls.__doc__ or "").strip().splitlines()
        lines += [f"### `{name}`", "", _cell(doc[0]) if doc else "", ""]
        groups = cls.Params.groups() if issubclass(cls.Params, GroupedParams) else {}
        if groups:  # by concern, each parameter under its own name
            for group, model in groups.items():
                lines += [f"{group}: {_cell((model.__doc__ or '').strip())}", ""] + _table(model_rows(model))
            continue
        rows = model_rows(cls.Params)
        lines += _table(rows) if rows else ["No parameters.", ""]
    return "\n".join(lines).rstrip() + "\n"


if __name__ == "__main__":
    sys.stdout.write(render())
