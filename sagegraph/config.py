"""Pydantic configs, one per stage, with documented defaults; YAML files validate into BuildConfig.

Relative paths in a config file resolve against the file's own directory's parent project root
(the directory holding `conf/`), so `conf/ottqa.yaml` works from any working directory.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Literal, overload

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from sagegraph.errors import ConfigError

SHARED_OTTQA = Path(__file__).resolve().parents[1].parent / "shared" / "data" / "ottqa-dev"


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class CorpusConfig(_Strict):
    kind: Literal["ottqa", "generic", "kb"] = "ottqa"
    path: Path | None = Field(
        None, description="OTT-QA dir or KB dir; defaults to ../shared/data/ottqa-dev when it exists"
    )
    documents: Path | None = Field(None, description="generic: JSONL documents {id, text, title?}")
    tables: Path | None = Field(None, description="generic: a dir of CSV files or a JSONL of {id, title, header, rows}")
    questions: Path | None = None
    on_error: Literal["raise", "skip"] = "raise"
    on_duplicate: Literal["error", "last"] = Field(
        "error",
        description="a second record under an id already read: an error naming both lines, or the last one wins "
        "(counted)",
    )

    def resolved_path(self) -> Path:
        if self.path is not None:
            return self.path
        if self.kind == "ottqa" and SHARED_OTTQA.exists():
            return SHARED_OTTQA
        raise ConfigError(
            "corpus.path: not set and ../shared/data/ottqa-dev is absent; run `sagegraph data fetch ottqa DIR` "
            "and set corpus.path to DIR"
        )


class ChunkingConfig(_Strict):
    percentile: float = Field(
        20.0, ge=0, le=100, description="cut where window similarity <= this percentile (SAGE: 20)"
    )
    scope: Literal["document", "corpus"] = Field(
        "document", description="percentile over each document's similarities or the whole batch's"
    )
    min_chunk_chars: int = Field(200, ge=0, description="pieces shorter than this merge into their neighbour")
    max_chunk_chars: int = Field(2000, ge=100, description="longer pieces are cut at their weakest boundary")


class TableConfig(_Strict):
    rows_per_segment: int = Field(8, ge=5, le=10, description="SAGE keeps 5-10 rows per segment")
    link_entities: bool = Field(False, description="ablation only: use cell hyperlinks as table entities")


class LLMConfig(_Strict):
    """Endpoint and key follow the openai client's conventions: `base_url` when set, else the
    OPENAI_BASE_URL variable, else api.openai.com; the key from the variable `api_key_env` names."""

    base_url: str | None = Field(
        None, description="any OpenAI-compatible endpoint; None = OPENAI_BASE_URL, else the openai default"
    )
    model: str = "gpt-4o-mini"
    api_key_env: str = "OPENAI_API_KEY"
    temperature: float = 0.0
    max_tokens: int = 1024
    timeout_s: float = 60.0
    max_retries: int = 6
    concurrency: int = Field(4, ge=1, description="requests in flight at once to this endpoint, per process")
    requests_per_minute: int | None = Field(
        None, ge=1, description="pace requests to this many per minute (None: no pacing)"
    )
    tokens_per_minute: int | None = Field(
        None, ge=1, description="pace by estimated prompt tokens per minute (None: no pacing)"
    )
    cache_mode: Literal["live", "replay"] = Field(
        "live", description="replay: a request without a cached reply is an error (reproducing a published run)"
    )
    send_seed: bool = Field(True, description="send the sample index as `seed` when sampling at temperature > 0")
    reask_cut: bool = Field(
        False,
        description="a live run asks again for a recorded reply cut at the token limit, replacing it (default: "
        "served as recorded, still counted as cut)",
    )
    cache_dir: Path | None = Field(None, description="defaults to <out>/cache/llm")
    price_input_per_mtok: float = Field(0.15, description="USD per 1M prompt tokens (gpt-4o-mini list price)")
    price_output_per_mtok: float = Field(0.60, description="USD per 1M completion tokens")


class MetadataConfig(_Strict):
    mode: Literal["heuristic", "llm"] = "heuristic"
    llm_fallback: bool = Field(True, description="use the heuristic extractor when an LLM reply cannot be parsed")


class EmbeddingConfig(_Strict):
    model: str = "all-MiniLM-L6-v2"
    batch_size: int | None = Field(None, ge=1, description="None: 16 on CPU (less padding wins there), 256 on GPU")
    device: Literal["auto", "cpu", "cuda"] = "auto"
    precision: Literal["auto", "fp32", "bf16"] = Field(
        "auto", description="auto: bf16 matmuls on CPUs with native bf16 (AMX/AVX512-BF16), fp32 elsewhere"
    )
    cache: bool = True

    def resolved_precision(self) -> str:
        """What auto means on this machine: recorded in the manifest so queries encode alike."""
        from sagegraph.embed import resolve_precision

        return resolve_precision(self.precision, self.device)

    def resolved_name(self) -> str:
        """The model as vectors are cached, fingerprinted and recorded: precision is part of it."""
        from sagegraph.embed import cache_name

        return cache_name(self.model, self.resolved_precision())


class EdgeConfig(_Strict):
    percentile: float = Field(
        95.0, ge=0, lt=100, description="keep a similarity edge above this percentile of its signal"
    )
    logic: Literal["or", "and"] = "or"
    top_m: int = Field(20, ge=1, description="ANN candidates per node and signal")
    entity_max_df: int = Field(
        50, ge=2, description="entities on more nodes than this are too generic to propose pairs"
    )
    ann: Literal["auto", "flat", "hnsw", "cluster"] = Field(
        "auto",
        description="candidate search: auto = exact on a GPU when torch sees one; else flat when a side is small, "
        "cluster otherwise",
    )
    hnsw_m: int = 32
    flat_below: int = Field(
        5000, ge=1, description="auto: exact search when the querying or the searched side has fewer nodes than this"
    )
    cluster_size: int = Field(256, ge=8, description="cluster search: base nodes per k-means cluster")
    cluster_probes: int = Field(16, ge=1, description="cluster search: nearest clusters scored per query")


class StoreConfig(_Strict):
    backend: Literal["falkordb", "falkordb-server", "neo4j", "none"] = "falkordb"
    graph: str = "sagegraph"
    path: Path | None = Field(None, description="falkordb: data dir; defaults to <out>/store")
    url: str | None = Field(
        None,
        description="falkordb-server: redis://host:port; with a password, set $FALKORDB_URL instead (configs "
        "and manifests are shared)",
    )

    @field_validator("url")
    @classmethod
    def _no_credentials(cls, v: str | None) -> str | None:
        if v and "@" in v.split("//", 1)[-1]:
            raise ValueError(
                "store.url holds credentials, which would be copied into every manifest and run; put the URL in "
                "$FALKORDB_URL"
            )
        return v

    batch_size: int = 1000
    update: Literal["auto", "whole", "difference"] = Field(
        "auto",
        description="how a rebuild writes the store: auto writes the difference where it costs no copy (FalkorDB: "
        "into the store graph of the generation kept for a rollback, taken over; Neo4j: in place, in one "
        "transaction) and loads whole otherwise; difference also copies the published FalkorDB graph when "
        "there is none to take over; whole always loads whole",
    )
    vector_index: bool = Field(
        False,
        description="declare the engine's own vector index over the node embeddings, for vector queries of your own "
        "in Cypher (sagegraph's dense retrieval reads faiss, not this index); FalkorDB rebuilds it each time its "
        "server loads a graph",
    )


class AdaptConfig(_Strict):
    """`sagegraph adapt` as the last stage of a KB build."""

    enabled: bool = Field(
        False,
        description="after a KB build publishes a generation, draw questions from the KB and tune the retrievers' "
        "encoder to it, as `sagegraph adapt` does (no gold; a generation whose draw another generation already "
        "trained on takes its encoder)",
    )
    llm: Path | None = Field(
        None,
        description="an LLM profile (as `sagegraph adapt --llm`) whose model gives each relation type's words, one "
        "cached call a relation; none: the relation names alone",
    )


class RunnerConfig(_Strict):
    dask_address: str | None = Field(None, description="an existing Dask scheduler; None starts a LocalCluster")
    n_workers: int = Field(2, ge=1)
    threads_per_worker: int = Field(1, ge=1)
    batch_size: int = Field(1000, ge=1, description="sources per fanned-out batch")


class BuildConfig(_Strict):
    name: str = "sagegraph"
    out: Path = Path("work/graph")
    corpus: CorpusConfig = CorpusConfig()
    chunking: ChunkingConfig = ChunkingConfig()
    tables: TableConfig = TableConfig()
    metadata: MetadataConfig = MetadataConfig()
    llm: LLMConfig = LLMConfig()
    embedding: EmbeddingConfig = EmbeddingConfig()
    edges: EdgeConfig = EdgeConfig()
    store: StoreConfig = StoreConfig()
    runner: RunnerConfig = RunnerConfig()
    adapt: AdaptConfig = AdaptConfig()
    max_sources: int | None = Field(None, ge=1)
    subset: Literal["prefix", "around_questions"] = Field(
        "prefix",
        description="how max_sources picks an OTT-QA subset: the first tables and the passages they link, or the "
        "questions' tables, the passages those tables link, then random distractors (keeps the neighbourhoods "
        "the graph is for)",
    )
    corpus_version: str = Field(
        "",
        description="set by every build from the corpus contents (`construct.changes`): empty while they are "
        "what this config's first ingest read, else their digest; a value written here is replaced",
    )

    @field_validator("name")
    @classmethod
    def _name(cls, v: str) -> str:
        if not v.replace("-", "").replace("_", "").isalnum():
            raise ValueError("use letters, digits, '-' and '_' only")
        return v

    @model_validator(mode="after")
    def _generic_inputs(self) -> BuildConfig:
        if self.corpus.kind == "generic" and not (self.corpus.documents or self.corpus.tables):
            raise ValueError("corpus.kind 'generic' needs corpus.documents and/or corpus.tables")
        return self

    def stage_fingerprint(self, *sections: str) -> str:
        """A hash of the config sections a stage depends on: change them and that stage reruns."""
        payload = {
            s: json.loads(getattr(self, s).model_dump_json())
            if hasattr(getattr(self, s), "model_dump_json")
            else getattr(self, s)
            for s in sections
        }
        return hashlib.sha1(json.dumps(payload, sort_keys=True, default=str).encode()).hexdigest()[:12]


def format_errors(path: Path, exc: ValidationError, what: str = "config") -> str:
    lines = [f"{path}: invalid {what} ({exc.error_count()} problem{'s' if exc.error_count() > 1 else ''})"]
    for err in exc.errors():
        loc = ".".join(str(p) for p in err["loc"]) or "(top level)"
        lines.append(f"  {loc}: {err['msg']}")
    return "\n".join(lines)


def _deep_merge(base: dict, override: dict) -> dict:
    out = dict(base)
    for k, v in override.items():
        out[k] = _deep_merge(out[k], v) if isinstance(v, dict) and isinstance(out.get(k), dict) else v
    return out


def project_dir(config_path: Path) -> Path:
    """Relative paths in a config resolve against the project dir holding `conf/`."""
    base = Path(config_path).resolve().parent
    return base.parent if base.name == "conf" else base


@overload
def resolve_path(base: Path, value: Path) -> Path: ...
@overload
def resolve_path(base: Path, value: None) -> None: ...
@overload
def resolve_path(base: Path, value: Path | None) -> Path | None: ...
def resolve_path(base: Path, value: Path | None) -> Path | None:
    if value is None:
        return None
    value = Path(os.path.expandvars(str(value))).expanduser()
    return value if value.is_absolute() else (base / value).resolve()


def read_yaml_mapping(path: str | Path, what: str = "config") -> dict:
    """A YAML file holding a mapping, or a ConfigError naming the file (and the line of a syntax
    error): every config reader (build, sweep, LLM profile) goes through here."""
    path = Path(path)
    if not path.is_file():
        raise ConfigError(
            f"{path}: {what} file not found" if not path.exists() else f"{path}: a folder, not a {what} file"
        )
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f":{mark.line + 1}" if mark else ""
        raise ConfigError(f"{path}{where}: not valid YAML: {getattr(exc, 'problem', exc)}") from None
    if data is None:  # an empty file is more often a mistake than a wish for every default
        raise ConfigError(
            f"{path}: the {what} file is empty (write at least the settings that differ from the defaults, e.g. "
            "corpus:)"
        )
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: expected a mapping at the top level")
    return data


def load_config(path: str | Path, **overrides) -> BuildConfig:
    """Read a YAML build config; relative paths resolve against the project dir holding `conf/`."""
    path = Path(path)
    data = read_yaml_mapping(path)
    if "extends" in data:  # a variant names its base config and overrides a few fields
        base = data.pop("extends")
        if not isinstance(base, str) or not base.strip():
            raise ConfigError(f"{path}: extends: expected the path of a base config, got {base!r}"[:300])
        base_path = (path.parent / base).resolve()
        if not base_path.is_file():
            raise ConfigError(f"{path}: extends: {base_path} not found")
        data = _deep_merge(read_yaml_mapping(base_path, "base config"), data)
    try:
        cfg = BuildConfig.model_validate(data)
    except ValidationError as exc:
        raise ConfigError(format_errors(path, exc)) from None
    base = project_dir(path)
    cfg.out = resolve_path(base, cfg.out)
    for key in ("path", "documents", "tables", "questions"):
        setattr(cfg.corpus, key, resolve_path(base, getattr(cfg.corpus, key)))
    cfg.store.path = resolve_path(base, cfg.store.path)
    cfg.llm.cache_dir = resolve_path(base, cfg.llm.cache_dir)
    cfg.adapt.llm = resolve_path(base, cfg.adapt.llm)
    if cfg.adapt.llm is not None and not cfg.adapt.llm.is_file():
        raise ConfigError(f"{path}: adapt.llm: no LLM profile at {cfg.adapt.llm}")
    return apply_overrides(cfg, **overrides)


def apply_overrides(
    cfg: BuildConfig, *, out: Path | None = None, max_sources: int | None = None, metadata: str | None = None
) -> BuildConfig:
    if out is not None:
        cfg.out = Path(out).resolve()
    if max_sources is not None:
        cfg.max_sources = max_sources
    if metadata is not None:
        cfg.metadata.mode = metadata  # type: ignore[assignment]
    return cfg


def load_llm_config(path: str | Path) -> LLMConfig:
    """An LLM profile (`--llm conf/llm_local.yaml`): LLMConfig fields at the top level or under
    `llm:`; cache_dir resolves like any config path."""
    path = Path(path)
    data = read_yaml_mapping(path, "LLM config")
    if isinstance(data.get("llm"), dict) and len(data) == 1:
        data = data["llm"]
    try:
        cfg = LLMConfig.model_validate(data)
    except ValidationError as exc:
        raise ConfigError(format_errors(path, exc, "LLM config")) from None
    cfg.cache_dir = resolve_path(project_dir(path), cfg.cache_dir)
    return cfg
