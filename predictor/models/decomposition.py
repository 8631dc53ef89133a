"""Decomposition forecaster: statsmodels STL (daily) or MSTL (daily + weekly), fitted at a coarser
step — hourly by default — because the cost is what decides the design: STL at 5 min on 28 days
takes ~1.7 s and MSTL ~27 s here (DESIGN.md), while at one hour both take a few tens of ms.

Forecast = damped trend + last seasonal cycle(s) + an AR(1) remainder decaying to zero, linearly
interpolated back to the series' step; quantiles from the empirical residuals at the fine step.
"""
from __future__ import annotations

import warnings

import numpy as np
import pandas as pd

from predictor.durations import DAY, to_timedelta
from predictor.history import fill_short_gaps
from predictor.models.base import Forecaster
from predictor.timestamps import epoch_ns


class STLForecaster(Forecaster):
    """`weekly=True` adds the weekly season (MSTL) once `2 * 7d + 1d` of history exist; with less,
    the daily STL is used and `weekly_used_` says so. `trend_damping`: per coarse step, 0.98 at
    hourly halves a trend's slope in ~34 h, so a ramp is not extrapolated all week."""

    name = "stl"
    min_history = "2d"

    def history_needed(self) -> pd.Timedelta:
        """Two days for STL; MSTL is only itself (weekly) with two weeks and a day."""
        return pd.Timedelta(days=15) if self.weekly else to_timedelta(self.min_history)

    def __init__(self, coarse_step: str = "1h", weekly: bool = False, trend_damping: float = 0.98,
                 robust: bool = False):
        self.coarse_step = coarse_step
        self.weekly = weekly
        self.trend_damping = trend_damping
        self.robust = robust

    @property
    def label(self) -> str:
        return "mstl" if self.weekly else "stl"

    def _fit(self, y: pd.Series) -> None:
        from statsmodels.tsa.seasonal import MSTL, STL

        coarse = to_timedelta(self.coarse_step)
        if coarse < self.step_:
            raise ValueError(f"coarse_step {self.coarse_step} is finer than the series step {self.step_}")
        per_day = int(round(DAY / coarse))
        c = fill_short_gaps(y, self.step_).resample(coarse).mean()
        c = c.interpolate(limit_direction="both")
        if c.isna().all() or len(c) < 2 * per_day:
            raise ValueError(f"history has {len(y) * self.step_}; STL with a daily season needs at least "
                             "two days — use SeasonalNaive or DecayingHistogram, or wait")
        weekly = self.weekly and len(c) >= 15 * per_day
        self.weekly_used_ = weekly
        v = c.to_numpy(dtype=float)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            if weekly:
                res = MSTL(v, periods=(per_day, 7 * per_day), stl_kwargs={"robust": self.robust}).fit()
                seasonal = np.asarray(res.seasonal).reshape(len(v), -1)
                periods = [per_day, 7 * per_day]
            else:
                res = STL(v, period=per_day, robust=self.robust).fit()
                seasonal = np.asarray(res.seasonal).reshape(len(v), 1)
                periods = [per_day]
        trend = np.asarray(res.trend)
        remainder = np.asarray(res.resid)
        self.coarse_ = coarse
        self.coarse_start_ = c.index[-1]  # timestamp of the last coarse bucket (its left edge)
        self.seasonal_last_ = [seasonal[-p:, i].copy() for i, p in enumerate(periods)]
        self.trend_last_ = float(trend[-1])
        k = min(per_day // 4 or 1, len(trend) - 1)
        self.slope_ = float((trend[-1] - trend[-1 - k]) / k) if k > 0 else 0.0
        r = remainder[np.isfinite(remainder)]
        phi = float(np.corrcoef(r[1:], r[:-1])[0, 1]) if len(r) > 3 and r.std() > 0 else 0.0
        self.phi_ = float(np.clip(phi if np.isfinite(phi) else 0.0, 0.0, 0.99))
        self.remainder_last_ = float(remainder[-1]) if np.isfinite(remainder[-1]) else 0.0
        fitted = pd.Series(trend + seasonal.sum(axis=1), index=c.index + coarse / 2)
        fine = self._to_fine(fitted, y.index)
        resid = (y.to_numpy() - fine)[-7 * int(round(DAY / self.step_)):]
        resid = resid[np.isfinite(resid)]
        self.residuals_ = resid if len(resid) else np.zeros(1)

    def _to_fine(self, coarse_centered: pd.Series, index: pd.DatetimeIndex) -> np.ndarray:
        # both in nanoseconds: the two indexes may carry different resolutions on pandas 3
        x = epoch_ns(coarse_centered.index).astype(float)
        return np.interp(epoch_ns(index).astype(float), x, coarse_centered.to_numpy(dtype=float))

    def _predict(self, horizon: int, quantiles: np.ndarray) -> np.ndarray:
        fine_index = self.future_index(horizon)
        n_coarse = int(np.ceil(horizon * self.step_ / self.coarse_)) + 2
        j = np.arange(n_coarse)  # coarse steps after the last fitted bucket, starting at 0
        damp = self.trend_damping ** np.arange(1, n_coarse + 1)
        trend = self.trend_last_ + self.slope_ * np.cumsum(damp)
        season = sum(np.tile(s, int(np.ceil(n_coarse / len(s))) + 1)[: n_coarse] for s in self.seasonal_last_)
        rem = self.remainder_last_ * self.phi_ ** (j + 1)
        # the seasonal cycle continues: bucket last+1 is one full period after last+1-p
        centered = pd.Series(np.concatenate([[self.trend_last_ + sum(s[-1] for s in self.seasonal_last_) + self.remainder_last_],
                                             trend + season + rem]),
                             index=self.coarse_start_ + self.coarse_ / 2 + self.coarse_ * np.arange(n_coarse + 1))
        point = self._to_fine(centered, fine_index)
        return point[:, None] + np.quantile(self.residuals_, quantiles)[None, :]
