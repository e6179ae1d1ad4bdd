"""The schema card an LLM planner reads: the store's own introspection (labels with counts, typed
properties with example values, every relationship pattern) plus an optional per-KB hints file
(property formats and a few worked examples, as SAGE's App. H prompts carry). Constraint errors are
a third of SPARK's failures (sage.txt Table 7), so formats and examples are worth their tokens."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import yaml

from sagegraph.errors import ConfigError
from sagegraph.model import SIMILAR_PREFIX
from sagegraph.store.base import GraphStore
from sagegraph.store.mapping import safe_label
from sagegraph.store.schema import GraphSchema

NAME_KEYS = ("name", "title")
# A stored instance is shown whole or not at all (a cut name would be one the KB does not hold):
# one node with a 100k-character name made every planner prompt ~200 KB, past a local model's context.
EXAMPLE_ROWS = 5
MAX_EXAMPLE_CHARS = 240


def load_hints(path: Path | None) -> dict[str, Any]:
    if path is None or not Path(path).exists():
        return {}
    try:
        data = yaml.safe_load(Path(path).read_text(encoding="utf-8")) or {}
    except yaml.YAMLError as exc:
        raise ConfigError(f"{path}: not valid YAML: {exc}") from None
    if not isinstance(data, dict) or not set(data) <= {"properties", "examples"}:
        raise ConfigError(
            f"{path}: a hints file holds `properties:` (Label.key: text) and `examples:` (question, cypher)"
        )
    for i, ex in enumerate(data.get("examples") or []):
        if not isinstance(ex, dict) or not {"question", "cypher"} <= set(ex):
            raise ConfigError(f"{path}: examples[{i}]: needs `question` and `cypher`")
    return data


def kb_only(schema: GraphSchema) -> GraphSchema:
    """The schema without the build's SIMILAR_* edges: on a KB they relate nodes by their text, so a
    planner that walks them answers with look-alikes instead of following the KB's facts."""
    return dataclasses.replace(
        schema,
        relationship_types=[r for r in schema.relationship_types if not r.startswith(SIMILAR_PREFIX)],
        patterns=[p for p in schema.patterns if not p[1].startswith(SIMILAR_PREFIX)],
    )


def _example(v: Any) -> str:
    return repr(v) if isinstance(v, str) else str(v)


def cypher_literal(v: Any) -> str:
    if isinstance(v, str):
        return "'" + v.replace("\\", "\\\\").replace("'", "\\'") + "'"
    return str(v)


def node_literal(label: str, props: dict[str, Any]) -> str:
    """`(:Label {name: 'X'})` with the node's own name property (name, else title), as stored."""
    key = next((k for k in NAME_KEYS if props.get(k) not in (None, "")), None)
    return f"(:{label} {{{key}: {cypher_literal(props[key])}}})" if key else f"(:{label})"


def pattern_examples(store: GraphStore, patterns: list[tuple[str, str, str]]) -> dict[tuple[str, str, str], str]:
    """One stored instance of every relationship pattern, read from this KB, so a small model sees
    the direction in use, `(:Movie {name: 'Kismet'})-[:directed_by]->(:Person {name: '...'})`,
    rather than only the pattern."""
    out = {}
    for a, r, b in patterns:
        rows = store.read(
            f"MATCH (x:{safe_label(a)})-[:{safe_label(r)}]->(y:{safe_label(b)}) RETURN x, y LIMIT {EXAMPLE_ROWS}",
            max_rows=EXAMPLE_ROWS,
            timeout_ms=10_000,
        )
        for row in rows:  # the first instance whose names are short enough to show whole
            shown = f"{node_literal(a, row['x'])}-[:{r}]->{node_literal(b, row['y'])}"
            if len(shown) <= MAX_EXAMPLE_CHARS:
                out[(a, r, b)] = shown
                break
    return out


def schema_card(
    schema: GraphSchema,
    hints: dict[str, Any] | None = None,
    max_examples: int = 2,
    examples: dict[tuple[str, str, str], str] | None = None,
) -> str:
    """`examples` (`pattern_examples`) shows a stored instance beside each relationship pattern."""
    hints = hints or {}
    notes = hints.get("properties") or {}
    lines = ["Node labels (count) and their properties (type, example values):"]
    for label in sorted(schema.properties, key=lambda lab: -schema.label_counts.get(lab, 0)):
        lines.append(f"(:{label}) {schema.label_counts.get(label, 0)} nodes")
        for key, info in schema.properties[label].items():
            ex = ", ".join(_example(v) for v in info.examples[:max_examples])
            note = notes.get(f"{label}.{key}")
            lines.append(f"  {key}: {info.type}" + (f" e.g. {ex}" if ex else "") + (f"  -- {note}" if note else ""))
    lines.append("Relationships (direction matters):")
    examples = examples or {}
    lines += [
        f"  (:{a})-[:{r}]->(:{b})" + (f"   e.g. {examples[(a, r, b)]}" if (a, r, b) in examples else "")
        for a, r, b in schema.patterns
    ]
    lines.append("Every node has a unique `id` property: return the answer nodes' ids (RETURN DISTINCT n.id AS id).")
    for key, note in notes.items():
        label, _, prop = key.partition(".")
        if label not in schema.properties or prop not in schema.properties[label]:
            lines.append(f"Note on {key}: {note}")
    worked = hints.get("examples") or []
    if worked:
        lines.append("Examples:")
        for ex in worked:
            lines.append(f"  Q: {ex['question']}\n  Cypher: {ex['cypher']}")
    return "\n".join(lines)
