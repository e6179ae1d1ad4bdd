"""How far a long step is and when it should end, for the log: a sweep's questions (an LLM agent
takes minutes a question on a CPU server, so a sweep can sit on one configuration for hours) and a
build batch's encoding (minutes of windows on 2 cores). Without it a log says nothing between a
step's start and its end. The estimate uses only items done in this process: resumed ones took no
time here.

At a terminal the lines are live: each rewrites the one before it, at most every second, and the
last one (", done") stays. In a log file or CI output they are lines every `every_s` seconds."""

from __future__ import annotations

import os
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

QUIET = "SAGEGRAPH_QUIET"  # set by the CLI unless -v; Dask workers inherit it
LIVE_EVERY_S = 1.0


def quiet() -> bool:
    """Whether Prefect's console is quiet, so that a run writes its own lines (the CLI, unless -v)."""
    return os.environ.get(QUIET) == "1"


def live_terminal() -> bool:
    """Whether progress lines may rewrite each other: a person's terminal, Prefect's console quiet."""
    return quiet() and sys.stderr.isatty()


class Line(str):
    """A progress line; `final` when its step is complete (the line to keep on a live terminal)."""

    final: bool = False


CLEAR_LINE = "\r\x1b[K"


def write(text: str) -> None:
    """To stderr; at a live terminal every line first clears the live line it may be written over."""
    sys.stderr.write((CLEAR_LINE if live_terminal() else "") + text)
    sys.stderr.flush()


def show(line: str) -> None:
    """A progress line for the person at the terminal: live there (rewritten by the next one, kept
    when final), a plain line elsewhere."""
    final = not live_terminal() or (isinstance(line, Line) and line.final)
    write(line + ("\n" if final else ""))


def duration(seconds: float) -> str:
    """A duration in the unit a person reads it in: 42 s, 7.5 min, 4.1 h."""
    if seconds < 90:
        return f"{seconds:.0f} s"
    if seconds < 90 * 60:
        return f"{seconds / 60:.1f} min"
    return f"{seconds / 3600:.1f} h"


@dataclass
class Progress:
    """Counts finished items and says, at most every `every_s` seconds and always at the last
    one, how many are done and how long the rest should take at this run's pace."""

    label: str
    total: int  # items of the step, resumed ones included
    resumed: int = 0
    every_s: float = 30.0
    unit: str = "questions"
    clock: Callable[[], float] = time.monotonic  # injectable for tests
    run: int = 0  # finished in this process
    _t0: float = field(init=False)
    _last: float = field(init=False)

    def __post_init__(self) -> None:
        self._t0 = self._last = self.clock()
        if live_terminal():
            self.every_s = min(self.every_s, LIVE_EVERY_S)

    def start_line(self) -> str | None:
        """What the run is about to do, when it resumes or has questions to run."""
        todo = self.total - self.resumed
        if todo <= 0:
            return None
        resumed = f" ({self.resumed} done before, resumed)" if self.resumed else ""
        return f"{self.label}: {todo} of {self.total} {self.unit} to run{resumed}"

    def tick(self, n: int = 1) -> Line | None:
        """`n` more items finished; the progress line when one is due, else None."""
        self.run += n
        now = self.clock()
        done = self.resumed + self.run
        if done < self.total and now - self._last < self.every_s:
            return None
        self._last = now
        pace = (now - self._t0) / self.run
        rate = f"{duration(pace)} each" if pace >= 1 else f"{1 / pace:,.0f} {self.unit}/s" if pace > 0 else "instant"
        line = f"{self.label}: {done:,}/{self.total:,} {self.unit}, {rate}"
        left = self.total - done
        result = Line(line + (f", about {duration(pace * left)} left" if left > 0 else ", done"))
        result.final = left <= 0
        return result


def ticker(
    label: str,
    total: int,
    unit: str,
    report: Callable[[str], None] | None,
    every_s: float = 10.0,
    clock: Callable[[], float] = time.monotonic,
) -> Callable[..., None] | None:
    """`tick(n)`: n more items done; hands `report` the progress line when one is due. Safe to call
    from worker threads (LLM replies come in on a pool). None when nothing is to be reported. A
    step over before its first line was due says nothing: a build's hundreds of quick batches
    would each leave a line, and the stage's own line says how far they are."""
    if report is None or total == 0:
        return None
    progress, lock = Progress(label, total=total, every_s=every_s, unit=unit, clock=clock), threading.Lock()
    shown = False

    def tick(n: int = 1) -> None:
        nonlocal shown
        with lock:
            line = progress.tick(n)
            if line is not None and line.final and not shown:
                return
            shown = shown or line is not None
        if line:
            report(line)

    return tick
