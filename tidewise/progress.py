"""Progress bars on stderr (rich), silent when stderr is not a terminal unless asked."""
from __future__ import annotations

import contextlib
import sys
from typing import Callable, Iterator


def _ignore(n: int = 1) -> None:
    """`advance` when no bar is shown."""


@contextlib.contextmanager
def progress(description: str, total: int, enabled: bool | None = None) -> Iterator[Callable[[int], None]]:
    """Yield `advance(n)`; shows a rich bar on a terminal, a start/end line otherwise."""
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    console = Console(stderr=True)
    show = console.is_terminal if enabled is None else enabled
    if not show:
        print(f"{description}: {total} ...", file=sys.stderr, flush=True)
        yield _ignore
        print(f"{description}: done", file=sys.stderr, flush=True)
        return
    with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                  console=console, transient=False) as bar:
        task = bar.add_task(description, total=total)

        def advance(n: int = 1) -> None:
            bar.advance(task, n)

        yield advance
