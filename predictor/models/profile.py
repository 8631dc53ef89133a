"""Seasonal median: the median of the last days at each time of day, pulled towards the current
level; quantiles from the same rule's one-day-ahead errors. A robust daily-seasonal baseline that
a flash crowd on one day does not copy into tomorrow (as seasonal naive does)."""
from __future__ import annotations

import numpy as np
import pandas as pd

from predictor.history import fill_short_gaps
from predictor.models.base import Forecaster, steps_in


def _day_matrix(v: np.ndarray, m: int, days: int) -> np.ndarray:
    return v[len(v) - days * m:].reshape(days, m)


class SeasonalMedian(Forecaster):
    """Median of the last `days` days at each step of the day; `level_weight` of the gap between
    the last `level_window` and the profile's same hours is carried forward (0.5: half of a level
    shift is believed after one window, the rest waits for the median to catch up)."""

    name = "seasonal_median"
    min_history = "2d"  # the median of fewer days than `days` is still a daily profile; one day has no residuals

    def __init__(self, days: int = 7, level_window: str = "6h", level_weight: float = 0.5,
                 residual_days: int = 7):
        self.days = days
        self.level_window = level_window
        self.level_weight = level_weight
        self.residual_days = residual_days

    def _profile(self, v: np.ndarray, m: int, w: int) -> np.ndarray:
        nd = min(self.days, len(v) // m)
        with np.errstate(all="ignore"):
            import warnings

            with warnings.catch_warnings():
                warnings.simplefilter("ignore", RuntimeWarning)
                base = np.nanmedian(_day_matrix(v, m, nd), axis=0)
                base = np.where(np.isfinite(base), base, np.nanmedian(v))
                shift = np.nanmedian(v[-w:]) - np.nanmedian(base[-w:])
        if np.isfinite(shift):
            base = base + self.level_weight * shift
        return base

    def _fit(self, y: pd.Series) -> None:
        if self.days < 1 or not 0 <= self.level_weight <= 1:
            raise ValueError("days must be >= 1 and level_weight within [0, 1]")
        m = steps_in("1d", self.step_)
        if len(y) < 2 * m:
            raise ValueError(f"history has {len(y) * self.step_} of data; seasonal median needs at least "
                             f"two days ({2 * m * self.step_}) — use DecayingHistogram or wait")
        w = steps_in(self.level_window, self.step_)
        v = fill_short_gaps(y, self.step_).to_numpy(dtype=float)
        self.profile_ = self._profile(v, m, w)
        res = []
        for d in range(1, self.residual_days + 1):
            end = len(v) - d * m
            if end < m:
                break
            res.append(v[end:end + m] - self._profile(v[:end], m, w))
        r = np.concatenate(res) if res else v[-m:] - self.profile_
        r = r[np.isfinite(r)]
        self.residuals_ = r if len(r) else np.zeros(1)

    def _predict(self, horizon: int, quantiles: np.ndarray) -> np.ndarray:
        point = np.tile(self.profile_, int(np.ceil(horizon / len(self.profile_))))[:horizon]
        return point[:, None] + np.quantile(self.residuals_, quantiles)[None, :]
