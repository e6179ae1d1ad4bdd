"""The docs say what the code does: the generated reference equals the code (every command, every
config field, every retriever parameter), and every relative link in the Markdown resolves."""

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_the_reference_page_is_the_code_s_own():
    from sagegraph.reference import PAGE, render

    assert PAGE.read_text() == render(), "docs/reference.md is stale: run `make docs`"


def test_every_command_and_config_field_is_in_the_reference():
    from sagegraph.cli import parser
    from sagegraph.config import BuildConfig
    from sagegraph.eval.sweep import SweepConfig
    from sagegraph.reference import PAGE

    page = PAGE.read_text()
    sub = next(a for a in parser()._actions if a.dest == "command")
    assert all(f"### `sagegraph {name}`" in page for name in sub.choices)
    for model in (BuildConfig, SweepConfig):
        for name, info in model.model_fields.items():
            assert f"`{name}" in page, name


def test_every_relative_link_in_the_markdown_resolves():
    pages = [ROOT / "README.md", ROOT / "CONTRIBUTING.md", ROOT / "CHANGELOG.md", *sorted((ROOT / "docs").glob("*.md"))]
    broken = []
    for page in pages:
        for target in re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", page.read_text()):
            if "://" not in target and not (page.parent / target).exists():
                broken.append(f"{page.relative_to(ROOT)} -> {target}")
    assert not broken, broken
