"""Sweep grids: YAML validated by pydantic, expanded into evaluation configurations (each retriever
class expands its own keys), grouped so that configurations sharing their seeds compute them once."""

from __future__ import annotations

import dataclasses
import itertools
import json
import math
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from sagegraph.config import (
    BuildConfig,
    LLMConfig,
    format_errors,
    load_llm_config,
    project_dir,
    read_yaml_mapping,
    resolve_path,
)
from sagegraph.corpus.questions import matching_questions, sample_questions, write_question_subset
from sagegraph.errors import ConfigError, InputError, SageGraphError
from sagegraph.eval.evaluate import default_questions, group_key, prompt_version, read_questions, seed_config_of
from sagegraph.eval.runner import EvalConfig
from sagegraph.retrieve.registry import retriever_class


class GridBlock(BaseModel):
    """A cartesian product of values: retrievers, k, their `params`, and further keys that the
    block's retrievers read themselves: a parameter of theirs given beside `params` (`alpha`,
    `k_prime`, `seed_retriever`, `policy`, ...) or a retriever's own grid sugar (SAGE's `total_k`
    with `seed_share`). A key that no retriever of the block takes is refused."""

    model_config = ConfigDict(extra="allow")
    retriever: list[str]
    k: list[int] = Field(default_factory=list)
    params: dict[str, Any] = Field(
        default_factory=dict,
        description="the retrievers' own parameters; a list is an axis (a list-valued parameter is given as a "
        "list of lists)",
    )

    @model_validator(mode="after")
    def _check(self) -> GridBlock:
        if not self.k and "total_k" not in self.axes():
            raise ValueError("give k (or a retriever's own result-size key such as total_k)")
        if any(v < 1 for v in self.k + [v for v in self.axes().get("total_k", []) if isinstance(v, int)]):
            raise ValueError("k values must be >= 1")
        return self

    def axes(self) -> dict[str, list[Any]]:
        """The block's keys beside retriever, k and params, each as a list of values."""
        return {key: (v if isinstance(v, list) else [v]) for key, v in (self.model_extra or {}).items()}


class MlflowConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")
    tracking_uri: str | None = Field(None, description="default: sqlite:///<out>/mlflow.db")
    experiment: str = "sagegraph"


class SampleConfig(BaseModel):
    """A stated subset of the questions, the same for every configuration: `n` drawn with a seed,
    spread evenly over the values of a question field (e.g. the synthetic KB's template `family`).
    Never chosen by gold labels or by how a retriever did."""

    model_config = ConfigDict(extra="forbid")
    n: int | None = Field(None, ge=1, description="questions drawn (None: every question `where` keeps)")
    where: dict[str, Any] = Field(
        default_factory=dict,
        description="keep only questions whose field has this value or one of these values, e.g. {split: test}",
    )
    by: str | None = Field("family", description="a question field to stratify by (None: a plain random sample)")
    seed: int = 0


class SweepConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")
    name: str = "sweep"
    graph: Path | None = Field(None, description="a built graph dir; default: <build config out>/graph")
    build: Path | None = Field(None, description="a build config: the graph is built first when missing")
    questions: Path | None = None
    out: Path = Path("work/sweeps/sweep")
    mlflow: MlflowConfig = MlflowConfig()
    grid: list[GridBlock]
    edges: dict[str, list[Any]] = Field(
        default_factory=dict,
        description="edge settings to sweep (e.g. percentile: [90, 95, 99]): one graph per combination, same nodes",
    )
    plot_totals: list[int] = Field(default_factory=lambda: [2, 5, 10, 20, 50, 100])
    sample: SampleConfig | None = None
    llm: LLMConfig | Path | None = Field(
        None,
        description="LLM settings for LLM retrievers: a profile file (conf/llm_local.yaml) or the settings "
        "inline; default: OPENAI_BASE_URL / OPENAI_API_KEY",
    )
    concurrency: int = Field(1, ge=1, description="questions answered at once per configuration (LLM retrievers)")
    timeout_s: float | None = Field(
        None, gt=0, description="seconds a question may take before it is scored as retrieving nothing"
    )
    mlflow_traces: bool = Field(True, description="log each LLM retriever's queries as MLflow traces")
    max_configurations: int = Field(
        500,
        ge=1,
        description="a grid expanding to more configurations than this is refused before any work (a mistyped "
        "axis can mean 10,000 runs); raise it for a sweep that means it",
    )

    @model_validator(mode="after")
    def _graph_or_build(self) -> SweepConfig:
        if self.graph is None and self.build is None:
            raise ValueError("give graph (a built graph dir) or build (a build config)")
        if any(not values for values in self.edges.values()):
            raise ValueError("edges: every setting needs at least one value")
        return self

    def edge_variants(self) -> list[dict[str, Any]]:
        from sagegraph.construct.variants import edge_grid

        return edge_grid(self.edges) if self.edges else []


def load_sweep(path: Path) -> SweepConfig:
    path = Path(path)
    data = read_yaml_mapping(path, "sweep")
    try:
        cfg = SweepConfig.model_validate(data)
    except ValidationError as exc:
        raise ConfigError(format_errors(path, exc, "sweep")) from None
    base = project_dir(path)
    for key in ("graph", "build", "questions", "out"):
        setattr(cfg, key, resolve_path(base, getattr(cfg, key)))
    if isinstance(cfg.llm, Path):
        cfg.llm = load_llm_config(base / cfg.llm if not cfg.llm.is_absolute() else cfg.llm)
    elif isinstance(cfg.llm, LLMConfig):
        cfg.llm.cache_dir = resolve_path(base, cfg.llm.cache_dir)
    try:
        cfg.edge_variants()
        configurations(cfg)  # unknown retrievers and bad parameters fail here, naming the block
    except ConfigError as exc:
        raise ConfigError(f"{path}: {exc}") from None
    return cfg


def llm_settings(cfg: SweepConfig, override: Path | None = None) -> LLMConfig | None:
    """The sweep's LLM settings (`--llm` wins), or the environment's when an LLM retriever needs one."""
    if override is not None:
        return load_llm_config(override)
    if isinstance(cfg.llm, LLMConfig):
        return cfg.llm
    return LLMConfig() if any(c.needs_llm() for c in configurations(cfg)) else None


# Combinations one `params` block may cross to before the sweep's own bound is checked.
MAX_GRID = 100_000


def param_grid(params: dict[str, Any]) -> list[dict[str, Any]]:
    """{"repair": [true, false], "max_rows": 500} -> [{"repair": True, "max_rows": 500}, {"repair": False, ...}]."""
    axes = {k: (v if isinstance(v, list) else [v]) for k, v in params.items()}
    if any(not v for v in axes.values()):
        raise ConfigError(
            f"params: every axis needs at least one value ({', '.join(k for k, v in axes.items() if not v)})"
        )
    if (size := math.prod(len(v) for v in axes.values())) > MAX_GRID:
        raise ConfigError(f"params: the axes cross to {size:,} combinations; at most {MAX_GRID:,} are expanded")
    return [dict(zip(axes, combo)) for combo in itertools.product(*axes.values())]


def expand(block: GridBlock) -> list[EvalConfig]:
    """The block's configurations: each retriever's own (k, params) grid from the block's k and
    axes, crossed with its `params` grid (which wins over an axis of the same name)."""
    axes = block.axes()
    out: list[Any] = []
    for name in block.retriever:
        for k, own in retriever_class(name).grid(list(block.k), axes):
            out.extend(EvalConfig(name, k, {**own, **p}) for p in param_grid(block.params))
    return out


def _check_axes(i: int, block: GridBlock) -> None:
    classes = [retriever_class(name) for name in block.retriever]
    for key in block.axes():
        if key == "total_k" or any(key in cls.axes() or key in cls.grid_keys for cls in classes):
            continue
        raise ConfigError(f"grid.{i}: no retriever of this block ({', '.join(block.retriever)}) takes {key!r}")


def configurations(cfg: SweepConfig) -> list[EvalConfig]:
    """All configurations, deduplicated; unknown retriever names, keys and parameters fail here,
    before any work. With an `edges` axis, retrievers that use edges run once per edge variant,
    the others once."""
    from sagegraph.construct.variants import label

    variants = [label(v) for v in cfg.edge_variants()] or [""]
    seen: dict[str, EvalConfig] = {}
    for i, block in enumerate(cfg.grid):
        try:
            _check_axes(i, block)
            configs = expand(block)
        except (ConfigError, SageGraphError) as exc:
            raise ConfigError(f"grid.{i}: {exc}") from None
        for c in configs:
            try:
                c.prompt = prompt_version(c)  # validates the parameters, a seed retriever's included
            except ConfigError as exc:
                raise ConfigError(f"grid.{i}.params: {exc}") from None
            for edges in variants if c.retriever_class.uses_edges else [""]:
                v = dataclasses.replace(c, edges=edges)
                seen.setdefault(v.key(), v)
        if len(seen) > cfg.max_configurations:
            raise ConfigError(
                f"grid.{i}: the grid expands to more than {cfg.max_configurations} configurations "
                f"({len(seen)} so far); set max_configurations if the sweep means it"
            )
    return list(seen.values())


def groups(cfgs: list[EvalConfig]) -> list[list[EvalConfig]]:
    """One group per seed computation and graph (`group_key`)."""
    out: dict[tuple, list[EvalConfig]] = {}
    for c in cfgs:
        out.setdefault(group_key(c), []).append(c)
    return list(out.values())


def _seed_family(c: EvalConfig) -> tuple[str, str] | None:
    """(seed retriever, its canonical parameters) of a seed-expanding configuration, else None."""
    if (seed := seed_config_of(c)) is None:
        return None
    name, k, params = seed
    return name, json.dumps(EvalConfig(name, k, params).canonical_params(), sort_keys=True)


def figure4(
    results: list[tuple[EvalConfig, dict[str, Any]]], totals: list[int], edges: str = ""
) -> list[dict[str, Any]]:
    """SAGE Fig. 4 rows for each seed retriever the sweep ran alone too (its `baseline`): at each
    total k, Extended BL (the seed retriever at k), BL+Graph (the best k1 + k2 = k split of the
    configurations that expand its seeds, chosen on these questions, on the graph variant
    `edges`), and BL (the seeds alone: the seed retriever at k1 of that split)."""
    family = [(c, m, _seed_family(c)) for c, m in results]
    rows = []
    for name, params in dict.fromkeys(f for c, _, f in family if c.edges == edges and f):
        alone = {
            c.k: m
            for c, m, _ in family
            if c.retriever == name
            and c.edges in ("", edges)
            and json.dumps(c.canonical_params(), sort_keys=True) == params
        }
        if not alone:
            continue
        for total in totals:
            key = f"recall@{total}"
            splits = [(c, m) for c, m, f in family if c.edges == edges and f == (name, params) and c.total == total]
            ext = alone.get(total)
            row: dict[str, Any] = {
                "k": total,
                "edges": edges,
                "baseline": name,
                "extended_bl": ext[key] if ext and key in ext else None,
            }
            if splits:
                best_c, best_m = max(splits, key=lambda cm: (cm[1][key], -cm[0].k))
                row.update({"bl_graph": best_m[key], "k1": best_c.k, "k2": best_c.total - best_c.k})
                bl = alone.get(best_c.k)  # the seeds alone: a k1-long list, so its recall@k1
                row["bl"] = bl.get(f"recall@{best_c.k}") if bl else None
            if row.get("bl_graph") is not None and row["extended_bl"] is not None:
                row["gain"] = row["bl_graph"] - row["extended_bl"]
            rows.append(row)
    return rows


def plot_figure4(rows: list[dict[str, Any]], path: Path) -> Path | None:
    """None when the sweep has nothing to draw (no seed-expanding configuration and its seed
    retriever at its plot totals): an empty figure would pass for a result."""
    lines = []
    baselines = list(dict.fromkeys(r.get("baseline", "") for r in rows))
    for b in baselines:
        mine = [r for r in rows if r.get("baseline", "") == b]
        named = f" {b}" if len(baselines) > 1 else ""
        variants = list(dict.fromkeys(r.get("edges", "") for r in mine))
        first = [r for r in mine if r.get("edges", "") == variants[0]]
        if len(variants) == 1:  # BL is the seeds of the best split, which differs per edge variant
            lines.append((first, "bl", f"BL{named} (k1 seeds only)", "o:"))
        lines.append((first, "extended_bl", f"Extended BL{named} (k)", "s--"))
        for v in variants:
            lines.append(
                (
                    [r for r in mine if r.get("edges", "") == v],
                    "bl_graph",
                    f"BL+Graph{named} (k1 + k2){' ' + v if v else ''}",
                    "^-",
                )
            )
    series = [
        (label, style, pts)
        for subset, key, label, style in lines
        if (pts := [(r["k"], 100 * r[key]) for r in subset if r.get(key) is not None])
    ]
    if not series:
        return None
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6.5, 4))
    ks = sorted({r["k"] for r in rows})
    for label, style, pts in series:
        ax.plot([p[0] for p in pts], [p[1] for p in pts], style, label=label)
    ax.set_xscale("log")
    ax.set_xticks(ks)
    ax.set_xticklabels([str(k) for k in ks])
    ax.minorticks_off()  # a log axis would otherwise label its minor ticks "3x10^0": only the k values are labelled
    ax.set_xlabel("k (retrieved chunks)")
    ax.set_ylabel("Recall@k (%)")
    ax.set_title("Recall@k: BL, BL+Graph, Extended BL")
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def graph_dir_of(cfg: SweepConfig) -> Path:
    if cfg.graph is not None:
        return cfg.graph
    from sagegraph.config import load_config

    if cfg.build is None:
        raise ConfigError("a sweep names its graph (`graph:`) or its build config (`build:`)")
    return load_config(cfg.build).out / "graph"


def graph_to_build(cfg: SweepConfig) -> BuildConfig | None:
    """The sweep's build config when it names one and its graph is missing or was built from other
    settings; None when the graph can be used as it is."""
    if cfg.build is None:
        return None
    from sagegraph.config import load_config
    from sagegraph.construct.artifacts import Layout
    from sagegraph.construct.stages import resolve_corpus

    build_cfg = load_config(cfg.build)
    graph = graph_dir_of(cfg)
    if (
        graph != build_cfg.out / "graph"
    ):  # the sweep names another graph explicitly: use it as it is (its corpus is not read)
        return None
    build_cfg, _ = resolve_corpus(build_cfg)  # a corpus changed since its build is built again first
    manifest = graph / "manifest.json"
    built = (
        json.loads(manifest.read_text()).get("fingerprint")
        if manifest.exists() and (graph / "edges.parquet").exists()
        else None
    )
    return None if built == Layout.of(build_cfg).cfg_fp["edges"] else build_cfg


def sweep_questions(cfg: SweepConfig, graph: Path, out: Path) -> Path:
    """The questions file, or the sweep's stated sample of it written beside the results."""
    questions = cfg.questions or default_questions(graph)
    if cfg.sample is None:
        return questions
    kept = matching_questions(read_questions(questions), cfg.sample.where)
    if not kept:
        raise InputError(questions, None, "sample.where", f"no question matches {cfg.sample.where}")
    picked = sample_questions(kept, cfg.sample.n or len(kept), cfg.sample.by, cfg.sample.seed)
    return write_question_subset(questions, {q.id for q in picked}, out / "questions.sample.jsonl")
