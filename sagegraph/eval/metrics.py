"""Retrieval metrics with STaRK's definitions, at the source level.

Retrieval ranks chunks; a chunk counts for its source (a table segment for its table, a passage
chunk for its passage). With `ranked_sources` the sources of the ranked chunks in order:
- hit@k: 1 if any gold source is among the sources of the top-k chunks;
- recall@k: |gold ∩ sources(top-k chunks)| / |gold| (not capped at k);
- mrr: 1 / rank of the first chunk whose source is gold; 0 when none is retrieved (we do not rank
  unretrieved candidates in a tied tail as STaRK does).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

HIT_KS = (1, 5)
RECALL_KS = (2, 5, 10, 20, 50, 100)
MRR_CONVENTION = "reciprocal rank of the first gold chunk; 0 when no gold source is retrieved"


def metric_names(recall_ks: Iterable[int] = RECALL_KS) -> list[str]:
    return [f"hit@{k}" for k in HIT_KS] + [f"recall@{k}" for k in recall_ks] + ["mrr"]


def query_metrics(
    ranked_sources: Sequence[str], gold: set[str], recall_ks: Iterable[int] = RECALL_KS
) -> dict[str, float]:
    if not gold:
        raise ValueError("a question with no gold source cannot be scored")
    first = next((i for i, s in enumerate(ranked_sources) if s in gold), None)
    out: dict[str, float] = {}
    for k in HIT_KS:
        out[f"hit@{k}"] = float(first is not None and first < k)
    for k in recall_ks:
        out[f"recall@{k}"] = len(gold & set(ranked_sources[:k])) / len(gold)
    out["mrr"] = 0.0 if first is None else 1.0 / (first + 1)
    return out


def mean_metrics(per_query: list[dict[str, float]]) -> dict[str, float]:
    if not per_query:
        return {}
    keys = per_query[0].keys()
    return {k: sum(q[k] for q in per_query) / len(per_query) for k in keys}


def stage_diagnostics(trace: dict, gold: set[str], meta: dict) -> dict[str, float]:
    """Where a multi-step retriever lost gold answers, from its trace, after the fact: for each
    candidate set a step produced (`trace["stage_sets"]`, source ids) its recall, precision, hit
    and size against gold; for each prediction (`trace["predictions"]`) whose name is a field of
    the question's metadata (the synthetic KB's `target_type`), whether it matched. Computed by the
    evaluator only: the retriever never sees gold."""
    out: dict[str, float] = {}
    for name, ids in (trace.get("stage_sets") or {}).items():
        found = set(ids)
        inter = len(found & gold)
        out[f"{name}_size"] = float(len(found))
        out[f"{name}_hit"] = float(inter > 0)
        out[f"{name}_recall"] = inter / len(gold)
        if found:
            out[f"{name}_precision"] = inter / len(found)
    for name, value in (trace.get("predictions") or {}).items():
        if meta.get(name) is not None:
            out[f"{name}_accuracy"] = float(value == meta[name])
    return out


def mean_diagnostics(rows: list[dict]) -> dict[str, float]:
    """Each diagnostic averaged over the questions that have it (precision needs a non-empty set)."""
    sums: dict[str, list[float]] = {}
    for r in rows:
        for k, v in (r.get("diagnostics") or {}).items():
            sums.setdefault(k, []).append(v)
    return {f"diag_{k}": round(sum(v) / len(v), 6) for k, v in sorted(sums.items())}
