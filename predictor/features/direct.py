"""Direct multi-horizon features: one row per future step of one forecast origin.

Every feature is computed from `past` — the values strictly before the origin — and from the
target's timestamp, so that nothing after the origin can leak in (`tests/predictor/test_features.py`
proves it by changing the future). Values are expressed as z = (value - level) / scale with the
series' own level and scale (`features.scale`), so that one global model serves every series.

Lags reach back whole days (and weeks) far enough to be before the origin: for a target h steps
ahead, the "day lag" is the same time of day on the most recent day that is fully observed.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from predictor.durations import DAY
from predictor.features.calendar import calendar_features
from predictor.features.scale import level_and_scale
from predictor.features.seasonality import autocorrelation
from predictor.timestamps import median_step

PROFILE_DAYS = 7  # same-time-of-day statistics over the last week: one of each weekday


@dataclass(frozen=True)
class SeriesContext:
    """What the features need to know about a series at one origin."""

    level: float
    scale: float
    acf_day: float
    acf_week: float


def context_of(past: np.ndarray, steps_per_day: int) -> SeriesContext:
    level, scale = level_and_scale(past, steps_per_day)
    return SeriesContext(level, scale, autocorrelation(past, steps_per_day), autocorrelation(past, 7 * steps_per_day))


FEATURE_NAMES: list[str] = []  # filled below from a dry run, so that names and columns stay in step


def direct_features(
    past: np.ndarray,
    origin: pd.Timestamp,
    step: pd.Timedelta,
    horizon: int,
    ctx: SeriesContext | None = None,
    offsets: np.ndarray | None = None,
) -> np.ndarray:
    """(horizon, n_features) for targets origin, origin+step, ...; `past` ends at origin - step.
    `offsets` (0-based steps after the origin) computes only those rows."""
    past = np.asarray(past, dtype=np.float64)
    spd = max(1, int(round(DAY / step)))
    if ctx is None:
        ctx = context_of(past, spd)
    z = (past - ctx.level) / ctx.scale
    n = len(z)
    h = np.arange(horizon) if offsets is None else np.asarray(offsets, dtype=np.int64)
    t = n + h  # target positions in the coordinates of `past`
    days_back = (h // spd) + 1  # whole days back so that t - days*spd < n
    weeks_back = (h // (7 * spd)) + 1

    def at(idx: np.ndarray) -> np.ndarray:
        ok = (idx >= 0) & (idx < n)
        out = np.full(idx.shape, np.nan)
        out[ok] = z[idx[ok]]
        return out

    lag_d1 = at(t - spd * days_back)
    lag_d2 = at(t - spd * (days_back + 1))
    lag_w1 = at(t - 7 * spd * weeks_back)
    prof = at((t - spd * days_back)[:, None] - spd * np.arange(PROFILE_DAYS)[None, :])
    with np.errstate(all="ignore"):
        import warnings

        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)
            prof_med = np.nanmedian(prof, axis=1)
            prof_max = np.nanmax(prof, axis=1)
            prof_min = np.nanmin(prof, axis=1)
            prof_sd = np.nanstd(prof, axis=1)

            def tail_stat(k: int, fn) -> float:
                w = z[-k:]
                return float(fn(w)) if np.isfinite(w).any() else np.nan

            lvl_1h = tail_stat(max(1, spd // 24), np.nanmean)
            lvl_6h = tail_stat(max(1, spd // 4), np.nanmean)
            sd_6h = tail_stat(max(2, spd // 4), np.nanstd)
            max_1d = tail_stat(spd, np.nanmax)
            q90_1d = tail_stat(spd, lambda w: np.nanquantile(w, 0.9))
    last = z[np.isfinite(z)][-1] if np.isfinite(z).any() else np.nan
    index = pd.DatetimeIndex(origin + step * h)
    cal, _ = calendar_features(index)
    cv = ctx.scale / (abs(ctx.level) + ctx.scale)
    const = np.array([lvl_1h, lvl_6h, sd_6h, max_1d, q90_1d, last, ctx.acf_day, ctx.acf_week, cv], dtype=np.float64)
    return np.column_stack([
        (h + 1) / spd, cal, lag_d1, lag_d2, lag_w1, prof_med, prof_max, prof_min, prof_sd,
        np.tile(const, (len(h), 1)),
    ])


FEATURE_NAMES[:] = (
    ["horizon_days"] + calendar_features(pd.DatetimeIndex([pd.Timestamp(0, tz="UTC")]))[1]
    + ["lag_1d", "lag_2d", "lag_1w", "profile_median", "profile_max", "profile_min", "profile_sd",
       "level_1h", "level_6h", "spread_6h", "max_1d", "q90_1d", "last", "acf_day", "acf_week", "cv"]
)


def training_rows(
    y: pd.Series,
    origins: list[pd.Timestamp],
    horizon: int,
    min_past: int,
    max_past: int,
) -> tuple[np.ndarray, np.ndarray]:
    """Stack features and scaled targets for several origins of one series (targets that are gaps
    are dropped). Each origin's features see only the `max_past` values before it."""
    step = pd.Timedelta(y.index.freq) if y.index.freq is not None else median_step(y.index)
    v = y.to_numpy(dtype=np.float64)
    spd = max(1, int(round(DAY / step)))
    xs, ts = [], []
    for o in origins:
        pos = int(y.index.searchsorted(o))
        if pos < min_past:
            continue
        past = v[max(0, pos - max_past):pos]
        fut = v[pos:pos + horizon]
        if len(fut) == 0 or not np.isfinite(fut).any():
            continue
        ctx = context_of(past, spd)
        x = direct_features(past, o, step, len(fut), ctx)
        target = (fut - ctx.level) / ctx.scale
        ok = np.isfinite(target)
        xs.append(x[ok])
        ts.append(target[ok])
    if not xs:
        return np.empty((0, len(FEATURE_NAMES))), np.empty(0)
    return np.vstack(xs), np.concatenate(ts)
