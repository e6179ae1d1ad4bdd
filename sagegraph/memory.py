"""Memory a finished stage freed, handed back to the operating system.

A stage over the whole graph (the corpus read, the store load, the statistics) frees its tables
when it returns, but the allocators keep the pages for the next allocation: Arrow's pool
(mimalloc or jemalloc) and glibc's heap. In a long-lived process (a Dask worker, the flow's
driver) those pages then count against the machine while other stages run beside it: at
STaRK-PRIME's size a worker that had loaded the store kept gigabytes it no longer used. Dask's
own advice for memory that is freed but not returned is glibc's `malloc_trim`; Arrow's pool has
`release_unused`.
"""

from __future__ import annotations

import contextlib
import ctypes
import functools
from collections.abc import Callable


def release_unused() -> None:
    """Returns the free pages of Arrow's memory pool and of glibc's heap to the system (a no-op
    where the C library is not glibc)."""
    import pyarrow as pa

    pa.default_memory_pool().release_unused()
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL("libc.so.6").malloc_trim(0)


def releasing[**Params, Result](stage: Callable[Params, Result]) -> Callable[Params, Result]:
    """`stage`, followed by `release_unused` however it ends."""

    @functools.wraps(stage)
    def wrapper(*args: Params.args, **kwargs: Params.kwargs) -> Result:
        try:
            return stage(*args, **kwargs)
        finally:
            release_unused()

    return wrapper
