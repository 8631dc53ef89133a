"""The settings sweep every study runs: each policy setting simulated on the same seeded cluster,
under one progress stage, and the checks of the settings every study shares."""
from __future__ import annotations

import contextlib
from typing import Callable, ContextManager, Sequence, TypeVar

from contracts.errors import InputError

# `progress(description, total)` (e.g. `tidewise.progress.progress`) yields an `advance(n)` per stage
ProgressFactory = Callable[[str, int], ContextManager[Callable[[int], None]]]
Advance = Callable[[int], None]
MAX_DAYS = 14  # each trace needs 5 history days before its evaluation days

P = TypeVar("P")
R = TypeVar("R")


def stage(progress: ProgressFactory | None, description: str, total: int) -> ContextManager:
    """One stage of a study's progress (a context yielding `advance(n)`, or None without progress)."""
    return progress(description, total) if progress is not None else contextlib.nullcontext(None)


def check_days(days: int) -> None:
    if not 1 <= days <= MAX_DAYS:
        raise InputError(f"--days {days}: between 1 and {MAX_DAYS} (each trace needs 5 history days before them)")


def sweep(settings: Sequence[P], days: int, run: Callable[[P, Advance | None], R],
          progress: ProgressFactory | None = None) -> list[R]:
    """`run(setting, advance)` for every setting in order (`advance(1)` per simulated day), under one
    stage "simulating N policy settings x D days"."""
    with stage(progress, f"simulating {len(settings)} policy settings x {days} days", len(settings) * days) as adv:
        return [run(p, adv) for p in settings]
