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

import hashlib
import json
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

from sagegraph.construct.artifacts import save_npz, write_json
from sagegraph.corpus import kb_edges
from sagegraph.corpus.records import Corpus
from sagegraph.model import shallow_dict

RECORD_KINDS = ("tables", "documents", "kb_nodes")
RELATIONS_KIND = "kb_edges"
KINDS = (*RECORD_KINDS, RELATIONS_KIND)
FINGERPRINTS = "fingerprints.json"
RELATIONS = "relations.npz"  # the sorted row hashes of the ingest's relations
SHOWN = 20  # ids listed per kind and change in the change set (the counts are always whole)


def _hash(obj: Any) -> str:
    text = json.dumps(obj, sort_keys=True, ensure_ascii=False, default=str)
    return hashlib.blake2b(text.encode("utf-8"), digest_size=8).hexdigest()


def record_fingerprints(kind: str, records: Iterable[Mapping[str, Any]]) -> dict[str, str]:
    """`kind:id` -> a hash of the record as the build reads it."""
    return {f"{kind}:{r['id']}": _hash(r) for r in records}


@dataclass
class Fingerprints:
    """A corpus state: a hash per table, document and KB object by id, and the KB's relations as a
    sorted array of row hashes. A relation has no id: it is its own key, added or removed, never
    changed, and a repeated relation is a second one. `relations_table` names the ones that changed
    (read only when a change set lists them)."""

    records: dict[str, str]
    relations: np.ndarray  # uint64, sorted
    relations_table: Callable[[], pa.Table] | None = None

    def same_as(self, other: Fingerprints) -> bool:
        return self.records == other.records and np.array_equal(self.relations, other.relations)


def corpus_fingerprints(corpus: Corpus, relation_hashes: np.ndarray | None = None) -> Fingerprints:
    """`relation_hashes`: the sorted hashes of `corpus.kb_edges` where an ingest computed them
    before, for this very table (`construct.relations_file`)."""
    records: dict[str, str] = {}
    for kind in RECORD_KINDS:
        records.update(record_fingerprints(kind, (shallow_dict(r) for r in getattr(corpus, kind))))
    table = corpus.kb_edges
    hashes = relation_hashes if relation_hashes is not None else np.sort(kb_edges.row_hashes(table))
    return Fingerprints(records, hashes, lambda: table)


def write_fingerprints(sources_dir: Path, fingerprints: Fingerprints) -> None:
    write_json(sources_dir / FINGERPRINTS, fingerprints.records, indent=None)
    save_npz(sources_dir / RELATIONS, hashes=fingerprints.relations)


def ingested_fingerprints(sources_dir: Path) -> Fingerprints | None:
    """The fingerprints of what an ingest wrote (recomputed from its batch files and relations file
    where an ingest of an earlier layout wrote none). None when that ingest is not finished."""
    manifest = sources_dir / "manifest.json"
    if not manifest.exists():
        return None
    meta = json.loads(manifest.read_text(encoding="utf-8"))
    relations_path = Path(meta.get("kb_edges") or sources_dir / "kb_edges.json")
    relations_path = sources_dir / relations_path.name

    def table() -> pa.Table:
        return read_relations(relations_path)

    saved = sources_dir / FINGERPRINTS
    if saved.exists():
        records = {
            k: v for k, v in json.loads(saved.read_text(encoding="utf-8")).items() if not k.startswith("kb_edges:")
        }
    else:
        records = {}
        for batch in meta["batches"]:
            raw = json.loads((sources_dir / Path(batch).name).read_text(encoding="utf-8"))
            for kind in RECORD_KINDS:
                records.update(record_fingerprints(kind, raw.get(kind, [])))
    hashes = sources_dir / RELATIONS
    if hashes.exists():
        relations = np.load(hashes)["hashes"]
    else:
        relations = np.sort(kb_edges.row_hashes(table())) if relations_path.exists() else np.zeros(0, np.uint64)
    return Fingerprints(records, relations, table if relations_path.exists() else None)


def read_relations(path: Path) -> pa.Table:
    """An ingest's relations: Parquet, or the JSON list an ingest of an earlier layout wrote."""
    if not path.exists():
        return kb_edges.empty_relations()
    if path.suffix == ".json":
        rows = json.loads(path.read_text(encoding="utf-8"))
        return kb_edges.from_triples((str(r["src"]), str(r["type"]), str(r["dst"])) for r in rows)
    return kb_edges.read_table(path)


def digest(fingerprints: Fingerprints) -> str:
    """One 16-hex name for a whole corpus state (a corpus without relations keeps the name it had
    when relations were fingerprinted one by one)."""
    records = sorted(fingerprints.records.items())
    if not len(fingerprints.relations):
        return _hash(records)[:16]
    relations = hashlib.blake2b(fingerprints.relations.tobytes(), digest_size=8).hexdigest()
    return _hash([records, relations])[:16]


@dataclass
class ChangeSet:
    """Sources added, changed and removed between two corpus states, per kind."""

    added: dict[str, list[str]] = field(default_factory=dict)
    changed: dict[str, list[str]] = field(default_factory=dict)
    removed: dict[str, list[str]] = field(default_factory=dict)
    first_build: bool = False
    # Relations are counted, and only the first SHOWN of them named in `added` / `removed`.
    relations_added: int = 0
    relations_removed: int = 0

    @property
    def empty(self) -> bool:
        return not (self.added or self.changed or self.removed)

    def sources_to_redo(self) -> int:
        """Tables, documents and KB objects added or changed: the sources a rebuild chunks,
        describes and encodes again (relations and removals only join or leave the graph)."""
        return sum(
            len(ids) for what in (self.added, self.changed) for kind, ids in what.items() if kind != RELATIONS_KIND
        )

    def counts(self) -> dict[str, dict[str, int]]:
        out = {what: {k: len(v) for k, v in getattr(self, what).items()} for what in ("added", "changed", "removed")}
        for what, n in (("added", self.relations_added), ("removed", self.relations_removed)):
            if n:
                out[what][RELATIONS_KIND] = n
        return out

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
        counts = self.counts()
        if self.first_build:
            return f"first build: {sum(counts['added'].values())} sources"
        if self.empty:
            return "corpus unchanged since the last build"
        tot = {w: sum(counts[w].values()) for w in ("added", "changed", "removed")}
        kinds = sorted(set(counts["added"]) | set(counts["changed"]) | set(counts["removed"]))
        per = ", ".join(
            f"{k} "
            + " ".join(
                f"{s}{counts[w][k]}"
                for w, s in (("added", "+"), ("changed", "~"), ("removed", "-"))
                if counts[w].get(k)
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
        through = "".join(f" then {name}" for name in store.get("through") or [])
        return f"difference from {store.get('base')}{through}, {store.get('rows_written')} rows" + (
            "" if store.get("base_published", True) else " (its store graph taken over)"
        )
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


def diff(old: Fingerprints | None, new: Fingerprints) -> ChangeSet:
    """The change set from `old` (None: nothing was built before) to `new`."""
    cs = ChangeSet(first_build=old is None)
    before = old.records if old is not None else {}

    def put(where: dict[str, list[str]], key: str) -> None:
        kind, _, ident = key.partition(":")
        where.setdefault(kind, []).append(ident)

    for key, fp in new.records.items():
        if key not in before:
            put(cs.added, key)
        elif before[key] != fp:
            put(cs.changed, key)
    for key in before:
        if key not in new.records:
            put(cs.removed, key)
    previous = old.relations if old is not None else np.zeros(0, np.uint64)
    added, removed = multiset_difference(new.relations, previous), multiset_difference(previous, new.relations)
    cs.relations_added, cs.relations_removed = len(added), len(removed)
    for where, hashes, fingerprints in ((cs.added, added, new), (cs.removed, removed, old)):
        if len(hashes) and fingerprints is not None and fingerprints.relations_table is not None:
            where[RELATIONS_KIND] = named_relations(fingerprints.relations_table(), hashes[:SHOWN])
    for where in (cs.added, cs.changed, cs.removed):
        for v in where.values():
            v.sort()
    return cs


def multiset_difference(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """The hashes of sorted `a` left after taking out one per occurrence in sorted `b`. The
    distinct values and their counts are read off the sorted runs (`np.unique` sorts again:
    seconds on a large KB's millions of relations); equal arrays, a rebuild's usual case, are
    found first."""
    if not len(b):
        return a
    if len(a) == len(b) and np.array_equal(a, b):
        return a[:0]
    values, counts = _runs(a)
    other, other_counts = _runs(b)
    at = np.minimum(np.searchsorted(other, values), len(other) - 1)
    found = other[at] == values
    left = counts - np.where(found, other_counts[at], 0)
    return np.repeat(values, np.maximum(left, 0))


def _runs(ordered: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(distinct values, how many times each) of a sorted array."""
    if not len(ordered):
        return ordered, np.zeros(0, np.int64)
    starts = np.flatnonzero(np.concatenate(([True], ordered[1:] != ordered[:-1])))
    return ordered[starts], np.diff(np.append(starts, len(ordered)))


def named_relations(table: pa.Table, hashes: np.ndarray) -> list[str]:
    """`src-[type]->dst` of the rows of `table` with these hashes."""
    row_hashes = kb_edges.row_hashes(table)
    wanted = dict(zip(*np.unique(hashes, return_counts=True)))
    names: list[str] = []
    for row in np.flatnonzero(np.isin(row_hashes, hashes)):
        if wanted.get(row_hashes[row], 0) > 0 and len(names) < SHOWN:
            wanted[row_hashes[row]] -= 1
            names.append(kb_edges.label(table, int(row)))
    return names
