"""Features and targets of the decision-time forecasts (issue 12): what a decision made at origin t
knows (the samples strictly before t) and what it needs (the peak of the next `span` steps).

Every row is one origin. Values are scaled per series by a level (median of the last day before
the origin) and a scale (mean absolute deviation from that level over the last week), so that one
global model serves series of any unit and sign; the model's quantiles are mapped back with the
same level and scale, which makes the bands level-dependent (a busy hour has a wider band in
units than a quiet one when the series' history says so).
"""
from __future__ import annotations

from typing import Callable

import numpy as np
import pandas as pd

# (y, step, span) -> (features, level, scale): `decision_features` or the hour-peak set
Features = Callable[[pd.Series, pd.Timedelta, int], tuple[np.ndarray, np.ndarray, np.ndarray]]

FEATURE_NAMES = (
    "last", "mean_15m", "max_15m", "mean_1h", "max_1h",  # the latest observations
    "day_ago_next_max", "day_ago_at", "week_ago_next_max", "week_ago_at",  # the same window one day / week ago
    "day_ago_ratio",  # how the last hour compares with the same hour yesterday (a level shift)
    "tod_sin", "tod_cos", "dow", "log_scale",  # calendar; the series' own spread vs its level
)
RECENT = 3  # steps of "15m" at a 5-minute step
HOUR = 12  # steps of "1h" at a 5-minute step


def rolling_level_scale(y: pd.Series, steps_per_day: int) -> tuple[np.ndarray, np.ndarray]:
    """(level, scale) at each origin from the samples strictly before it (see the module doc);
    the scale never falls below 1e-6 of the level's magnitude nor below 1e-9."""
    past = y.shift(1)
    level = past.rolling(steps_per_day, min_periods=max(1, steps_per_day // 4)).median()
    dev = (past - level).abs()
    scale = dev.rolling(7 * steps_per_day, min_periods=max(1, steps_per_day // 4)).mean()
    lv = level.to_numpy(dtype=float)
    sc = scale.to_numpy(dtype=float)
    floor = np.maximum(np.abs(np.nan_to_num(lv)) * 1e-6, 1e-9)
    return lv, np.where(np.isfinite(sc) & (sc > floor), sc, floor)


def next_max(y: pd.Series, span: int) -> np.ndarray:
    """The decision target at each origin i: max of y[i .. i+span-1] (NaN where not all observed)."""
    return y.rolling(span, min_periods=span).max().shift(-(span - 1)).to_numpy(dtype=float)


def decision_features(y: pd.Series, step: pd.Timedelta, span: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(features [n, len(FEATURE_NAMES)] scaled, level [n], scale [n]) with one row per sample of
    `y` taken as an origin. Row i reads only y[:i] (the samples before the origin)."""
    per_day = int(pd.Timedelta("1D") / step)
    per_week = 7 * per_day
    level, scale = rolling_level_scale(y, per_day)
    past = y.shift(1)

    def z(v: pd.Series | np.ndarray) -> np.ndarray:
        return (np.asarray(v, dtype=float) - level) / scale

    ahead = y.rolling(span, min_periods=1).max()  # at position j: max of y[j-span+1 .. j]
    # the next `span` steps, one day (week) ago: window y[i-D .. i-D+span-1] ends at i-D+span-1 < i
    day_next = ahead.shift(per_day - (span - 1))
    week_next = ahead.shift(per_week - (span - 1))
    hour_max = past.rolling(HOUR, min_periods=1).max()
    day_hour_max = hour_max.shift(per_day)
    ratio = np.log(np.clip((hour_max - level + scale) / (day_hour_max.to_numpy() - level + scale), 1e-3, 1e3))
    idx = y.index
    tod = ((idx - idx.normalize()) / pd.Timedelta("1D")).to_numpy(dtype=float)
    cols = [
        z(past), z(past.rolling(RECENT, min_periods=1).mean()), z(past.rolling(RECENT, min_periods=1).max()),
        z(past.rolling(HOUR, min_periods=1).mean()), z(hour_max),
        z(day_next), z(y.shift(per_day)), z(week_next), z(y.shift(per_week)), np.asarray(ratio, dtype=float),
        np.sin(2 * np.pi * tod), np.cos(2 * np.pi * tod), idx.day_of_week.to_numpy(dtype=float),
        np.log(scale / (np.abs(np.nan_to_num(level)) + scale)),
    ]
    return np.column_stack(cols), level, scale


def training_rows(y: pd.Series, step: pd.Timedelta, span: int, before: pd.Timestamp | None,
                  every: int = 1, features: Features | None = None) -> tuple[np.ndarray, np.ndarray]:
    """(features, scaled target) of the origins whose whole target window lies before `before`
    (no look-ahead: a model fitted for day D sees no sample of D), every `every`-th origin,
    with at least one day of past and a finite target."""
    x, level, scale = (features or decision_features)(y, step, span)
    t = (next_max(y, span) - level) / scale
    pos = np.arange(len(y))
    ok = np.isfinite(t) & np.isfinite(level) & (pos >= int(pd.Timedelta("1D") / step)) & (pos % every == 0)
    if before is not None:
        ok &= np.asarray(y.index + span * step <= before)
    return x[ok], t[ok]
