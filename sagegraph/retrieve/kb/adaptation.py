"""`sagegraph adapt`: a built KB graph's own selector encoder, trained on questions the KB makes
for itself (`adapt.sample_questions`), with no gold question anywhere.

Everything lands in the graph generation's `adapt/` folder, so an adaptation belongs to the graph
it was drawn from (a rebuild publishes a generation without one, and a rollback returns to the
generation with its own): the drawn questions (`questions.jsonl`, a question file any retriever
can be evaluated on), the encoder (`selector-encoder/`, a sentence-transformers directory that
`selector_encoder` takes) and the report (`adapt.json`). Each appears whole or not at all; an
encoder trained on the same draw with the same settings is kept, so a second run costs the draw
alone (seconds) and a killed one trains again from the start.
"""

from __future__ import annotations

import functools
import hashlib
import json
import shutil
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

from pydantic import BaseModel, Field

from sagegraph.config import BuildConfig, LLMConfig, load_llm_config
from sagegraph.errors import ConfigError, LLMError, ReplyRejected, SageGraphError
from sagegraph.llm import LLMClient, parse_json_reply
from sagegraph.retrieve.graph_index import GraphIndex
from sagegraph.retrieve.kb.adapt import (
    KBQuestion,
    SampleSettings,
    distinct_vocabulary,
    read_vocabulary,
    sample_questions,
    vocabulary_messages,
)
from sagegraph.retrieve.kb.chain_encoder import RECORD, adapted_path, publish_folder, train_selector_encoder
from sagegraph.retrieve.kb.view import KBView, kb_view
from sagegraph.retrieve.resources import llm_cache_path
from sagegraph.runfiles import write_jsonl_whole, write_text_whole
from sagegraph.runlock import hold

QUESTIONS = "questions.jsonl"
REPORT = "adapt.json"


class NothingToAdapt(ConfigError):
    """The KB has no question to draw (no named node with a short chain to a few nodes)."""


class TrainSettings(BaseModel):
    """How the encoder is tuned on the drawn questions."""

    epochs: int = Field(1, ge=1, description="passes over the training pairs")
    negatives: int = Field(3, ge=1, description="wrong chains paired with each question")
    batch_size: int = Field(32, ge=2, description="pairs a step (each row's positive is the others' negative)")
    lr: float = Field(2e-5, gt=0, description="AdamW's learning rate")


class AdaptSettings(BaseModel):
    sample: SampleSettings = Field(default_factory=SampleSettings)
    train: TrainSettings = Field(default_factory=TrainSettings)


def draw_digest(questions: list[KBQuestion], settings: AdaptSettings) -> str:
    blob = json.dumps([q.label() for q in questions], sort_keys=True) + settings.model_dump_json()
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


def relation_vocabulary(
    view: KBView, client: LLMClient, report: Callable[[str], None] | None = None
) -> tuple[dict[str, list[str]], dict[str, Any]]:
    """The words people use for each relation type of the KB, one cached, counted call each (shown
    the relation with the types it most often links). A reply with no usable word is not cached and
    its relation keeps its stored name alone (counted); a word that names two relations is dropped
    (`distinct_vocabulary`); a fault of the endpoint stops the run."""
    links: dict[str, tuple[str, str]] = {}
    for head, relation, tail, _ in view.patterns:  # most frequent first
        links.setdefault(relation, (head, tail))
    said: dict[str, list[str]] = {}
    traces: list[dict[str, Any]] = []
    unusable = 0
    t0 = time.perf_counter()
    before = (client.usage.calls, client.usage.cached)
    for relation, (head, tail) in links.items():
        messages = vocabulary_messages(relation, head, tail)
        try:
            reply = client.chat(
                messages,
                response_format={"type": "json_object"},
                accept=functools.partial(_vocabulary, relation=relation),
            )
            said[relation] = _vocabulary(reply.text, relation)
            event = {"kind": "llm", "name": "vocabulary", "inputs": messages, "outputs": reply.text, "key": reply.key}
            traces.append({"qid": f"vocabulary:{relation}", "events": [{**event, "cached": reply.cached}]})
        except (ValueError, ReplyRejected):
            unusable += 1
    said, ambiguous = distinct_vocabulary(said, list(links))
    if report:
        report(f"vocabulary: {len(said):,}/{len(links):,} relations, {time.perf_counter() - t0:.0f} s")
    stats = {
        "relations": len(links),
        "with_words": len(said),
        "unusable_replies": unusable,
        "llm_calls": (client.usage.calls - before[0]) - (client.usage.cached - before[1]),
        "cached_replies": client.usage.cached - before[1],
        "seconds": round(time.perf_counter() - t0, 1),
        "model": client.cfg.model,
        "words": said,
        "ambiguous_words_dropped": ambiguous,
        "traces": traces,
    }
    return said, stats


def _vocabulary(text: str, relation: str) -> list[str]:
    return read_vocabulary(parse_json_reply(text), relation)


def adapt_graph(
    graph_dir: Path,
    settings: AdaptSettings,
    llm: LLMConfig | None = None,
    report: Callable[[str], None] | None = None,
) -> dict[str, Any]:
    """Draw (with the model's relation words given `llm`), write the questions, train (unless
    this draw's encoder is there) and report."""
    graph = GraphIndex(graph_dir)
    try:
        # One adaptation of a generation at a time: a second stops with one line naming the first.
        with hold(adapted_path(graph.dir).parent, "adaptation", owned=False):
            return _adapt(graph, settings, llm, report)
    finally:
        graph.close()  # the reader's lease on the generation, whatever happened


def _adapt(
    graph: GraphIndex, settings: AdaptSettings, llm: LLMConfig | None, report: Callable[[str], None] | None
) -> dict[str, Any]:
    view = kb_view(graph)
    encoder = adapted_path(graph.dir)
    folder = encoder.parent
    vocabulary: dict[str, list[str]] = {}
    phrasing: dict[str, Any] = {"llm_calls": 0}
    traces: list[dict[str, Any]] = []
    run_record: dict[str, Any] | None = None  # where the model's replies are cached, when it was asked
    if llm is not None:
        cache = llm_cache_path(graph, llm)
        try:
            vocabulary, phrasing = relation_vocabulary(view, LLMClient(llm, cache), report)
        except LLMError as exc:
            raise SageGraphError(f"adapt: the model stopped answering; its replies so far are cached: {exc}") from None
        traces = phrasing.pop("traces")
        run_record = {"graph": str(graph.dir), "llm": {"cache": str(cache)}}
    t0 = time.perf_counter()
    questions = sample_questions(view, settings.sample, vocabulary)
    drawn_s = time.perf_counter() - t0
    if not questions:
        raise NothingToAdapt(f"{graph.dir}: the KB has no named node with a chain to a few nodes: nothing to adapt to")
    digest = draw_digest(questions, settings)
    trained = _trained_on(encoder)
    carried = None if trained == digest else _trained_elsewhere(graph.dir, digest)
    if carried is not None:  # another generation of this KB drew the same questions: its encoder is this one's
        with hold(encoder, "train-selector", owned=False):  # as training takes it: one writer a folder
            publish_folder(encoder, lambda folder: shutil.copytree(carried, folder, dirs_exist_ok=True))
        trained = digest
    if trained == digest:
        training: dict[str, Any] = json.loads((encoder / RECORD).read_text())
        reused = True
    else:
        train = settings.train
        training = train_selector_encoder(
            [q.label() for q in questions],
            encoder,
            epochs=train.epochs,
            batch_size=train.batch_size,
            lr=train.lr,
            negatives=train.negatives,
            report=report,
            note={"draw": digest},
        )
        reused = False
    kinds = Counter(f"{q.kind}-{len(q.relations)}" if q.kind == "chain" else q.kind for q in questions)
    out = {
        "graph": str(graph.dir),
        "encoder": str(encoder),
        "questions": len(questions),
        "by_kind": dict(sorted(kinds.items())),
        "draw": digest,
        "draw_seconds": round(drawn_s, 1),
        "train_seconds": training.get("seconds"),
        "reused_encoder": reused,
        "vocabulary": phrasing,
        "llm_calls": phrasing["llm_calls"],
        "settings": settings.model_dump(),
    }
    # Written after the encoder, so a killed adaptation leaves these as the last finished one wrote them.
    write_jsonl_whole(folder / QUESTIONS, (q.record() for q in questions))
    if run_record is not None:
        # as a run records its calls, so `sagegraph llm export GRAPH/adapt FILE` can share them for a replay
        write_jsonl_whole(folder / "traces.jsonl", traces)
        write_text_whole(folder / "config.json", json.dumps(run_record))
    write_text_whole(folder / REPORT, json.dumps(out, indent=1))
    return out


def _trained_elsewhere(graph_dir: Path, digest: str) -> Path | None:
    """The adapted encoder of another generation of the same build trained on this very draw: a
    rebuild whose change the draw never met (no start, chain or answer it touched) keeps its
    encoder instead of training again."""
    for other in sorted(graph_dir.parent.iterdir()):
        if other != graph_dir and other.is_dir() and _trained_on(adapted_path(other)) == digest:
            return adapted_path(other)
    return None


def adapt_after_build(cfg: BuildConfig, report: Callable[[str], None] | None = None) -> dict[str, Any] | None:
    """A build's `adapt` stage (`adapt.enabled`): the published generation of a KB graph adapted
    with the default settings where it has no adaptation yet (its report otherwise); None where
    the build does not ask for it or built no KB."""
    if not cfg.adapt.enabled or cfg.corpus.kind != "kb":
        return None
    graph_dir = (cfg.out / "graph").resolve()
    done = adapted_path(graph_dir).parent / REPORT
    if done.exists():
        return {**json.loads(done.read_text()), "already_adapted": True}
    llm = load_llm_config(cfg.adapt.llm) if cfg.adapt.llm is not None else None
    try:
        return adapt_graph(graph_dir, AdaptSettings(), llm, report)
    except NothingToAdapt as exc:  # the graph is built and published all the same; the retrievers read it unadapted
        return {"skipped": str(exc)}


def with_adaptation(
    cfg: BuildConfig, result: dict[str, Any], report: Callable[[str], None] | None = None
) -> dict[str, Any]:
    """A build's report with its `adapt` stage's (`adapt_after_build`) where the config asks for
    one. Callers run it under the build's lock, as the stages before it, so no other build
    publishes or retires the generation while it is adapted."""
    adapted = adapt_after_build(cfg, report)
    return {**result, "adapt": adapted} if adapted is not None else result


def _trained_on(encoder: Path) -> str | None:
    record = encoder / RECORD
    if not record.exists():
        return None
    try:
        return json.loads(record.read_text()).get("draw")
    except json.JSONDecodeError:
        return None
