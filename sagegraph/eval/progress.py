"""How far a run is and when it should end, for the log.

An LLM agent takes minutes a question on a CPU server, so a sweep can sit on one configuration
for hours; without this its log says nothing between the configuration's start and its metrics.
The estimate uses only questions run in this process: resumed ones took no time here."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field


def duration(seconds: float) -> str:
    """A duration in the unit a person reads it in: 42 s, 7.5 min, 4.1 h."""
    if seconds < 90:
        return f"{seconds:.0f} s"
    if seconds < 90 * 60:
        return f"{seconds / 60:.1f} min"
    return f"{seconds / 3600:.1f} h"


@dataclass
class Progress:
    """Counts finished questions and says, at most every `every_s` seconds and always at the
    last one, how many are done and how long the rest should take at this run's pace."""

    label: str
    total: int  # scorable questions of the run, resumed ones included
    resumed: int = 0
    every_s: float = 30.0
    clock: Callable[[], float] = time.monotonic  # injectable for tests
    run: int = 0  # finished in this process
    _t0: float = field(init=False)
    _last: float = field(init=False)

    def __post_init__(self) -> None:
        self._t0 = self._last = self.clock()

    def start_line(self) -> str | None:
        """What the run is about to do, when it resumes or has questions to run."""
        todo = self.total - self.resumed
        if todo <= 0:
            return None
        resumed = f" ({self.resumed} done before, resumed)" if self.resumed else ""
        return f"{self.label}: {todo} of {self.total} questions to run{resumed}"

    def tick(self) -> str | None:
        """One more question finished; the progress line when one is due, else None."""
        self.run += 1
        now = self.clock()
        done = self.resumed + self.run
        if done < self.total and now - self._last < self.every_s:
            return None
        self._last = now
        pace = (now - self._t0) / self.run
        line = f"{self.label}: {done}/{self.total} questions, {duration(pace)} a question"
        left = self.total - done
        return line + (f", about {duration(pace * left)} left" if left > 0 else ", done")
