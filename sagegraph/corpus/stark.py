"""STaRK (PRIME, MAG, Amazon) into sagegraph's KB layout, through the benchmark's own loader.

`sagegraph data fetch stark prime DIR` asks `stark-qa` (the optional extra `stark`) for the SKB and
its QA splits, then writes `nodes.jsonl`, `edges.jsonl` and question files that `build` and
`evaluate` read like any KB. stark-qa downloads from the Hugging Face hub at run time: on a machine
without it, fetch on one that has it and copy the directory (the converted files are plain JSONL).

What the conversion keeps and changes, so numbers stay comparable with the benchmark's:
- node ids are STaRK's node indices, as text ("1234"): STaRK's answer ids are those indices;
- node labels come from STaRK's node types made Cypher-safe ('gene/protein' -> GeneProtein), and
  relation types likewise ('off-label use' -> OFF_LABEL_USE); the original names stay in `stark_type`;
- edges keep STaRK's stored direction (the loader is asked not to symmetrise them);
- a node's nested `details` are lifted one level into fields (a store property cannot hold a map);
- questions: `{"id", "question", "answer_ids", "split"}`; human-written ones get split "human".
"""

from __future__ import annotations

import ast
import json
import re
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from sagegraph.errors import ConfigError, InputError
from sagegraph.runfiles import replaced, write_text_whole

STARK_NAMES = ("prime", "mag", "amazon")
SPLITS = ("train", "val", "test")


def label_of(stark_type: str) -> str:
    """'gene/protein' -> 'GeneProtein', 'effect/phenotype' -> 'EffectPhenotype', 'paper' -> 'Paper'."""
    parts = [p for p in re.split(r"[^0-9A-Za-z]+", stark_type) if p]
    label = "".join(p[:1].upper() + p[1:] for p in parts) or "Node"
    return label if label[0].isalpha() else f"N{label}"


def rel_of(stark_type: str) -> str:
    """'off-label use' -> 'OFF_LABEL_USE', 'author___writes___paper' -> 'AUTHOR_WRITES_PAPER'."""
    rel = "_".join(p for p in re.split(r"[^0-9A-Za-z]+", stark_type) if p).upper() or "RELATED_TO"
    return rel if rel[0].isalpha() else f"R_{rel}"


def node_fields(info: dict[str, Any]) -> dict[str, Any]:
    """A node's STaRK record as KB fields: `details` (and any other nested map) lifted one level."""
    out: dict[str, Any] = {}
    for k, v in info.items():
        if k == "type":
            continue
        if isinstance(v, dict):
            for dk, dv in v.items():
                out.setdefault(str(dk) if str(dk) not in info else f"{k}_{dk}", dv)
        else:
            out[str(k)] = v
    return {k: _plain(v) for k, v in out.items() if not _empty(v)}


def _plain(v: Any) -> Any:
    if hasattr(v, "item") and not isinstance(v, (list, dict, str)):  # numpy / torch scalars
        return v.item()
    if isinstance(v, (list, tuple)):
        return [_plain(x) for x in v]
    return v


def _empty(v: Any) -> bool:
    return v is None or (isinstance(v, float) and v != v) or str(v) in ("", "nan", "[]", "{}")


def write_kb(
    out: Path,
    node_info: dict[int, dict[str, Any]],
    node_types: Iterable[int],
    node_type_dict: dict[int, str],
    edge_index: tuple[Iterable[int], Iterable[int]],
    edge_types: Iterable[int],
    edge_type_dict: dict[int, str],
) -> dict[str, Any]:
    """Write nodes.jsonl and edges.jsonl from an SKB's own arrays; returns counts."""
    out.mkdir(parents=True, exist_ok=True)
    types = [int(t) for t in node_types]
    by_label: dict[str, int] = {}
    with replaced(out / "nodes.jsonl") as tmp, tmp.open("w", encoding="utf-8") as fh:
        for idx in range(len(types)):
            stark_type = node_type_dict[types[idx]]
            label = label_of(stark_type)
            fields = node_fields(node_info.get(idx, {}))
            fields.setdefault("name", fields.get("title") or f"{stark_type} {idx}")
            fields["stark_type"] = stark_type
            fh.write(
                json.dumps({"id": str(idx), "type": label, "fields": fields}, ensure_ascii=False, default=str) + "\n"
            )
            by_label[label] = by_label.get(label, 0) + 1
    heads, tails = (list(map(int, edge_index[0])), list(map(int, edge_index[1])))
    rels = [int(t) for t in edge_types]
    if not (len(heads) == len(tails) == len(rels)):
        raise InputError(
            out, None, "edge_index", f"{len(heads)} heads, {len(tails)} tails and {len(rels)} edge types differ"
        )
    by_rel: dict[str, int] = {}
    seen: set[tuple[int, int, int]] = set()
    with replaced(out / "edges.jsonl") as tmp, tmp.open("w", encoding="utf-8") as fh:
        for h, t, r in zip(heads, tails, rels):
            if (h, t, r) in seen:
                continue
            seen.add((h, t, r))
            rel = rel_of(edge_type_dict[r])
            fh.write(json.dumps({"src": str(h), "dst": str(t), "type": rel}) + "\n")
            by_rel[rel] = by_rel.get(rel, 0) + 1
    return {"nodes": len(types), "nodes_by_type": by_label, "edges": len(seen), "edges_by_type": by_rel}


def answer_list(raw: Any, where: str) -> list[int]:
    """STaRK's CSV stores answer ids as a Python list literal: parsed as a literal, never evaluated."""
    try:
        value = ast.literal_eval(raw) if isinstance(raw, str) else list(raw)
    except (ValueError, SyntaxError):
        raise ConfigError(f"{where}: answer_ids {str(raw)[:60]!r} is not a list of node ids") from None
    if not isinstance(value, (list, tuple)) or not all(isinstance(a, int) for a in value):
        raise ConfigError(f"{where}: answer_ids {str(raw)[:60]!r} is not a list of node ids")
    return list(value)


def write_questions(out: Path, rows: Iterable[tuple[Any, str, Any, str]]) -> dict[str, int]:
    """rows: (qid, query, answer_ids, split) -> questions.jsonl plus questions-<split>.jsonl."""
    by_split: dict[str, list[str]] = {}
    lines = []
    for qid, query, answers, split in rows:
        line = json.dumps(
            {
                "id": str(qid) if split != "human" else f"human-{qid}",
                "question": str(query),
                "answer_ids": [str(a) for a in answer_list(answers, f"question {qid}")],
                "split": split,
            },
            ensure_ascii=False,
        )
        lines.append(line)
        by_split.setdefault(split, []).append(line)
    write_text_whole(out / "questions.jsonl", "\n".join(lines) + "\n")
    for split, ls in by_split.items():
        write_text_whole(out / f"questions-{split}.jsonl", "\n".join(ls) + "\n")
    return {s: len(v) for s, v in by_split.items()}


def qa_rows(
    qa, split_names: Iterable[str] = SPLITS, split_of_all: str | None = None
) -> list[tuple[Any, str, Any, str]]:
    """(qid, query, answer_ids, split) from a stark-qa STaRKDataset: its `data` frame and the
    positions in `split_indices` (positions into its sorted ids)."""
    by_id = {int(r["id"]): r for r in qa.data.to_dict("records")}
    rows = []
    if split_of_all is not None:
        return [(qid, r["query"], r["answer_ids"], split_of_all) for qid, r in sorted(by_id.items())]
    for split in split_names:
        for pos in qa.split_indices.get(split, []):
            qid = int(qa.indices[int(pos)])
            r = by_id[qid]
            rows.append((qid, r["query"], r["answer_ids"], split))
    return rows


def convert(skb, qa_synth, qa_human, out: Path) -> dict[str, Any]:
    """An SKB and its QA datasets, as stark-qa's classes hold them, into the KB layout."""
    counts = write_kb(
        out,
        skb.node_info,
        skb.node_types.tolist(),
        skb.node_type_dict,
        skb.edge_index.tolist(),
        skb.edge_types.tolist(),
        skb.edge_type_dict,
    )
    rows = qa_rows(qa_synth)
    if qa_human is not None:
        rows += qa_rows(qa_human, split_of_all="human")
    counts["questions"] = write_questions(out, rows)
    return counts


def fetch_stark(name: str, out: Path, root: Path | None = None, human: bool = True) -> dict[str, Any]:
    """Load `name` with stark-qa (downloading into `root` if it must) and convert it into `out`."""
    if name not in STARK_NAMES:
        raise ConfigError(f"unknown STaRK dataset {name!r} (known: {', '.join(STARK_NAMES)})")
    try:
        import stark_qa
    except ImportError as exc:
        raise ConfigError(
            f"STaRK needs the optional extra: pip install -e '.[stark]' (stark-qa; import failed: {exc})"
        ) from None
    root = Path(root or Path(out) / "stark-raw")
    skb = stark_qa.load_skb(name, root=str(root), download_processed=True, indirected=False)
    qa = stark_qa.load_qa(name, root=str(root))
    qa_h = stark_qa.load_qa(name, root=str(root), human_generated_eval=True) if human else None
    return {"dataset": name, **convert(skb, qa, qa_h, Path(out))}
