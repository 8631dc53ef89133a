"""`decision_features` at chosen origins of many series at once (issue 24's serving cost): what the
HPA's decision-time forecast needs at a serving run's origin, one row per series and origin, not every
origin of 9 days one series at a time (22 ms a series, most of a 1,000-workload run).

Equal to `decision_features`' row at the origin to the bit, which the trees need (a feature a few
ulps off flips a split the model learnt on that very value): the maxima and medians are exact
wherever computed, but pandas' rolling means (the scale, the 15-minute and hour means) add and
remove each sample with a compensated running sum, so their last bits depend on every sample since
the series' first. So a row is the series' whole past on the grid (`row`: NaN before its first sample,
which the rolling kernels skip as the per-series path never sees it) and the means are pandas' own
kernel run over every row at once, each row a series of its own (`rolling_rows`).

The scale also needs the level (the median of the day before) at every position of the row: pandas'
rolling median costs ~1 ms a row, so a serving run keeps the levels between runs and computes only
the new step's and the first day's (whose windows the series' start cuts): `predictor.pipeline.
decision.RecentLevels`.
"""
from __future__ import annotations

import warnings
from typing import Any, Callable

import numpy as np
import pandas as pd
from pandas.api.indexers import BaseIndexer

from predictor.features.decision import HOUR, RECENT

try:  # pandas' rolling kernels, called with every row's bounds at once: rolling() over a custom
    # indexer runs the same kernels with ~9x the cost (bounds checks and copies per call)
    from pandas._libs.window.aggregations import roll_mean, roll_median_c
    KERNELS: dict[str, Callable[..., np.ndarray]] = {"mean": roll_mean, "median": roll_median_c}
except ImportError:  # pragma: no cover - a pandas that moved them: the public path below
    KERNELS = {}


def per_day(step: pd.Timedelta) -> int:
    return int(pd.Timedelta("1D") / step)


class _Rows(BaseIndexer):
    """Windows of `width` that never cross the start of a row of `length` (rows laid end to end)."""

    length: int
    width: int

    def get_window_bounds(self, num_values: int = 0, min_periods: int | None = None, center: Any = None,
                          closed: Any = None, step: Any = None) -> tuple[np.ndarray, np.ndarray]:
        return _bounds(num_values, self.length, self.width)


def _bounds(num_values: int, length: int, width: int) -> tuple[np.ndarray, np.ndarray]:
    """(start, end) of every window of rows of `length` laid end to end: one row's pattern offset
    by each row's start (~2.5x faster than a modulo over every position; a serving run asks ~300 times)."""
    rows = max(1, -(-num_values // length))
    j = np.arange(length, dtype=np.int64)
    base = (np.arange(rows, dtype=np.int64) * length)[:, None]
    start = (base + np.maximum(j - width + 1, 0)).ravel()[:num_values]
    end = (base + j + 1).ravel()[:num_values]
    return start, end


def rolling_rows(a: np.ndarray, width: int, min_periods: int, how: str) -> np.ndarray:
    """`pd.Series(row).rolling(width, min_periods).<how>()` of each row of `a` on its own ("mean" or
    "median"), to the bit: the kernel restarts its sums at each row's first position, as on a series
    of its own."""
    a = np.ascontiguousarray(a, dtype=float)
    flat = a.ravel()
    kernel = KERNELS.get(how)
    if kernel is not None:
        try:
            return kernel(flat, *_bounds(len(flat), a.shape[1], width), min_periods).reshape(a.shape)
        except TypeError:  # pragma: no cover - another signature: the public path
            pass
    rows = pd.Series(flat).rolling(_Rows(length=a.shape[1], width=width), min_periods=min_periods)
    return getattr(rows, how)().to_numpy(dtype=float).reshape(a.shape)  # type: ignore[no-any-return]


def new_levels(tails: np.ndarray, day: int) -> np.ndarray:
    """The level over each row of `tails` [rows, day] (the day before a position), as pandas' rolling
    median gives it: the middle finite value, or the mean of the two middle ones ((a + b) / 2)."""
    srt = np.sort(np.asarray(tails, dtype=float), axis=1)  # NaN last
    k = np.isfinite(srt).sum(axis=1)
    rows = np.arange(len(srt))
    hi = np.minimum(k // 2, srt.shape[1] - 1)
    lo = np.maximum(hi - 1, 0)
    mid = np.where(k % 2 == 1, srt[rows, hi], (srt[rows, hi] + srt[rows, lo]) / 2)
    return np.where(k >= max(1, day // 4), mid, np.nan)


def levels(past: np.ndarray, day: int) -> np.ndarray:
    """The level at every position of each row of `past` (see `features_at`), by pandas' median."""
    return rolling_rows(past, day, max(1, day // 4), "median")


def min_row(step: pd.Timedelta) -> int:
    """The shortest row `features_at` reads: a week and an hour before the origin, and the origin."""
    return 7 * per_day(step) + HOUR + 1


def features_at(past: np.ndarray, lv: np.ndarray, origins: pd.DatetimeIndex, step: pd.Timedelta,
                span: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(features [rows, len(FEATURE_NAMES)], level [rows], scale [rows]) at one origin per row.
    `past` [rows, n]: the series shifted by one step (`y.shift(1)`) on the grid from before its first
    sample to the origin (the last column), NaN where missing; `lv` [rows, n]: `levels(past, day)`."""
    day = per_day(step)
    week = 7 * day
    p = np.asarray(past, dtype=float)
    n = p.shape[1]
    if n < week + HOUR + 1 or lv.shape != p.shape:
        raise ValueError(f"rows of {n} steps (levels {lv.shape}): the decision features read {week + HOUR + 1}")
    level = lv[:, -1]
    least = max(1, day // 4)
    raw = rolling_rows(np.abs(p - lv), week, least, "mean")[:, -1]  # the week's distance from each level
    floor = np.maximum(np.abs(np.nan_to_num(level)) * 1e-6, 1e-9)
    scale = np.where(np.isfinite(raw) & (raw > floor), raw, floor)
    with warnings.catch_warnings(), np.errstate(invalid="ignore", divide="ignore"):
        warnings.simplefilter("ignore", RuntimeWarning)  # all-NaN windows stay NaN

        def peak(back: int, width: int) -> np.ndarray:
            """max of y[i - back .. i - back + width - 1] (i: the origin, column n - 1; y[i - k] is
            past[i - k + 1], column n - k)."""
            return np.nanmax(p[:, n - back: n - back + width], axis=1)  # type: ignore[no-any-return]

        hour_max = peak(HOUR, HOUR)
        day_hour_max = peak(day + HOUR, HOUR)
        ratio = np.log(np.clip((hour_max - level + scale) / (day_hour_max - level + scale), 1e-3, 1e3))
        log_scale = np.log(scale / (np.abs(np.nan_to_num(level)) + scale))
        cols = [p[:, -1], _last_mean(p, RECENT), peak(RECENT, RECENT), _last_mean(p, HOUR), hour_max,
                peak(day, span), p[:, n - day], peak(week, span), p[:, n - week]]
    idx = pd.DatetimeIndex(origins)
    tod = ((idx - idx.normalize()) / pd.Timedelta("1D")).to_numpy(dtype=float)
    x = np.column_stack([*((c - level) / scale for c in cols), ratio, np.sin(2 * np.pi * tod),
                         np.cos(2 * np.pi * tod), idx.day_of_week.to_numpy(dtype=float), log_scale])
    return x, level, scale


def _last_mean(p: np.ndarray, width: int) -> np.ndarray:
    """pandas' rolling mean of `width` at the last column (its running sum over the whole row)."""
    return rolling_rows(p, width, 1, "mean")[:, -1]
