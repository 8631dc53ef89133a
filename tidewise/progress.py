"""Progress on stderr: a rich bar on a terminal; elsewhere (a pipe, a CI log, `kubectl logs`) plain
lines, rate-limited: the start, a line each time another tenth of the work is done or LINE_EVERY
seconds have passed since the last line, and the end with the time taken. A long step inside one item
(a model refit) says so with `advance.note(text)`: a line of its own, or the bar's description."""
from __future__ import annotations

import contextlib
import sys
import time
from typing import Any, Callable, Iterator

LINE_EVERY = 10.0  # seconds: a 9-minute replay of 24 series writes ~30 lines, not 24 bars' worth nor none
TENTHS = 10  # a line whenever another 1/TENTHS of the total is done (deterministic, whatever the speed)


class Advance:
    """`advance(n)` counts n items done; `advance.note(text)` tells of a long step inside one."""

    def __init__(self, description: str, total: int, clock: Callable[[], float] = time.monotonic) -> None:
        self.description, self.total, self.done = description, total, 0
        self._clock = clock
        self._start = self._last = clock()
        self._next_tenth = 1

    def __call__(self, n: int = 1) -> None:
        self.done += n
        now = self._clock()
        # a line per tenth of the total; past it (an underestimated total) by time alone
        tenth = 0 < self.done <= self.total and self.done * TENTHS >= self._next_tenth * self.total
        if tenth or now - self._last >= LINE_EVERY:
            self._line(f"{self.done}/{self.total}")
            while self.total and self._next_tenth * self.total <= self.done * TENTHS:
                self._next_tenth += 1

    def note(self, text: str) -> None:
        self._line(f"{self.done}/{self.total}, {text}")

    def elapsed(self) -> float:
        return self._clock() - self._start

    def _line(self, what: str) -> None:
        self._last = self._clock()
        print(f"{self.description}: {what} ({self.elapsed():.0f} s)", file=sys.stderr, flush=True)


class _BarAdvance(Advance):
    """The same calls driving a rich bar: a note becomes the bar's description until the next item."""

    def __init__(self, description: str, total: int, bar: Any, task: Any) -> None:
        super().__init__(description, total)
        self._bar, self._task = bar, task

    def __call__(self, n: int = 1) -> None:
        self.done += n
        self._bar.update(self._task, advance=n, description=self.description)

    def note(self, text: str) -> None:
        self._bar.update(self._task, description=f"{self.description} ({text})")


@contextlib.contextmanager
def progress(description: str, total: int, enabled: bool | None = None, announce: bool = True) -> Iterator[Advance]:
    """Yield `advance(n)` (with `.note(text)`); a rich bar on a terminal, rate-limited lines otherwise.
    `announce=False` leaves out the plain start line, so that work failing at its first item (a server
    that cannot be reached) still ends in one line of error."""
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    console = Console(stderr=True)
    show = console.is_terminal if enabled is None else enabled
    if not show:
        if announce:
            print(f"{description}: {total} ...", file=sys.stderr, flush=True)
        lines = Advance(description, total)
        yield lines
        print(f"{description}: done in {lines.elapsed():.0f} s", file=sys.stderr, flush=True)
        return
    with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                  console=console, transient=False) as bar:
        yield _BarAdvance(description, total, bar, bar.add_task(description, total=total))


def run_loop_once(loop: Any, description: str) -> Any:
    """`loop.run_once()` of the serving loop with a progress line (or a bar) per step: a one-shot
    command (`serve --once`, `rebalance`) on a large cluster runs for minutes."""
    with progress(description, len(loop.steps())) as advance:
        return loop.run_once(on_step=lambda timing: advance(1))
