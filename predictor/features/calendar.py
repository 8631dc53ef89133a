"""Calendar features: cyclic minute-of-day and day-of-week, and Fourier terms of the daily and
weekly cycles. They depend on the timestamp alone, so they never leak the future."""
from __future__ import annotations

import numpy as np
import pandas as pd

from predictor.timestamps import epoch_ns

DAY_S = 86_400.0
WEEK_S = 7 * DAY_S


def seconds_of(index: pd.DatetimeIndex) -> np.ndarray:
    """Seconds since the Unix epoch (UTC) as floats; 1970-01-01 was a Thursday."""
    return epoch_ns(index).astype(np.float64) / 1e9


def fourier(seconds: np.ndarray, period_s: float, order: int) -> np.ndarray:
    """(n, 2*order): sin and cos of k * 2π t / period for k = 1..order."""
    phase = 2 * np.pi * (seconds % period_s) / period_s
    cols = []
    for k in range(1, order + 1):
        cols += [np.sin(k * phase), np.cos(k * phase)]
    return np.column_stack(cols) if cols else np.empty((len(seconds), 0))


def calendar_features(index: pd.DatetimeIndex, daily_order: int = 3, weekly_order: int = 2) -> tuple[np.ndarray, list[str]]:
    """Cyclic minute-of-day (the first daily Fourier pair), day-of-week (the weekly pair), higher
    harmonics, and a weekend flag. Returns the matrix and its column names."""
    s = seconds_of(index)
    # shift by 3 days so that the weekly phase starts on Monday 00:00 UTC (epoch was a Thursday)
    week_s = s + 3 * DAY_S
    d = fourier(s, DAY_S, daily_order)
    w = fourier(week_s, WEEK_S, weekly_order)
    dow = np.floor((week_s % WEEK_S) / DAY_S)
    weekend = (dow >= 5).astype(np.float64)
    names = [f"day_{f}{k}" for k in range(1, daily_order + 1) for f in ("sin", "cos")]
    names += [f"week_{f}{k}" for k in range(1, weekly_order + 1) for f in ("sin", "cos")]
    names += ["weekend"]
    return np.column_stack([d, w, weekend]), names
