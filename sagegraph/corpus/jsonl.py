"""Line-by-line JSONL reading that reports the exact line of every problem."""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from sagegraph.errors import InputError

OnError = Literal["raise", "skip"]
OnDuplicate = Literal["error", "last"]
INT64 = (-(2**63), 2**63 - 1)
# Cheap byte patterns of a line that may hold a value no store keeps: a non-finite number, a long
# integer, an escaped NUL or UTF-16 surrogate (JSON can spell a lone one, which no UTF-8 text holds).
_SUSPECT = re.compile(rb"NaN|Infinity|\d{19,}|\\u0000|\\u[dD][89a-fA-F]")


@dataclass
class ErrorPolicy:
    """Raise on the first bad record, or skip it and count why (the build reports the counts).
    A second record under an id already read is an error naming both lines (`on_duplicate:
    error`, which `on_error: skip` turns into skipping the later one, counted under its id
    field), or replaces the first (`last`, counted as `duplicate`)."""

    on_error: OnError = "raise"
    on_duplicate: OnDuplicate = "error"
    skipped: dict[str, int] = field(default_factory=dict)
    examples: list[str] = field(default_factory=list)

    def handle(self, err: InputError) -> None:
        if self.on_error == "raise":
            raise err
        key = err.field or "record"
        self.skipped[key] = self.skipped.get(key, 0) + 1
        if len(self.examples) < 20:
            self.examples.append(str(err))


def read_jsonl(path: Path, policy: ErrorPolicy) -> Iterator[tuple[int, dict[str, Any]]]:
    """Yield (line_number, object); undecodable or malformed lines go through the policy."""
    if not path.exists():
        raise InputError(path, None, None, "file not found")
    if not path.is_file():
        raise InputError(path, None, None, "is a folder (or another non-file), not a JSONL file")
    with path.open("rb") as fh:
        for lineno, raw in enumerate(fh, start=1):
            if not raw.strip():
                continue
            try:
                line = raw.decode("utf-8")
            except UnicodeDecodeError as exc:
                policy.handle(InputError(path, lineno, None, f"not valid UTF-8 (byte {exc.start})"))
                continue
            try:
                obj = json.loads(line, parse_constant=_NonFinite)
            except json.JSONDecodeError as exc:
                policy.handle(InputError(path, lineno, None, f"malformed JSON: {exc.msg} at column {exc.colno}"))
                continue
            if not isinstance(obj, dict):
                policy.handle(InputError(path, lineno, None, "expected a JSON object"))
                continue
            if _SUSPECT.search(raw) and (bad := unstorable_value(obj)) is not None:
                policy.handle(InputError(path, lineno, bad[0], bad[1]))
                continue
            yield lineno, obj


class _NonFinite(str):
    """What json's NaN, Infinity and -Infinity parse to here, so the field holding one is found."""


def unstorable_value(obj: Any, where: str = "") -> tuple[str, str] | None:
    """(field path, why) of the first value no graph store keeps as written: NaN or an infinity
    (a FalkorDB load failed on one after every stage had run) or an integer beyond 64 bits (one
    was stored as 9223372036854775807)."""
    if isinstance(obj, _NonFinite):
        return where or "(value)", f"{obj} is not a finite number"
    if isinstance(obj, int) and not isinstance(obj, bool) and not INT64[0] <= obj <= INT64[1]:
        return where or "(value)", f"integer {obj} does not fit in 64 bits (write it as a string)"
    if isinstance(obj, str):
        return _bad_text(obj, where or "(value)")
    if isinstance(obj, dict):
        for k in obj:
            if (bad := _bad_text(str(k), f"{where}.{k}" if where else str(k))) is not None:
                return bad
        items: Iterable[tuple[str, Any]] = ((str(k), v) for k, v in obj.items())
    elif isinstance(obj, list):
        items = ((f"[{i}]", v) for i, v in enumerate(obj))
    else:
        return None
    for k, v in items:
        sub = f"{where}{k}" if str(k).startswith("[") else (f"{where}.{k}" if where else str(k))
        if (bad := unstorable_value(v, sub)) is not None:
            return bad
    return None


def _bad_text(text: str, where: str) -> tuple[str, str] | None:
    """A NUL character (the store's strings end at one) or a lone surrogate (not Unicode text)."""
    if "\x00" in text:
        return where, "holds a NUL character (\\u0000)"
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        return where, f"holds a lone UTF-16 surrogate (U+{ord(text[exc.start]):04X}), not Unicode text"
    return None


def load_numbered[T](
    path: Path,
    parse: Callable[[dict[str, Any], Path, int], T],
    policy: ErrorPolicy,
    limit: int | None = None,
    key: Callable[[T], str] | None = None,
    key_field: str = "id",
) -> list[tuple[int, T]]:
    """(line, record) for every record `parse` accepts; with `key`, at most one record per key."""
    out: list[tuple[int, T]] = []
    first: dict[str, int] = {}  # key -> index in out
    for lineno, obj in read_jsonl(path, policy):
        try:
            rec = parse(obj, path, lineno)
        except InputError as err:
            policy.handle(err)
            continue
        if key is not None:
            k = key(rec)
            if k in first:
                if policy.on_duplicate == "last":
                    policy.skipped["duplicate"] = policy.skipped.get("duplicate", 0) + 1
                    out[first[k]] = (lineno, rec)
                else:
                    policy.handle(
                        InputError(
                            path, lineno, key_field, f"duplicate {key_field} {k!r}: line {out[first[k]][0]} has it too"
                        )
                    )
                continue
            first[k] = len(out)
        out.append((lineno, rec))
        if limit is not None and len(out) >= limit:
            break
    return out


def load_records[T](
    path: Path,
    parse: Callable[[dict[str, Any], Path, int], T],
    policy: ErrorPolicy,
    limit: int | None = None,
    key: Callable[[T], str] | None = None,
    key_field: str = "id",
) -> list[T]:
    return [rec for _, rec in load_numbered(path, parse, policy, limit, key, key_field)]


def require(
    obj: dict[str, Any], key: str, kind: type | tuple[type, ...], path: Path, lineno: int, *, nonempty: bool = True
) -> Any:
    """Fetch a required field, naming file, line and field when it is missing, mistyped or empty."""
    if key not in obj or obj[key] is None:
        raise InputError(path, lineno, key, "missing")
    value = obj[key]
    if not isinstance(value, kind):
        raise InputError(path, lineno, key, f"expected {getattr(kind, '__name__', kind)}, got {type(value).__name__}")
    if nonempty and isinstance(value, (str, list, dict)) and not (value.strip() if isinstance(value, str) else value):
        raise InputError(path, lineno, key, "empty")
    return value
