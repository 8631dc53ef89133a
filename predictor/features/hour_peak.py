"""Features of the hour-peak forecast (issue 24): what a VPA decision at origin t knows about the peak
of the next `span` steps (an hour at a 5-minute step) — the same window on each of the last 7 days,
the last windows' peaks and level, how the window moved from the hour before on earlier days (a
tide's slope), the day's peak and the calendar. The same windows 2 to 4 weeks back were measured
and left out: on the dev suite they changed nothing (slack 0.4313 without, 0.4319 with, at equal
settings), and without them a forecast needs 8 days of history, what serve fetches, not 29.

Same contract as `predictor.features.decision.decision_features`: one row per origin, row i reads
only y[:i], values scaled by the series' own level and scale (`rolling_level_scale`), so one global
model serves the fleet. The combinations (`pers_*`, `lvl_dmed`) are differences the trees would
otherwise have to learn from many splits: the last hour's peak moved by the step the tide took at
this hour on earlier days, and the earlier days' peak moved by today's level.
"""
from __future__ import annotations

import warnings

import numpy as np
import pandas as pd

from predictor.features.decision import rolling_level_scale

DAYS = 7
HOUR_PEAK_NAMES = (
    *(f"day{d}_peak" for d in range(1, DAYS + 1)), "days_median", "days_max", "days_min", "days_q75",
    "day1_next_peak", "day1_prev_peak",
    "last_peak", "prev_peak", "prev2_peak", "last_mean", "last", "max_15m", "shift_vs_day1",
    "pers_day1", "pers_days", "pers_day7", "lvl_days", "peak_24h",
    "tod_sin", "tod_cos", "dow", "log_scale",
)


def hour_peak_features(y: pd.Series, step: pd.Timedelta, span: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(features [n, len(HOUR_PEAK_NAMES)] scaled, level [n], scale [n]), row i from y[:i] only."""
    per_day = int(pd.Timedelta("1D") / step)
    if span >= per_day // 2:
        raise ValueError(f"span {span} steps: the hour-peak features need a span under half a day ({per_day // 2})")
    level, scale = rolling_level_scale(y, per_day)
    past = y.shift(1)

    def z(v: pd.Series | np.ndarray) -> np.ndarray:
        return (np.asarray(v, dtype=float) - level) / scale

    ahead = y.rolling(span, min_periods=1).max()  # at j: max of y[j-span+1 .. j]

    def window(start_back: int) -> np.ndarray:
        """Peak of y[i-start_back .. i-start_back+span-1] at each origin i (ends before i)."""
        return z(ahead.shift(start_back - (span - 1)))

    last = past.rolling(span, min_periods=1).max()  # the last span steps, y[i-span .. i-1]
    days = np.column_stack([window(d * per_day) for d in range(1, DAYS + 1)])
    before = np.column_stack([z(last.shift(d * per_day)) for d in range(1, DAYS + 1)])  # the window before, d days ago
    h1 = z(last)
    with warnings.catch_warnings():  # all-NaN rows (the first week) stay NaN
        warnings.simplefilter("ignore", RuntimeWarning)
        med, step_up = np.nanmedian(days, axis=1), np.nanmedian(days - before, axis=1)
        stats = [med, np.nanmax(days, axis=1), np.nanmin(days, axis=1), np.nanquantile(days, 0.75, axis=1)]
        lvl = med + (h1 - np.nanmedian(before, axis=1))
    idx = y.index
    tod = ((idx - idx.normalize()) / pd.Timedelta("1D")).to_numpy(dtype=float)
    cols = [
        *days.T, *stats, window(per_day - span), before[:, 0],
        h1, z(last.shift(span)), z(last.shift(2 * span)), z(past.rolling(span, min_periods=1).mean()), z(past),
        z(past.rolling(3, min_periods=1).max()), h1 - before[:, 0],
        h1 + (days[:, 0] - before[:, 0]), h1 + step_up, h1 + (days[:, -1] - before[:, -1]), lvl,
        z(past.rolling(per_day, min_periods=1).max()),
        np.sin(2 * np.pi * tod), np.cos(2 * np.pi * tod), idx.day_of_week.to_numpy(dtype=float),
        np.log(scale / (np.abs(np.nan_to_num(level)) + scale)),
    ]
    return np.column_stack(cols), level, scale
