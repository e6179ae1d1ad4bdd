"""Source batches cut by content, not by position, so a changed corpus reuses the chunks, metadata
and vectors of every batch it did not touch.

Batches cut every N sources shift when one source is inserted near the start: every batch after it
holds other sources, and every one is chunked, described and embedded again. Here a batch ends
after a source whose fingerprint hashes to 0 modulo the target size (content-defined chunking, as
rsync and restic cut files, applied to the list of sources), and a batch is named by the hash of
its members: an added, edited or removed source changes its own batch and at most the next one,
and every other batch keeps its name, so its finished outputs are found again. The cut is a pure
function of the corpus, so a rebuild gives the batches a build from nothing would.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence

# A small corpus is cut into at least this many batches, so a build fans out over a few workers;
# the cut depends on the corpus alone, never on how many workers run it (a stage's outputs, and so
# its name, stay the same when `--workers` changes).
MIN_BATCHES = 4


def target_size(n: int, size: int) -> int:
    """The mean batch length: `size`, smaller for a small corpus so that it makes `MIN_BATCHES`
    batches or more, rounded down to a power of two so that a corpus growing or shrinking a little
    keeps the same target (and so the same cuts)."""
    t = max(1, min(size, -(-n // MIN_BATCHES)))
    return 1 << (t.bit_length() - 1)


def _hash(key: str) -> int:
    return int.from_bytes(hashlib.blake2b(key.encode("utf-8"), digest_size=8).digest(), "big")


def content_spans(keys: Sequence[str], target: int) -> list[tuple[int, int]]:
    """(start, end) of each batch over `keys` (one per source: its id and content fingerprint), in
    order: a batch ends after a key that hashes to 0 modulo `target`, or at 2 x target sources."""
    spans: list[tuple[int, int]] = []
    start = 0
    for i, key in enumerate(keys):
        if i + 1 - start >= 2 * target or _hash(key) % target == 0:
            spans.append((start, i + 1))
            start = i + 1
    if start < len(keys):
        spans.append((start, len(keys)))
    return spans


def batch_name(keys: Sequence[str]) -> str:
    """A batch's name from its members: the same sources, the same name, in any build."""
    h = hashlib.blake2b(digest_size=8)
    for key in keys:
        h.update(key.encode("utf-8"))
        h.update(b"\n")
    return f"src-{h.hexdigest()}"
