"""What a run tells the person at its terminal. By default: one live progress line per step (at a
terminal; periodic lines in a log), the result lines of each stage and configuration, sagegraph's
warnings, and none of Prefect's task logs, which still reach the Prefect UI (and its API's log
store); with `-v` Prefect's console logs are shown instead. Task code runs in Dask workers, whose
stderr is the terminal's, so a line is written by whichever process makes it: a live line from
one worker may replace another's, and is redrawn at its next tick."""

from __future__ import annotations

import logging
import sys
from typing import Any

from prefect import get_run_logger

from sagegraph.progress import live_terminal, quiet, show, write


class RunLog:
    """The run's Prefect logger, its lines echoed to the terminal when Prefect's console is quiet."""

    def info(self, msg: str, *args: Any) -> None:
        get_run_logger().info(msg, *args)
        if quiet():  # written, not printed: the flows log their prints (log_prints), which would swallow it
            write((msg % args if args else msg) + "\n")

    def progress(self, line: str) -> None:
        """A progress line: live at a terminal (rewritten by the next one, kept when `final`)."""
        if not live_terminal():
            self.info("%s", line)
            return
        get_run_logger().debug("%s", line)
        show(line)


def run_log() -> RunLog:
    _show_warnings()
    return RunLog()


_shown = False


def _show_warnings() -> None:
    """Quiet, Prefect's console handler shows nothing: sagegraph's own warnings (a question that
    failed, a lock taken over) get a handler of their own, once per process, where no handler of
    the root logger shows them already (the CLI's own process has one)."""
    global _shown
    if _shown or not quiet():
        return
    _shown = True
    if any(handler.level <= logging.WARNING for handler in logging.getLogger().handlers):
        return
    handler = logging.StreamHandler(sys.stderr)
    handler.setLevel(logging.WARNING)
    handler.setFormatter(logging.Formatter("sagegraph: %(message)s"))
    logging.getLogger("sagegraph").addHandler(handler)
