"""Features of the hour-peak forecast (issue 24): what a VPA decision at origin t knows about the peak
of the next `span` steps (an hour at a 5-minute step) — the same window on each of the last 7 days,
the last windows' peaks and level, how the window moved from the hour before on earlier days (a
tide's slope), the day's peak and the calendar. The same windows 2 to 4 weeks back were measured
and left out: on the dev suite they changed nothing (slack 0.4313 without, 0.4319 with, at equal
settings), and without them a forecast needs 8 days of history, what serve fetches, not 29.

Same contract as `predictor.features.decision.decision_features`: one row per origin, row i reads
only y[:i], values scaled by the series' own level (median of the last day) and scale (standard
deviation of the last week), so one global model serves the fleet. The combinations (`pers_*`,
`lvl_days`) are differences the trees would otherwise have to learn from many splits: the last
hour's peak moved by the step the tide took at this hour on earlier days, and the earlier days'
peak moved by today's level.
"""
from __future__ import annotations

import warnings

import numpy as np
import pandas as pd


DAYS = 7
HOUR_PEAK_NAMES = (
    *(f"day{d}_peak" for d in range(1, DAYS + 1)), "days_median", "days_max", "days_min", "days_q75",
    "day1_next_peak", "day1_prev_peak",
    "last_peak", "prev_peak", "prev2_peak", "last_mean", "last", "max_15m", "shift_vs_day1",
    "pers_day1", "pers_days", "pers_day7", "lvl_days", "peak_24h",
    "tod_sin", "tod_cos", "dow", "log_scale",
)


def max_span(step: pd.Timedelta) -> int:
    """The longest window (in steps) whose peak these features can forecast: under half a day, so
    that the same window on the day before and the one after it (`day1_prev_peak`, `day1_next_peak`)
    do not overlap the window itself."""
    return int(pd.Timedelta("1D") / step) // 2


def _check(step: pd.Timedelta, span: int) -> int:
    if span >= max_span(step):
        raise ValueError(f"span {span} steps: the hour-peak features need a span under half a day "
                         f"({max_span(step)})")
    return int(pd.Timedelta("1D") / step)


def row_quantile(a: np.ndarray, q: float) -> np.ndarray:
    """The q-quantile of each row's finite values (numpy's linear method; NaN for a row of none),
    vectorised: np.nanquantile along an axis loops in Python, which a serving run over every series
    cannot afford."""
    a = np.asarray(a, dtype=float)
    if a.ndim != 2 or a.shape[1] == 0:
        return np.full(len(a), np.nan)
    srt = np.sort(a, axis=1)  # NaN sort last
    k = np.isfinite(a).sum(axis=1)
    pos = q * np.maximum(k - 1, 0)
    lo = np.floor(pos).astype(int)
    hi = np.minimum(lo + 1, np.maximum(k - 1, 0))
    rows = np.arange(len(a))
    out = srt[rows, lo] + (pos - lo) * (srt[rows, hi] - srt[rows, lo])
    return np.where(k > 0, out, np.nan)


def _floored(level: np.ndarray, scale: np.ndarray) -> np.ndarray:
    floor = np.maximum(np.abs(np.nan_to_num(level)) * 1e-6, 1e-9)
    return np.where(np.isfinite(scale) & (scale > floor), scale, floor)


def hour_peak_features(y: pd.Series, step: pd.Timedelta, span: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(features [n, len(HOUR_PEAK_NAMES)] scaled, level [n], scale [n]), row i from y[:i] only; the
    level is the median of the last day, the scale the standard deviation of the last week (both
    from rolling sums or a window of the past, so one origin costs microseconds: `hour_peak_features_at`)."""
    per_day = _check(step, span)
    past = y.shift(1)
    level = past.rolling(per_day, min_periods=per_day // 4).median().to_numpy(dtype=float)
    scale = _floored(level, past.rolling(7 * per_day, min_periods=per_day // 4).std(ddof=0).to_numpy(dtype=float))
    ahead = y.rolling(span, min_periods=1).max()  # at j: max of y[j-span+1 .. j]
    last = past.rolling(span, min_periods=1).max()  # at i: max of y[i-span .. i-1]

    def window(start_back: int) -> np.ndarray:
        """Peak of y[i-start_back .. i-start_back+span-1] at each origin i (ends before i)."""
        return ahead.shift(start_back - (span - 1)).to_numpy(dtype=float)

    raw = {"days": np.column_stack([window(d * per_day) for d in range(1, DAYS + 1)]),
           "before": np.column_stack([last.shift(d * per_day).to_numpy(dtype=float) for d in range(1, DAYS + 1)]),
           "next": window(per_day - span), "h1": last.to_numpy(dtype=float),
           "prev": last.shift(span).to_numpy(dtype=float), "prev2": last.shift(2 * span).to_numpy(dtype=float),
           "mean": past.rolling(span, min_periods=1).mean().to_numpy(dtype=float), "last": past.to_numpy(dtype=float),
           "max15": past.rolling(3, min_periods=1).max().to_numpy(dtype=float),
           "peak24": past.rolling(per_day, min_periods=1).max().to_numpy(dtype=float)}
    return _assemble(raw, level, scale, y.index), level, scale


def lookback(step: pd.Timedelta, span: int) -> int:
    """Steps before an origin its features read (a week for the scale, a week and a span of peaks)."""
    return 7 * _check(step, span) + span


def hour_peak_features_at(y: pd.Series, positions: np.ndarray, step: pd.Timedelta, span: int
                          ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The rows `positions` of `hour_peak_features(y, ...)`, computed from their own windows only."""
    n = lookback(step, span)
    v = np.concatenate([np.full(n, np.nan), y.to_numpy(dtype=float)])
    rows = np.asarray(positions, dtype=int)
    windows = np.stack([v[i: i + n] for i in rows]) if len(rows) else np.zeros((0, n))
    return hour_peak_features_last(windows, y.index[rows], step, span)


def hour_peak_features_last(windows: np.ndarray, origins: pd.DatetimeIndex, step: pd.Timedelta, span: int
                            ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Features at one origin per row of `windows` [rows, lookback(step, span)]: the samples on the
    grid just before the origin, oldest first (NaN where missing). Vectorised over rows, so a serving
    run computes every series' features at once, equal to `hour_peak_features`' row at the origin."""
    per_day = _check(step, span)
    w = np.asarray(windows, dtype=float)
    n = w.shape[1]
    if n != lookback(step, span):
        raise ValueError(f"windows of {n} steps: the hour-peak features read {lookback(step, span)}")

    def agg(fn, back: int, width: int, least: int = 1) -> np.ndarray:  # type: ignore[no-untyped-def]
        """fn over y[i-back .. i-back+width-1] per row (NaN with under `least` finite values)."""
        part = w[:, n - back: n - back + width]
        ok = np.isfinite(part).sum(axis=1) >= least
        out = np.full(len(w), np.nan)
        if ok.any():
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", RuntimeWarning)
                out[ok] = fn(part[ok], axis=1)
        return out

    level = agg(lambda a, axis: row_quantile(a, 0.5), per_day, per_day, per_day // 4)
    scale = _floored(level, agg(np.nanstd, 7 * per_day, 7 * per_day, per_day // 4))
    back = [d * per_day for d in range(1, DAYS + 1)]
    raw = {"days": np.column_stack([agg(np.nanmax, b, span) for b in back]),
           "before": np.column_stack([agg(np.nanmax, b + span, span) for b in back]),
           "next": agg(np.nanmax, per_day - span, span), "h1": agg(np.nanmax, span, span),
           "prev": agg(np.nanmax, 2 * span, span), "prev2": agg(np.nanmax, 3 * span, span),
           "mean": agg(np.nanmean, span, span), "last": agg(np.nanmax, 1, 1), "max15": agg(np.nanmax, 3, 3),
           "peak24": agg(np.nanmax, per_day, per_day)}
    return _assemble(raw, level, scale, pd.DatetimeIndex(origins)), level, scale


def _assemble(raw: dict[str, np.ndarray], level: np.ndarray, scale: np.ndarray, idx: pd.DatetimeIndex) -> np.ndarray:
    """The feature columns (HOUR_PEAK_NAMES' order) from the raw window values, scaled."""
    def z(v: np.ndarray) -> np.ndarray:
        return (np.asarray(v, dtype=float) - level) / scale

    h1 = z(raw["h1"])
    days = (raw["days"] - level[:, None]) / scale[:, None]
    before = (raw["before"] - level[:, None]) / scale[:, None]
    with warnings.catch_warnings():  # all-NaN rows (the first week) stay NaN
        warnings.simplefilter("ignore", RuntimeWarning)
        med, step_up = row_quantile(days, 0.5), row_quantile(days - before, 0.5)
        stats = [med, np.nanmax(days, axis=1), np.nanmin(days, axis=1), row_quantile(days, 0.75)]
        lvl = med + (h1 - row_quantile(before, 0.5))
    tod = ((idx - idx.normalize()) / pd.Timedelta("1D")).to_numpy(dtype=float)
    cols = [
        *days.T, *stats, z(raw["next"]), before[:, 0],
        h1, z(raw["prev"]), z(raw["prev2"]), z(raw["mean"]), z(raw["last"]), z(raw["max15"]), h1 - before[:, 0],
        h1 + (days[:, 0] - before[:, 0]), h1 + step_up, h1 + (days[:, -1] - before[:, -1]), lvl, z(raw["peak24"]),
        np.sin(2 * np.pi * tod), np.cos(2 * np.pi * tod), idx.day_of_week.to_numpy(dtype=float),
        np.log(scale / (np.abs(np.nan_to_num(level)) + scale)),
    ]
    return np.column_stack(cols)
