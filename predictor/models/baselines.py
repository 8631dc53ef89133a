"""Cheap baselines that are also the fallbacks: seasonal naive and a decaying-histogram percentile."""
from __future__ import annotations

import numpy as np
import pandas as pd

from predictor.decaying_histogram import cdf_quantiles, decaying_cdf
from predictor.durations import WEEK, to_timedelta
from predictor.history import fill_short_gaps
from predictor.models.base import Forecaster, steps_in


class SeasonalNaive(Forecaster):
    """Repeat the last season (`1d` or `7d`); quantiles from the empirical residuals of that same
    rule over the last `residual_window` (default 7 d: enough for ~2,000 residuals at 5 min)."""

    name = "seasonal_naive"

    def history_needed(self) -> pd.Timedelta:
        """Two seasons: the last one repeated, and one before it for the residuals."""
        return 2 * to_timedelta(self.season)

    def __init__(self, season: str = "1d", residual_window: str = "7d"):
        self.season = season
        self.residual_window = residual_window

    @property
    def label(self) -> str:
        return f"seasonal_naive_{'weekly' if to_timedelta(self.season) >= WEEK else 'daily'}"

    def _fit(self, y: pd.Series) -> None:
        m = steps_in(self.season, self.step_)
        if len(y) < 2 * m:
            raise ValueError(
                f"history has {len(y) * self.step_} of data; seasonal naive with a {self.season} "
                f"season needs at least two seasons ({2 * m * self.step_}) — use DecayingHistogram or wait"
            )
        filled = fill_short_gaps(y, self.step_).to_numpy(copy=True)  # written below; pandas 3 views are read-only
        # where a long gap remains, fall back to the value one season earlier (itself filled), then to
        # the median: a season at a time, each from the one before it, already final
        for start in range(m, len(filled), m):
            block = filled[start:start + m]
            gap = np.isnan(block)
            block[gap] = filled[start - m:start - m + len(block)][gap]
        med = float(np.nanmedian(filled))
        filled = np.where(np.isnan(filled), med, filled)
        self.last_season_ = filled[-m:].copy()
        r = steps_in(self.residual_window, self.step_)
        raw = y.to_numpy()
        resid = (raw[m:] - filled[:-m])[-r:]
        resid = resid[np.isfinite(resid)]
        self.residuals_ = resid if len(resid) else np.zeros(1)

    def _predict(self, horizon: int, quantiles: np.ndarray) -> np.ndarray:
        reps = int(np.ceil(horizon / len(self.last_season_)))
        point = np.tile(self.last_season_, reps)[:horizon]
        offsets = np.quantile(self.residuals_, quantiles)
        return point[:, None] + offsets[None, :]


class DecayingHistogram(Forecaster):
    """The VPA recommender's signal: percentiles of usage weighted by age, half-life 24 h (a
    week-old sample weighs 1/128), over the last `window` (8 d as in the VPA). Flat forecast."""

    name = "decaying_histogram"
    min_history = "6h"  # runs on any two samples; under a quarter day its percentiles rest on too few

    def __init__(self, half_life: str = "24h", window: str = "8d"):
        self.half_life = half_life
        self.window = window

    def _fit(self, y: pd.Series) -> None:
        recent = y[y.index > y.index[-1] - to_timedelta(self.window)].dropna()
        if recent.empty:
            raise ValueError(f"no value in the last {self.window} of history")
        age = (y.index[-1] - recent.index).total_seconds().to_numpy()
        self.values_, self.cum_weights_ = decaying_cdf(recent.to_numpy(), age,
                                                       to_timedelta(self.half_life).total_seconds())

    def _predict(self, horizon: int, quantiles: np.ndarray) -> np.ndarray:
        return np.tile(cdf_quantiles(self.values_, self.cum_weights_, quantiles), (horizon, 1))
