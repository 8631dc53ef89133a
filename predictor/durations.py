"""Parse human durations such as `24h`, `5m`, `90s`, `1d12h`, `2w` into pandas Timedeltas."""
from __future__ import annotations

import functools
import re

import pandas as pd

from predictor.errors import InputError

_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}
_PART = re.compile(r"(\d+(?:\.\d+)?)([smhdw])")

# The calendar spans every module counts in, defined once. Built from keywords, not "1d": pandas 3
# warns that the lowercase "d" alias will go (Pandas4Warning).
HOUR = pd.Timedelta(hours=1)
DAY = pd.Timedelta(days=1)
WEEK = pd.Timedelta(days=7)


# No duration Tidewise takes is below a second (the finest Prometheus resolution) or above ten
# years (the longest history anyone keeps; pandas Timedeltas overflow at 292 years).
MIN_SECONDS = 1
MAX_SECONDS = 10 * 365 * 86400


def parse_duration(text: str, *, what: str = "duration") -> pd.Timedelta:
    """`24h` -> 1 day. Accepts concatenations (`1h30m`); rejects zero, negatives, unknown units and
    anything outside 1 s .. 10 years (InputError naming `what`)."""
    return _parse_duration(str(text), what)


@functools.lru_cache(maxsize=1024)  # settings are parsed per object per run: ~10 calls per workload
def _parse_duration(text: str, what: str) -> pd.Timedelta:
    s = text.strip().lower()
    if s.startswith("-"):
        raise InputError(f"{what} {text!r} is negative; it must be longer than zero (for example 5m or 24h)")
    seconds = _grammar_seconds(s)
    if seconds is None:
        raise InputError(
            f"{what} {text!r} does not parse: use a number and a unit s, m, h, d or w (for example 5m, 24h, 7d)"
        )
    if seconds <= 0:
        raise InputError(f"{what} {text!r} must be longer than zero")
    if seconds < MIN_SECONDS:
        raise InputError(f"{what} {text!r} is shorter than 1 second; give at least 1s")
    if not seconds <= MAX_SECONDS:  # also catches inf from a huge number
        raise InputError(f"{what} {text!r} is longer than 10 years; give a shorter duration")
    return pd.Timedelta(seconds=seconds)


def _grammar_seconds(text: str) -> float | None:
    """Seconds of a duration in Tidewise's grammar (`7d`, `1h30m`), None when it is not in it."""
    parts = _PART.findall(text)
    if not text or not parts or "".join(f"{n}{u}" for n, u in parts) != text:
        return None
    return sum(float(n) * _UNITS[u] for n, u in parts)


def to_timedelta(value: str | pd.Timedelta) -> pd.Timedelta:
    """A duration written in code or stored in settings and model parameters (`"7d"`, `"24h"`,
    `"15min"`, a Timedelta) as a Timedelta, without pandas' deprecated lowercase "d": text in
    Tidewise's grammar is read here, any other pandas spelling by pandas. Unlike `parse_duration`
    it sets no limits: its input is the program's own, not the user's."""
    if isinstance(value, pd.Timedelta):
        return value
    seconds = _grammar_seconds(str(value).strip().lower())
    return pd.Timedelta(value) if seconds is None else pd.Timedelta(seconds=seconds)


def format_duration(td: pd.Timedelta) -> str:
    """The shortest exact form: 300 s -> `5m`, 86400 s -> `1d`."""
    seconds = int(td.total_seconds())
    for unit, size in (("w", 7 * 86400), ("d", 86400), ("h", 3600), ("m", 60)):
        if seconds % size == 0:
            return f"{seconds // size}{unit}"
    return f"{seconds}s"
