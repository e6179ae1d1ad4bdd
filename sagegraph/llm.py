"""An OpenAI-compatible chat client with an on-disk reply cache, token/cost accounting and backoff.

Why each piece: a cached reply is never paid twice (resumed builds, reruns); only replies the caller
accepted are cached, so a malformed answer is not replayed forever; 429s and 5xx are retried with
exponential backoff (honouring Retry-After) instead of corrupting a run.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import random
import sqlite3
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from sagegraph.config import LLMConfig
from sagegraph.errors import LLMError, ReplyRejected
from sagegraph.sqlite_store import SQLiteFile

log = logging.getLogger("sagegraph.llm")
CACHE_VERSION = 1


@dataclass
class Usage:
    calls: int = 0
    cached: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    retries: int = 0
    cost_usd: float = 0.0
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False, compare=False)

    def add(self, prompt: int, completion: int, cost: float, cached: bool) -> None:
        with self._lock:
            self.calls += 1
            self.cached += int(cached)
            if not cached:
                self.prompt_tokens += prompt
                self.completion_tokens += completion
                self.cost_usd += cost

    def as_dict(self) -> dict[str, Any]:
        return {k: (round(v, 6) if isinstance(v, float) else v) for k, v in self.__dict__.items() if not k.startswith("_")}


@dataclass
class Reply:
    text: str
    prompt_tokens: int
    completion_tokens: int
    cached: bool


def estimate_tokens(text: str) -> int:
    """~4 characters a token for English: good enough to show a cost before a run starts."""
    return max(1, len(text) // 4)


class ReplyCache:
    def __init__(self, path: Path):
        self.file = SQLiteFile(path, "CREATE TABLE IF NOT EXISTS reply (key TEXT PRIMARY KEY, text TEXT, prompt INT, completion INT, created REAL)")

    def _db(self) -> sqlite3.Connection:
        return self.file.conn()

    def get(self, key: str) -> Reply | None:
        row = self._db().execute("SELECT text, prompt, completion FROM reply WHERE key=?", (key,)).fetchone()
        return Reply(row[0], row[1], row[2], True) if row else None

    def put(self, key: str, reply: Reply) -> None:
        with self._db() as db:
            db.execute("INSERT OR REPLACE INTO reply VALUES (?,?,?,?,?)", (key, reply.text, reply.prompt_tokens, reply.completion_tokens, time.time()))


def require_credentials(cfg: LLMConfig) -> str | None:
    """The API key, or None for a keyless local endpoint; checked before a build starts any work."""
    key = os.environ.get(cfg.api_key_env)
    if not key and cfg.base_url is None:
        raise LLMError(f"no API key: set {cfg.api_key_env} (or llm.base_url for a local OpenAI-compatible server)")
    return key


_RETRYABLE = ("RateLimitError", "APITimeoutError", "APIConnectionError", "InternalServerError")


class LLMClient:
    def __init__(self, cfg: LLMConfig, cache_path: Path, client: Any = None, sleep: Callable[[float], None] = time.sleep):
        self.cfg = cfg
        self.cache = ReplyCache(cache_path)
        self.usage = Usage()
        self._client = client
        self._sleep = sleep

    def __getstate__(self):
        state = self.__dict__.copy()
        state["_client"] = None
        state["usage"] = Usage()
        return state

    @property
    def client(self):
        if self._client is None:
            from openai import OpenAI

            key = require_credentials(self.cfg)
            # Retries are ours (with logging and Retry-After), so the SDK's own are off.
            self._client = OpenAI(base_url=self.cfg.base_url, api_key=key or "unused", timeout=self.cfg.timeout_s, max_retries=0)
        return self._client

    def cache_key(self, messages: list[dict[str, str]], params: dict[str, Any]) -> str:
        payload = {"v": CACHE_VERSION, "model": self.cfg.model, "messages": messages, "params": params}
        return hashlib.sha256(json.dumps(payload, sort_keys=True).encode("utf-8")).hexdigest()

    def cost(self, prompt: int, completion: int) -> float:
        return (prompt * self.cfg.price_input_per_mtok + completion * self.cfg.price_output_per_mtok) / 1e6

    def complete(self, messages: list[dict[str, str]], *, json_mode: bool = False, accept: Callable[[str], Any] | None = None) -> Reply:
        """One chat completion; `accept(text)` raising means 'do not cache this reply'."""
        params: dict[str, Any] = {"temperature": self.cfg.temperature, "max_tokens": self.cfg.max_tokens}
        if json_mode:
            params["response_format"] = {"type": "json_object"}
        key = self.cache_key(messages, params)
        hit = self.cache.get(key)
        if hit is not None:
            self.usage.add(0, 0, 0.0, cached=True)
            return hit
        reply = self._call(messages, params)
        self.usage.add(reply.prompt_tokens, reply.completion_tokens, self.cost(reply.prompt_tokens, reply.completion_tokens), cached=False)
        if accept is not None:
            try:
                accept(reply.text)  # raises on a bad reply: nothing is cached, the caller decides
            except Exception as exc:
                raise ReplyRejected(f"unusable reply from {self.cfg.model}: {exc}") from exc
        self.cache.put(key, reply)
        return reply

    def _call(self, messages: list[dict[str, str]], params: dict[str, Any]) -> Reply:
        delay = 1.0
        for attempt in range(self.cfg.max_retries + 1):
            try:
                resp = self.client.chat.completions.create(model=self.cfg.model, messages=messages, **params)
            except Exception as exc:  # openai's exception classes, matched by name to keep imports lazy
                name = type(exc).__name__
                if name not in _RETRYABLE or attempt == self.cfg.max_retries:
                    raise LLMError(f"LLM call failed ({name}): {exc}") from exc
                wait = delay
                headers = getattr(getattr(exc, "response", None), "headers", None) or {}
                if headers.get("retry-after"):
                    try:
                        wait = float(headers["retry-after"])
                    except ValueError:
                        pass
                wait = min(60.0, wait) * (1 + 0.1 * random.random())
                log.warning("LLM %s, retry %d/%d in %.1fs", name, attempt + 1, self.cfg.max_retries, wait)
                self.usage.retries += 1
                self._sleep(wait)
                delay *= 2
                continue
            usage = getattr(resp, "usage", None)
            text = resp.choices[0].message.content or ""
            return Reply(
                text=text,
                prompt_tokens=getattr(usage, "prompt_tokens", None) or estimate_tokens(json.dumps(messages)),
                completion_tokens=getattr(usage, "completion_tokens", None) or estimate_tokens(text),
                cached=False,
            )
        raise LLMError("unreachable")


def parse_json_reply(text: str) -> dict[str, Any]:
    """Accept pure JSON, or JSON inside a ```json fence that many models add despite instructions."""
    s = text.strip()
    if s.startswith("```"):
        s = s.split("\n", 1)[1] if "\n" in s else s[3:]
        s = s.rsplit("```", 1)[0]
    start, end = s.find("{"), s.rfind("}")
    if start < 0 or end < start:
        raise ValueError("no JSON object in reply")
    obj = json.loads(s[start : end + 1])
    if not isinstance(obj, dict):
        raise ValueError("reply is not a JSON object")
    return obj
