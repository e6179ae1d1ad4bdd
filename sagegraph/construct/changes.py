"""What changed in a corpus since the last build: a content fingerprint per source (table,
document, KB object, KB edge) and the change set between two builds.

A build's stage directories are named by the config they depend on; without the corpus's contents
in that name, a finished ingest was reused for ever and a scheduled rebuild of a changed corpus
served the old graph. The contents enter the name only when they differ from what the config's
first ingest read (`corpus_version`), so every build made before this module keeps its directories,
its run keys and its store, and a corpus edited back to an earlier state finds that state's
finished stages again.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sagegraph.corpus.records import Corpus

KINDS = ("tables", "documents", "kb_nodes", "kb_edges")
SHOWN = 20  # ids listed per kind and change in the change set (the counts are always whole)


def _hash(obj: Any) -> str:
    text = json.dumps(obj, sort_keys=True, ensure_ascii=False, default=str)
    return hashlib.blake2b(text.encode("utf-8"), digest_size=8).hexdigest()


def record_fingerprints(kind: str, records: Iterable[Mapping[str, Any]]) -> dict[str, str]:
    """`kind:id` -> a hash of the record as the build reads it. KB edges have no id: the edge is
    its own key (a repeated edge is a second key), so an edge is added or removed, never changed."""
    out: dict[str, str] = {}
    if kind == "kb_edges":
        seen: Counter[tuple[str, str, str]] = Counter()
        for r in records:
            triple = (str(r["src"]), str(r["type"]), str(r["dst"]))
            seen[triple] += 1
            n = seen[triple]
            out[f"kb_edges:{triple[0]}-[{triple[1]}]->{triple[2]}" + (f"#{n}" if n > 1 else "")] = "1"
        return out
    for r in records:
        out[f"{kind}:{r['id']}"] = _hash(r)
    return out


def corpus_fingerprints(corpus: Corpus) -> dict[str, str]:
    out: dict[str, str] = {}
    for kind in KINDS:
        out.update(record_fingerprints(kind, (dataclasses.asdict(r) for r in getattr(corpus, kind))))
    return out


def ingested_fingerprints(sources_dir: Path) -> dict[str, str] | None:
    """The fingerprints of what an ingest wrote: its `fingerprints.json`, or (an ingest made before
    this module) recomputed from its batch files, which hold the records as read. None when that
    ingest is not finished."""
    manifest = sources_dir / "manifest.json"
    if not manifest.exists():
        return None
    saved = sources_dir / "fingerprints.json"
    if saved.exists():
        return json.loads(saved.read_text(encoding="utf-8"))
    meta = json.loads(manifest.read_text(encoding="utf-8"))
    out: dict[str, str] = {}
    for batch in meta["batches"]:
        raw = json.loads((sources_dir / Path(batch).name).read_text(encoding="utf-8"))
        for kind in ("tables", "documents", "kb_nodes"):
            out.update(record_fingerprints(kind, raw.get(kind, [])))
    edges = sources_dir / "kb_edges.json"
    if edges.exists():
        out.update(record_fingerprints("kb_edges", json.loads(edges.read_text(encoding="utf-8"))))
    return out


def digest(fingerprints: Mapping[str, str]) -> str:
    """One 16-hex name for a whole corpus state."""
    return _hash(sorted(fingerprints.items()))[:16]


@dataclass
class ChangeSet:
    """Sources added, changed and removed between two corpus states, per kind."""

    added: dict[str, list[str]] = field(default_factory=dict)
    changed: dict[str, list[str]] = field(default_factory=dict)
    removed: dict[str, list[str]] = field(default_factory=dict)
    first_build: bool = False

    @property
    def empty(self) -> bool:
        return not (self.added or self.changed or self.removed)

    def counts(self) -> dict[str, dict[str, int]]:
        return {what: {k: len(v) for k, v in getattr(self, what).items()} for what in ("added", "changed", "removed")}

    def as_dict(self) -> dict[str, Any]:
        return {
            "first_build": self.first_build,
            "counts": self.counts(),
            **{
                what: {k: v[:SHOWN] for k, v in getattr(self, what).items()} for what in ("added", "changed", "removed")
            },
        }

    def line(self) -> str:
        """`+4 / ~1 / -0 sources (documents +4, ~1)` for a log line and the CLI."""
        if self.first_build:
            n = sum(len(v) for v in self.added.values())
            return f"first build: {n} sources"
        if self.empty:
            return "corpus unchanged since the last build"
        tot = {w: sum(len(v) for v in getattr(self, w).values()) for w in ("added", "changed", "removed")}
        kinds = sorted(set(self.added) | set(self.changed) | set(self.removed))
        per = ", ".join(
            f"{k} "
            + " ".join(
                f"{s}{len(getattr(self, w).get(k, []))}"
                for w, s in (("added", "+"), ("changed", "~"), ("removed", "-"))
                if getattr(self, w).get(k)
            )
            for k in kinds
        )
        return f"corpus changed: +{tot['added']} added, ~{tot['changed']} changed, -{tot['removed']} removed ({per})"

    def markdown(self, stage_seconds: Mapping[str, float] | None = None, work: Mapping[str, Any] | None = None) -> str:
        """The Prefect artifact: a table of changes per kind, what the build redid (`work`), then
        seconds per stage."""
        lines = ["| kind | added | changed | removed |", "|---|---|---|---|"]
        counts = self.counts()
        for k in KINDS:
            row = [counts[w].get(k, 0) for w in ("added", "changed", "removed")]
            if any(row):
                lines.append(f"| {k} | {row[0]} | {row[1]} | {row[2]} |")
        if len(lines) == 2:
            lines.append("| (none) | 0 | 0 | 0 |")
        text = ("First build.\n\n" if self.first_build else "") + "\n".join(lines)
        if work:
            text += "\n\n| what the build did | |\n|---|---|\n" + "\n".join(
                f"| {k} | {v} |" for k, v in work_lines(work)
            )
        if stage_seconds:
            text += "\n\n| stage | seconds |\n|---|---|\n" + "\n".join(
                f"| {s} | {v:.2f} |" for s, v in stage_seconds.items()
            )
        return text


def store_written(store: Mapping[str, Any]) -> str | None:
    """How a build's `load_store` summary got its store graph, for the CLI and the build report;
    None without a store."""
    if store.get("backend", "none") == "none":
        return None
    if store.get("resumed"):
        return "already loaded"
    if store.get("mode") == "difference":
        return f"difference from {store.get('base')}, {store.get('rows_written')} rows"
    return "loaded whole"


def work_lines(work: Mapping[str, Any]) -> list[tuple[str, str]]:
    """(what, how much) of a build's `work` record (`sagegraph.flows.build_graph`): the graph's difference
    from the published one, texts encoded, LLM metadata paid for, how the store was written."""
    out = []
    if (g := work.get("graph")) is not None:
        out.append(("graph nodes", f"+{g['nodes_added']} ~{g['nodes_changed']} -{g['nodes_removed']}"))
        out.append(("graph edges", f"+{g['edges_added']} ~{g['edges_changed']} -{g['edges_removed']}"))
    out.append(("texts encoded", f"{work.get('encoded', 0)} ({work.get('encode_seconds', 0.0):.1f} s)"))
    if (llm := work.get("llm_metadata")) is not None:
        out.append(("LLM metadata calls", f"{llm.get('calls', 0)} paid, {llm.get('cached', 0)} from the cache"))
    if (store := work.get("store")) is not None:
        out.append(("store", store))
    return out


def diff(old: Mapping[str, str] | None, new: Mapping[str, str]) -> ChangeSet:
    """The change set from `old` (None: nothing was built before) to `new`."""
    cs = ChangeSet(first_build=old is None)
    old = old or {}

    def put(where: dict[str, list[str]], key: str) -> None:
        kind, _, ident = key.partition(":")
        where.setdefault(kind, []).append(ident)

    for key, fp in new.items():
        if key not in old:
            put(cs.added, key)
        elif old[key] != fp:
            put(cs.changed, key)
    for key in old:
        if key not in new:
            put(cs.removed, key)
    for where in (cs.added, cs.changed, cs.removed):
        for v in where.values():
            v.sort()
    return cs
