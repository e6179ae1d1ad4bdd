"""Line-by-line JSONL reading that reports the exact line of every problem."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator, Literal

from sagegraph.errors import InputError

OnError = Literal["raise", "skip"]


@dataclass
class ErrorPolicy:
    """Raise on the first bad record, or skip it and count why (the build reports the counts)."""

    on_error: OnError = "raise"
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
                obj = json.loads(line)
            except json.JSONDecodeError as exc:
                policy.handle(InputError(path, lineno, None, f"malformed JSON: {exc.msg} at column {exc.colno}"))
                continue
            if not isinstance(obj, dict):
                policy.handle(InputError(path, lineno, None, "expected a JSON object"))
                continue
            yield lineno, obj


def require(obj: dict[str, Any], key: str, kind: type | tuple[type, ...], path: Path, lineno: int, *, nonempty: bool = True) -> Any:
    """Fetch a required field, naming file, line and field when it is missing, mistyped or empty."""
    if key not in obj or obj[key] is None:
        raise InputError(path, lineno, key, "missing")
    value = obj[key]
    if not isinstance(value, kind):
        raise InputError(path, lineno, key, f"expected {getattr(kind, '__name__', kind)}, got {type(value).__name__}")
    if nonempty and isinstance(value, (str, list, dict)) and not (value.strip() if isinstance(value, str) else value):
        raise InputError(path, lineno, key, "empty")
    return value
