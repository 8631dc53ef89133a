"""Parse human durations such as `24h`, `5m`, `90s`, `1d12h`, `2w` into pandas Timedeltas."""
from __future__ import annotations

import re

import pandas as pd

from predictor.errors import InputError

_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}
_PART = re.compile(r"(\d+(?:\.\d+)?)([smhdw])")


# No duration Tidewise takes is below a second (the finest Prometheus resolution) or above ten
# years (the longest history anyone keeps; pandas Timedeltas overflow at 292 years).
MIN_SECONDS = 1
MAX_SECONDS = 10 * 365 * 86400


def parse_duration(text: str, *, what: str = "duration") -> pd.Timedelta:
    """`24h` -> 1 day. Accepts concatenations (`1h30m`); rejects zero, negatives, unknown units and
    anything outside 1 s .. 10 years (InputError naming `what`)."""
    s = str(text).strip().lower()
    if s.startswith("-"):
        raise InputError(f"{what} {text!r} is negative; it must be longer than zero (for example 5m or 24h)")
    parts = _PART.findall(s)
    if not s or not parts or "".join(f"{n}{u}" for n, u in parts) != s:
        raise InputError(
            f"{what} {text!r} does not parse: use a number and a unit s, m, h, d or w (for example 5m, 24h, 7d)"
        )
    seconds = sum(float(n) * _UNITS[u] for n, u in parts)
    if seconds <= 0:
        raise InputError(f"{what} {text!r} must be longer than zero")
    if seconds < MIN_SECONDS:
        raise InputError(f"{what} {text!r} is shorter than 1 second; give at least 1s")
    if not seconds <= MAX_SECONDS:  # also catches inf from a huge number
        raise InputError(f"{what} {text!r} is longer than 10 years; give a shorter duration")
    return pd.Timedelta(seconds=seconds)


def format_duration(td: pd.Timedelta) -> str:
    """The shortest exact form: 300 s -> `5m`, 86400 s -> `1d`."""
    seconds = int(td.total_seconds())
    for unit, size in (("w", 7 * 86400), ("d", 86400), ("h", 3600), ("m", 60)):
        if seconds % size == 0:
            return f"{seconds // size}{unit}"
    return f"{seconds}s"
