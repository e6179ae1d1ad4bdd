"""An OpenAI-compatible chat client with an on-disk reply cache, token/cost accounting and backoff.

Contract (`LLMClient.chat`): one chat request in, one `Reply` out (text and tool calls, tokens,
seconds, whether it came from the cache). The same request never reaches the endpoint twice: the
cache key holds everything that changes a reply (model, base_url, messages, tools, tool choice,
response format, temperature, max tokens and a sample index, so n agents at temperature > 0 get n
different samples). Only replies the caller accepts are cached, so a malformed answer is not
replayed forever. In `replay` mode a request missing from the cache is an error (ReplayMiss): a
published run can be reproduced with no endpoint at all.

Failures are split the way an evaluation must treat them:
- the endpoint answered, but not with what was asked for -> ReplyRejected (the method's fallback);
- the endpoint refused this request (400: too long, bad tools) -> LLMRequestRefused (fallback),
  recorded, so the run's replay is refused at the same step;
- no key, a refused key, connection or server errors after the retries, a replay miss ->
  LLMUnavailable, an InfraError: the run stops instead of scoring empty retrievals.

429s and 5xx are retried with exponential backoff honouring Retry-After; a process-wide limit caps
concurrent requests per endpoint, and optional requests/tokens per minute pace them.
"""

from __future__ import annotations

import contextlib
import contextvars
import hashlib
import json
import logging
import os
import random
import sqlite3
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sagegraph.config import LLMConfig
from sagegraph.errors import LLMError, LLMUnavailable, ReplayMiss, ReplyRejected
from sagegraph.sqlite_store import SQLiteFile

log = logging.getLogger("sagegraph.llm")
CACHE_VERSION = 1


class LLMRequestRefused(LLMError):
    """The endpoint refused this request (HTTP 400/413/422: context too long, unsupported option):
    not an outage; the caller's fallback decides (AF degrades its documents, SPARK uses hybrid).
    `key` is the refusal's reply-cache key: it is recorded like a reply, so a run's trace must name
    it for `sagegraph llm export`, or a replay elsewhere misses where the live run was refused."""

    def __init__(self, message: str, key: str | None = None) -> None:
        super().__init__(message)
        self.key = key


@dataclass
class Usage:
    calls: int = 0
    cached: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    retries: int = 0
    # Replies not cached because they are not whole: cut by the token limit (finish_reason other
    # than stop/tool_calls), or with no message at all (empty `choices`).
    truncated: int = 0
    malformed: int = 0
    cost_usd: float = 0.0
    llm_seconds: float = 0.0
    # What the calls cost when they were made, cached or not: a method's cost per query, the same
    # in a live run and in its replay (the fields above count only what this run paid).
    work_prompt_tokens: int = 0
    work_completion_tokens: int = 0
    work_seconds: float = 0.0
    # Served from replies imported from an archive (`sagegraph llm import`): their counts are the
    # archive's, not this machine's.
    imported: int = 0
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False, compare=False)

    def add(
        self,
        prompt: int,
        completion: int,
        cost: float,
        cached: bool,
        seconds: float = 0.0,
        retries: int = 0,
        finish: str | None = "stop",
        imported: bool = False,
    ) -> None:
        with self._lock:
            self.calls += 1
            self.imported += int(imported)
            self.truncated += int(finish not in GOOD_FINISH and finish not in (EMPTY, STOPPED))
            self.malformed += int(finish == EMPTY)
            self.cached += int(cached)
            self.retries += retries
            self.work_prompt_tokens += prompt
            self.work_completion_tokens += completion
            self.work_seconds += seconds
            if not cached:
                self.prompt_tokens += prompt
                self.completion_tokens += completion
                self.cost_usd += cost
                self.llm_seconds += seconds

    def as_dict(self) -> dict[str, Any]:
        return {
            k: (round(v, 6) if isinstance(v, float) else v) for k, v in self.__dict__.items() if not k.startswith("_")
        }


# The usages of the question being answered in this thread (`usage_scope`, innermost last), beside
# the client's total.
_SCOPE: contextvars.ContextVar[tuple[Usage, ...]] = contextvars.ContextVar("sagegraph_llm_scope", default=())


@contextlib.contextmanager
def usage_scope() -> Iterator[Usage]:
    """Count the LLM calls made inside the block (in this thread) separately: per-query usage when
    questions run concurrently on one client. A scope inside another counts in both, so a
    retriever made of others (a vote) counts its members' calls as they count their own."""
    u = Usage()
    token = _SCOPE.set((*_SCOPE.get(), u))
    try:
        yield u
    finally:
        _SCOPE.reset(token)


# A reply is whole when the model stopped by itself (or to call tools). "length" (cut by the token
# limit), "content_filter" and the rest are not: recorded with their finish_reason, never served as
# good (the caller's parsing falls back and usage counts them as truncated).
GOOD_FINISH = {"stop", "tool_calls", "function_call", "eos", None}
EMPTY = "empty"  # our mark for a completion with no choice or no message
# Our mark for a request the endpoint refused (400: too long, bad tools). Recorded so a replay
# refuses where the live run was refused (a DGR agent stops there); a live run asks again.
REFUSED = "refused"
# Our mark for a reply whose query the store stopped at a bound (time, memory): a replay serves it
# (and stops at the same bound), a live run asks again; never served to it as good.
STOPPED = "store_stopped"


@dataclass
class Reply:
    text: str
    prompt_tokens: int
    completion_tokens: int
    cached: bool
    tool_calls: list[dict[str, Any]] = field(default_factory=list)  # [{"id", "name", "arguments" (JSON text)}]
    seconds: float = 0.0
    key: str = ""
    finish_reason: str | None = "stop"
    imported: bool = False  # from an archive, not asked on this machine

    @property
    def whole(self) -> bool:
        return self.finish_reason in GOOD_FINISH


def estimate_tokens(text: str) -> int:
    """~4 characters a token for English: good enough to show a cost before a run starts."""
    return max(1, len(text) // 4)


class ReplyCache:
    def __init__(self, path: Path):
        self.path = Path(path)
        # `request`: what the key is the hash of, so an exported reply can be checked to answer
        # only the request it recorded (`eval.replies.import_replies`).
        self.file = SQLiteFile(
            path,
            "CREATE TABLE IF NOT EXISTS reply (key TEXT PRIMARY KEY, text TEXT, prompt INT, completion INT, "
            "created REAL, extra TEXT, request TEXT)",
        )
        self._migrated = False

    def _db(self) -> sqlite3.Connection:
        db = self.file.conn()
        if not self._migrated:  # caches written before tool calls (or recorded requests) lack a column
            cols = {r[1] for r in db.execute("PRAGMA table_info(reply)")}
            for column in ("extra", "request"):
                if column not in cols:
                    with contextlib.suppress(sqlite3.OperationalError):  # another process added it first
                        with db:
                            db.execute(f"ALTER TABLE reply ADD COLUMN {column} TEXT")
            self._migrated = True
        return db

    def get(self, key: str) -> Reply | None:
        row = self._db().execute("SELECT text, prompt, completion, extra FROM reply WHERE key=?", (key,)).fetchone()
        if not row:
            return None
        extra = json.loads(row[3]) if row[3] else {}
        return Reply(
            row[0],
            row[1],
            row[2],
            True,
            extra.get("tool_calls", []),
            extra.get("seconds", 0.0),
            key,
            extra.get("finish_reason", "stop"),
            imported=bool(extra.get("imported")),
        )

    def inflight(self, key: str):
        """A cross-process lock for requests whose keys share a 3-hex-digit bucket (4,096 files at
        most), held while one of them is being fetched."""
        from filelock import FileLock

        folder = self.path.parent / "inflight"
        folder.mkdir(parents=True, exist_ok=True)
        return FileLock(str(folder / f"{key[:3]}.lock"))

    def put(self, key: str, reply: Reply, request: dict[str, Any] | None = None) -> None:
        extra = {"tool_calls": reply.tool_calls, "seconds": reply.seconds}
        if not reply.whole:
            extra["finish_reason"] = reply.finish_reason
        with self._db() as db:
            db.execute(
                "INSERT OR REPLACE INTO reply (key, text, prompt, completion, created, extra, request) VALUES "
                "(?,?,?,?,?,?,?)",
                (
                    key,
                    reply.text,
                    reply.prompt_tokens,
                    reply.completion_tokens,
                    time.time(),
                    json.dumps(extra),
                    json.dumps(request, sort_keys=True) if request is not None else None,
                ),
            )

    def mark(self, key: str, finish_reason: str) -> bool:
        """Record a cached reply as not whole (`finish_reason`); False when the key is not cached."""
        db = self._db()
        row = db.execute("SELECT extra FROM reply WHERE key=?", (key,)).fetchone()
        if row is None:
            return False
        extra = {**(json.loads(row[0]) if row[0] else {}), "finish_reason": finish_reason}
        with db:
            db.execute("UPDATE reply SET extra=? WHERE key=?", (json.dumps(extra), key))
        return True

    def rows(self, keys: list[str] | None = None) -> Iterator[dict[str, Any]]:
        """Cached replies as JSONL-ready dicts (`sagegraph llm export`), all or the given keys."""
        db = self._db()
        columns = "key, text, prompt, completion, created, extra, request"
        if keys is None:
            cur: Iterable[Any] = db.execute(f"SELECT {columns} FROM reply")
        else:
            cur = (r for k in keys for r in db.execute(f"SELECT {columns} FROM reply WHERE key=?", (k,)))
        for key, text, prompt, completion, created, extra, request in cur:
            row = {
                "key": key,
                "text": text,
                "prompt_tokens": prompt,
                "completion_tokens": completion,
                "created": created,
                "extra": json.loads(extra) if extra else {},
            }
            if request:
                row["request"] = json.loads(request)
            yield row

    def insert_all(self, rows: list[dict[str, Any]], replace: bool = False) -> int:
        """Add checked exported replies in one transaction (all or none); an existing key is kept,
        or replaced where `replace`. The number written."""
        db = self._db()
        written = 0
        with db:
            for row in rows:
                if not replace and db.execute("SELECT 1 FROM reply WHERE key=?", (row["key"],)).fetchone():
                    continue
                db.execute(
                    "INSERT OR REPLACE INTO reply (key, text, prompt, completion, created, extra, request) "
                    "VALUES (?,?,?,?,?,?,?)",
                    (
                        row["key"],
                        row["text"],
                        row["prompt_tokens"],
                        row["completion_tokens"],
                        row.get("created") or time.time(),
                        json.dumps(row.get("extra") or {}),
                        json.dumps(row["request"], sort_keys=True) if row.get("request") else None,
                    ),
                )
                written += 1
        return written


def request_key(request: dict[str, Any]) -> str:
    """A reply's cache key: the hash of the request it answers (`LLMClient.request`)."""
    return hashlib.sha256(json.dumps(request, sort_keys=True).encode("utf-8")).hexdigest()


def require_credentials(cfg: LLMConfig) -> str | None:
    """The API key, or None for a keyless local endpoint; checked before a build starts any work."""
    key = os.environ.get(cfg.api_key_env)
    if not key and resolved_base_url(cfg) is None:
        raise LLMUnavailable(
            f"no API key: set {cfg.api_key_env} (or llm.base_url / OPENAI_BASE_URL for a local "
            "OpenAI-compatible server)"
        )
    return key


def resolved_base_url(cfg: LLMConfig) -> str | None:
    """`llm.base_url` when set, else OPENAI_BASE_URL, else the openai default (None)."""
    return cfg.base_url or os.environ.get("OPENAI_BASE_URL") or None


class _Pacer:
    """Process-wide per endpoint: at most `concurrency` requests in flight, and, when set, at most
    `rpm` requests and `tpm` (estimated prompt) tokens in any 60 seconds."""

    _all: dict[tuple, _Pacer] = {}
    _all_lock = threading.Lock()

    def __init__(self, concurrency: int, rpm: int | None, tpm: int | None):
        self.slots = threading.BoundedSemaphore(concurrency)
        self.rpm, self.tpm = rpm, tpm
        self.window: deque[tuple[float, int]] = deque()
        self.lock = threading.Lock()

    @classmethod
    def of(cls, cfg: LLMConfig) -> _Pacer:
        key = (resolved_base_url(cfg), cfg.model, cfg.concurrency, cfg.requests_per_minute, cfg.tokens_per_minute)
        with cls._all_lock:
            if key not in cls._all:
                cls._all[key] = cls(cfg.concurrency, cfg.requests_per_minute, cfg.tokens_per_minute)
            return cls._all[key]

    def wait_turn(self, tokens: int, sleep: Callable[[float], None]) -> None:
        if not self.rpm and not self.tpm:
            return
        while True:
            with self.lock:
                now = time.monotonic()
                while self.window and now - self.window[0][0] >= 60.0:
                    self.window.popleft()
                used = sum(t for _, t in self.window)
                if (not self.rpm or len(self.window) < self.rpm) and (
                    not self.tpm or not self.window or used + tokens <= self.tpm
                ):
                    self.window.append((now, tokens))
                    return
                wait = 60.0 - (now - self.window[0][0]) + 0.01
            sleep(min(wait, 5.0))


_RETRYABLE = ("RateLimitError", "APITimeoutError", "APIConnectionError", "InternalServerError")
_REFUSED = ("BadRequestError", "UnprocessableEntityError", "ConflictError")


class LLMClient:
    def __init__(
        self, cfg: LLMConfig, cache_path: Path, client: Any = None, sleep: Callable[[float], None] = time.sleep
    ):
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
    def base_url(self) -> str | None:
        return resolved_base_url(self.cfg)

    @property
    def client(self):
        if self._client is None:
            from openai import OpenAI

            key = require_credentials(self.cfg)
            # Retries are ours (with logging and Retry-After), so the SDK's own are off.
            self._client = OpenAI(
                base_url=self.base_url, api_key=key or "unused", timeout=self.cfg.timeout_s, max_retries=0
            )
        return self._client

    def request(
        self, messages: list[dict[str, Any]], params: dict[str, Any], tools: list[dict] | None = None, sample: int = 0
    ) -> dict[str, Any]:
        """Everything a reply answers, as recorded beside it; its hash is the reply's key. Fields at
        their default are left out, so keys written before they existed stay valid."""
        payload: dict[str, Any] = {"v": CACHE_VERSION, "model": self.cfg.model, "messages": messages, "params": params}
        if self.base_url:
            payload["base_url"] = self.base_url
        if tools:
            payload["tools"] = tools
        if sample:
            payload["sample"] = sample
        return payload

    def cache_key(
        self, messages: list[dict[str, Any]], params: dict[str, Any], tools: list[dict] | None = None, sample: int = 0
    ) -> str:
        return request_key(self.request(messages, params, tools, sample))

    def discredit(self, key: str | None) -> None:
        """The reply under `key` wrote a query the store stopped at a bound: a live run asks again
        rather than paying the bound each time; a replay still reproduces the run. A replay leaves
        the record as it is."""
        if key and self.cfg.cache_mode != "replay":
            self.cache.mark(key, STOPPED)

    def cost(self, prompt: int, completion: int) -> float:
        return (prompt * self.cfg.price_input_per_mtok + completion * self.cfg.price_output_per_mtok) / 1e6

    def complete(
        self, messages: list[dict[str, str]], *, json_mode: bool = False, accept: Callable[[str], Any] | None = None
    ) -> Reply:
        """One chat completion (text out); `accept(text)` raising means 'do not cache this reply'."""
        return self.chat(messages, response_format={"type": "json_object"} if json_mode else None, accept=accept)

    def chat(
        self,
        messages: list[dict[str, Any]],
        *,
        tools: list[dict] | None = None,
        tool_choice: Any = None,
        response_format: dict | None = None,
        sample: int = 0,
        max_tokens: int | None = None,
        temperature: float | None = None,
        accept: Callable[[str], Any] | None = None,
    ) -> Reply:
        """`temperature` overrides the configured one for this call (a method that samples n
        agents needs > 0 even where the endpoint's default is greedy)."""
        params: dict[str, Any] = {
            "temperature": self.cfg.temperature if temperature is None else temperature,
            "max_tokens": max_tokens or self.cfg.max_tokens,
        }
        if response_format:
            params["response_format"] = response_format
        if tools and tool_choice is not None:
            params["tool_choice"] = tool_choice
        request = self.request(messages, params, tools, sample)
        key = request_key(request)
        return self._once(
            key,
            lambda: self._fetch(key, request, messages, params, tools, sample, accept),
            f"no recorded reply for this request to {self.cfg.model} (key {key[:12]}); "
            "import the run's replies (`sagegraph llm import`) or set llm.cache_mode: live",
        )

    def local(
        self, messages: list[dict[str, Any]], params: dict[str, Any], run: Callable[[], tuple[str, int, int]]
    ) -> Reply:
        """A computation by a model in this process (GraphRAFT's candidate scoring), cached and
        counted like a call: `run()` gives (text, prompt tokens, completion tokens); `params` must
        name what makes the result (the model file, the candidates)."""
        request = self.request(messages, {"local": params})
        key = request_key(request)

        def make() -> Reply:
            t0 = time.perf_counter()
            text, prompt, completion = run()
            reply = Reply(
                text=text,
                prompt_tokens=prompt,
                completion_tokens=completion,
                cached=False,
                seconds=time.perf_counter() - t0,
                key=key,
            )
            self._count(reply, 0.0)
            self.cache.put(key, reply, request)
            return reply

        return self._once(
            key, make, f"no recorded local result for this request (key {key[:12]}); set llm.cache_mode: live"
        )

    def _once(self, key: str, make: Callable[[], Reply], missing: str) -> Reply:
        """The reply under `key`: recorded, else made by `make` (which caches it), unless replaying."""
        hit = self._cached(key)
        if hit is not None:
            return hit
        if self.cfg.cache_mode == "replay":
            raise ReplayMiss(f"replay mode: {missing}")
        # Another thread or process (a sweep's Dask workers) may be asking the same thing right now:
        # the first pays, the others wait for its reply instead of paying again.
        with self.cache.inflight(key):
            hit = self._cached(key)
            return hit if hit is not None else make()

    def _count(self, reply: Reply, cost: float, retries: int = 0) -> None:
        """A paid reply into the client's usage and the current question's."""
        for u in (self.usage, *_SCOPE.get()):
            u.add(
                reply.prompt_tokens,
                reply.completion_tokens,
                cost,
                cached=False,
                seconds=reply.seconds,
                retries=retries,
                finish=reply.finish_reason,
            )

    def _cached(self, key: str) -> Reply | None:
        """The recorded reply, marked as it came. A reply cut at the token limit is served again as
        cut, to a live run too: the key holds the token limit and the seed, so a re-ask is the same
        request paid twice, and one that came back different would leave the run that recorded the
        cut reply unreplayable and split runs that share a trajectory (`llm.reask_cut` asks again).
        An empty reply or a refusal says more about the endpoint than the request: a live run asks
        again; a replay reproduces it (a refusal is raised again)."""
        hit = self.cache.get(key)
        if hit is not None and self.cfg.cache_mode != "replay" and self._ask_again(hit):
            return None
        if hit is not None and hit.finish_reason == REFUSED:
            # Not counted, as the live refusal was not: a replay's usage equals the run's.
            raise LLMRequestRefused(hit.text, key=key)
        if hit is not None:
            for u in (self.usage, *_SCOPE.get()):
                u.add(
                    hit.prompt_tokens,
                    hit.completion_tokens,
                    0.0,
                    cached=True,
                    seconds=hit.seconds,
                    finish=hit.finish_reason,
                    imported=hit.imported,
                )
        return hit

    def _ask_again(self, hit: Reply) -> bool:
        if hit.whole:
            return False
        return hit.finish_reason in (EMPTY, REFUSED, STOPPED) or self.cfg.reask_cut

    def _fetch(
        self,
        key: str,
        request: dict[str, Any],
        messages: list[dict[str, Any]],
        params: dict[str, Any],
        tools: list[dict] | None,
        sample: int,
        accept: Callable[[str], Any] | None,
    ) -> Reply:
        params = (
            {**params, "tools": tools} if tools else dict(params)
        )  # `request` holds the caller's: never changed here
        if sample and params.get("temperature", 0) > 0 and self.cfg.send_seed:
            params["seed"] = sample
        try:
            reply, retries = self._call(messages, params)
        except LLMRequestRefused as exc:
            self.cache.put(
                key,
                Reply(
                    text=str(exc), prompt_tokens=0, completion_tokens=0, cached=False, key=key, finish_reason=REFUSED
                ),
                request,
            )
            exc.key = key
            raise
        reply.key = key
        self._count(reply, self.cost(reply.prompt_tokens, reply.completion_tokens), retries)
        if not reply.whole:
            # Cut off or empty: handed to the caller, whose parsing falls back (counted there and
            # in usage.truncated / usage.malformed). Recorded with its finish_reason so a rerun
            # reproduces it (`_cached` says when a live run asks again).
            log.warning("%s reply not whole (finish_reason %r); recorded as such", self.cfg.model, reply.finish_reason)
            self.cache.put(key, reply, request)
            return reply
        if accept is not None:
            try:
                accept(reply.text)  # raises on a bad reply: nothing is cached, the caller decides
            except Exception as exc:
                raise ReplyRejected(f"unusable reply from {self.cfg.model}: {exc}") from exc
        self.cache.put(key, reply, request)
        return reply

    def _call(self, messages: list[dict[str, Any]], params: dict[str, Any]) -> tuple[Reply, int]:
        delay = 1.0
        pacer = _Pacer.of(self.cfg)
        for attempt in range(self.cfg.max_retries + 1):
            pacer.wait_turn(estimate_tokens(json.dumps(messages)), self._sleep)
            t0 = time.perf_counter()
            failure: LLMError | None = None
            try:
                with pacer.slots:
                    resp = self.client.chat.completions.create(model=self.cfg.model, messages=messages, **params)
            except LLMUnavailable:
                raise
            except Exception as exc:  # openai's exception classes, matched by name to keep imports lazy
                name = type(exc).__name__
                log.debug("LLM request failed", exc_info=True)
                if name in _REFUSED:
                    failure = LLMRequestRefused(f"{self.cfg.model} refused the request ({name}): {exc}")
                elif name not in _RETRYABLE or attempt == self.cfg.max_retries:
                    where = self.base_url or "the OpenAI API"
                    failure = LLMUnavailable(f"LLM endpoint {where} failed ({name}) after {attempt} retries: {exc}")
                else:
                    headers = getattr(getattr(exc, "response", None), "headers", None) or {}
                    wait = retry_wait(headers.get("retry-after"), delay)
                    log.warning("LLM %s, retry %d/%d in %.1fs", name, attempt + 1, self.cfg.max_retries, wait)
                    self._sleep(wait)
                    delay *= 2
                    continue
            if failure is None:
                try:
                    return read_completion(resp, messages, time.perf_counter() - t0), attempt
                except NotACompletion as exc:
                    # A proxy's error page with status 200, a body of another API: the endpoint
                    # is at fault, not the model. Retried, then the run stops with one line.
                    if attempt == self.cfg.max_retries:
                        failure = LLMUnavailable(
                            f"LLM endpoint {self.base_url or 'the OpenAI API'} answered {attempt + 1} times "
                            "with something "
                            f"that is not a chat completion: {exc}"
                        )
                    else:
                        log.warning(
                            "LLM endpoint answered with no chat completion (%s), retry %d/%d",
                            exc,
                            attempt + 1,
                            self.cfg.max_retries,
                        )
                        self._sleep(retry_wait(None, delay))
                        delay *= 2
                        continue
            # Raised outside the handler, so the openai exception does not ride along as its
            # context: a sweep's Dask worker sends this error back to the flow's process, where
            # openai's exceptions cannot be unpickled (their __init__ takes keywords only) and the
            # one clear line would become a TypeError.
            raise failure
        raise LLMError("unreachable")


MAX_RETRY_WAIT_S = 60.0


def retry_wait(header: str | None, delay: float) -> float:
    """Seconds to wait before a retry: the server's Retry-After when it is a sane number of
    seconds (negative, non-finite or unparseable ones are ignored), capped at a minute, else the
    backoff delay; with 10% jitter."""
    wait = delay
    if header:
        try:
            asked = float(header)
        except (TypeError, ValueError):
            asked = float("nan")
        if asked == asked and 0.0 <= asked < float("inf"):
            wait = asked
    return min(MAX_RETRY_WAIT_S, max(0.0, wait)) * (1 + 0.1 * random.random())


class NotACompletion(Exception):
    """The body is not a chat completion at all (HTML, a string, another API's JSON)."""


def read_completion(resp: Any, messages: list[dict[str, Any]], seconds: float) -> Reply:
    """A Reply from the SDK's response object. No choice or no message is the model's fault (a
    Reply with finish_reason 'empty': the caller falls back, nothing is cached); a body that is
    not a completion at all is the endpoint's (NotACompletion)."""
    choices = getattr(resp, "choices", None)
    if not isinstance(choices, list):
        shown = resp if isinstance(resp, (str, bytes)) else type(resp).__name__
        raise NotACompletion(repr(shown)[:120])
    usage = getattr(resp, "usage", None)
    msg = getattr(choices[0], "message", None) if choices else None
    if msg is None:
        return Reply(
            text="",
            prompt_tokens=getattr(usage, "prompt_tokens", None) or estimate_tokens(json.dumps(messages)),
            completion_tokens=getattr(usage, "completion_tokens", None) or 0,
            cached=False,
            seconds=seconds,
            finish_reason=EMPTY,
        )
    text = getattr(msg, "content", None) or ""
    calls = []
    for c in getattr(msg, "tool_calls", None) or []:
        fn = getattr(c, "function", None)
        if fn is not None and getattr(fn, "name", None):
            calls.append(
                {
                    "id": getattr(c, "id", None) or "",
                    "name": fn.name,
                    "arguments": getattr(fn, "arguments", None) or "{}",
                }
            )
    return Reply(
        text=text if isinstance(text, str) else str(text),
        prompt_tokens=getattr(usage, "prompt_tokens", None) or estimate_tokens(json.dumps(messages)),
        completion_tokens=getattr(usage, "completion_tokens", None) or estimate_tokens(str(text) + json.dumps(calls)),
        cached=False,
        tool_calls=calls,
        seconds=seconds,
        finish_reason=getattr(choices[0], "finish_reason", "stop"),
    )


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
