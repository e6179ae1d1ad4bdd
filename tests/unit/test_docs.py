"""The docs say what the code does: the generated reference equals the code (every command, every
config field, every retriever parameter), and every relative link in the Markdown resolves."""

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


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
        for name in model.model_fields:
            assert f"`{name}" in page, name


def test_every_relative_link_in_the_markdown_resolves():
    pages = [
        ROOT / "README.md",
        ROOT / "CONTRIBUTING.md",
        ROOT / "CHANGELOG.md",
        *sorted((ROOT / "docs").glob("*.md")),
        *sorted((ROOT / "experiments").rglob("*.md")),
    ]
    broken = []
    for page in pages:
        for target in re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", page.read_text()):
            if "://" not in target and not (page.parent / target).exists():
                broken.append(f"{page.relative_to(ROOT)} -> {target}")
    assert not broken, broken


HISTORY = re.compile(r"session [0-9]|asked again|earlier machine", re.IGNORECASE)


def test_the_readme_is_short_and_the_docs_tell_no_history():
    assert len((ROOT / "README.md").read_text().splitlines()) <= 150
    pages = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
    told = [
        f"{page.relative_to(ROOT)}:{n}"
        for page in pages
        for n, line in enumerate(page.read_text().splitlines(), 1)
        if HISTORY.search(line)
    ]
    assert not told, told


def test_conf_holds_what_a_user_starts_from_each_named_in_the_docs():
    configs = sorted((ROOT / "conf").glob("*.yaml"))
    assert 0 < len(configs) <= 15
    docs = "\n".join(
        page.read_text() for page in [ROOT / "README.md", ROOT / "Makefile", *(ROOT / "docs").glob("*.md")]
    )
    assert not [c.name for c in configs if f"conf/{c.name}" not in docs]


def test_every_study_has_a_readme_naming_its_question_and_outcome():
    studies = [d for d in (ROOT / "experiments").iterdir() if d.is_dir()]
    assert studies
    for study in studies:
        readme = (study / "README.md").read_text()
        assert "**Question.**" in readme and "**Outcome" in readme, study.name
