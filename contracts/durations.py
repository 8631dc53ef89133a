"""Tidewise's duration grammar (`24h`, `5m`, `90s`, `1d12h`, `2w`) read as seconds, standard library only.

One reading for every process: `predictor.durations` wraps it in pandas Timedeltas for the serving
loop and training, and the scheduler extender (which loads no pandas) reads a pod's
`tidewise.io/expected-duration` with it directly.
"""
from __future__ import annotations

import re

from contracts.errors import InputError

UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}
_PART = re.compile(r"(\d+(?:\.\d+)?)([smhdw])")

# No duration Tidewise takes is below a second (the finest Prometheus resolution) or above ten
# years (the longest history anyone keeps; pandas Timedeltas overflow at 292 years).
MIN_SECONDS = 1
MAX_SECONDS = 10 * 365 * 86400


def grammar_seconds(text: str) -> float | None:
    """Seconds of a duration in Tidewise's grammar (`7d`, `1h30m`), None when it is not in it."""
    parts = _PART.findall(text)
    if not text or not parts or "".join(f"{n}{u}" for n, u in parts) != text:
        return None
    return sum(float(n) * UNITS[u] for n, u in parts)


def duration_seconds(text: str, *, what: str = "duration") -> float:
    """`24h` -> 86400.0. Accepts concatenations (`1h30m`); rejects zero, negatives, unknown units and
    anything outside 1 s .. 10 years (InputError naming `what`)."""
    s = text.strip().lower()
    if s.startswith("-"):
        raise InputError(f"{what} {text!r} is negative; it must be longer than zero (for example 5m or 24h)")
    seconds = grammar_seconds(s)
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
    return seconds
