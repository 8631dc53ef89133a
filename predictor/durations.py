"""Parse human durations such as `24h`, `5m`, `90s`, `1d12h`, `2w` into pandas Timedeltas.

The grammar and its limits are `contracts.durations` (standard library only, shared with the
scheduler extender); this module gives them pandas' shape and defines the calendar spans.
"""
from __future__ import annotations

import functools

import pandas as pd

from contracts.durations import duration_seconds, grammar_seconds

# The calendar spans every module counts in, defined once. Built from keywords, not "1d": pandas 3
# warns that the lowercase "d" alias will go (Pandas4Warning).
HOUR = pd.Timedelta(hours=1)
DAY = pd.Timedelta(days=1)
WEEK = pd.Timedelta(days=7)


def parse_duration(text: str, *, what: str = "duration") -> pd.Timedelta:
    """`24h` -> 1 day. Accepts concatenations (`1h30m`); rejects zero, negatives, unknown units and
    anything outside 1 s .. 10 years (InputError naming `what`)."""
    return _parse_duration(str(text), what)


@functools.lru_cache(maxsize=1024)  # settings are parsed per object per run: ~10 calls per workload
def _parse_duration(text: str, what: str) -> pd.Timedelta:
    return pd.Timedelta(seconds=duration_seconds(text, what=what))


def to_timedelta(value: str | pd.Timedelta) -> pd.Timedelta:
    """A duration written in code or stored in settings and model parameters (`"7d"`, `"24h"`,
    `"15min"`, a Timedelta) as a Timedelta, without pandas' deprecated lowercase "d": text in
    Tidewise's grammar is read here, any other pandas spelling by pandas. Unlike `parse_duration`
    it sets no limits: its input is the program's own, not the user's."""
    if isinstance(value, pd.Timedelta):
        return value
    seconds = grammar_seconds(str(value).strip().lower())
    return pd.Timedelta(value) if seconds is None else pd.Timedelta(seconds=seconds)


def format_duration(td: pd.Timedelta) -> str:
    """The shortest exact form: 300 s -> `5m`, 86400 s -> `1d`."""
    seconds = int(td.total_seconds())
    for unit, size in (("w", 7 * 86400), ("d", 86400), ("h", 3600), ("m", 60)):
        if seconds % size == 0:
            return f"{seconds // size}{unit}"
    return f"{seconds}s"
