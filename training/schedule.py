"""`tidewise train --every`: train again on a fixed period, keeping the last good version on failure.

The period counts from the start of one run to the start of the next (a run that takes 2 h of a
24 h period waits 22 h). A run that fails with a Tidewise error (bad data, a source down, a refused
registry) is logged and retried next period: the registry still serves the last good version.
Any other exception is a bug and ends the schedule.
"""
from __future__ import annotations

import logging
import time
from typing import Callable

from contracts.errors import TidewiseError

log = logging.getLogger(__name__)


def run_every(period_seconds: float, job: Callable[[], object], *, say: Callable[[str], None],
              sleep: Callable[[float], None] = time.sleep, clock: Callable[[], float] = time.monotonic,
              runs: int | None = None) -> None:
    """Call `job` every `period_seconds`, forever (or `runs` times); `say` gets the one-line
    progress messages meant for a person (the CLI prints them)."""
    done = 0
    while runs is None or done < runs:
        started = clock()
        try:
            job()
        except TidewiseError as exc:  # a failed run keeps the last good version; try again next time
            log.error("training run failed: %s", exc)
            say(f"tidewise train: run failed: {exc}; the registry keeps its last good version")
        done += 1
        wait = max(0.0, period_seconds - (clock() - started))
        say(f"next training run in {wait / 3600:.1f} h")
        sleep(wait)
