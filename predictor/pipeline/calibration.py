"""Conformal calibration of forecast quantiles on recent backtest residuals.

For each quantile q, the shift c_q is the q-quantile of (actual - forecast_q) over the backtest
folds (conformalised quantile regression, with the finite-sample rank ceil((n + 1) q)), so that
forecast_q + c_q covers a share q of what happened. Shifts are per series and per quantile,
constant over the horizon; after shifting, the columns are re-sorted so that they never cross.

`AdaptiveConformal` calibrates the decision-time quantiles online, per series: each quantile
carries an offset (in units of the series' scale) that grows after a miss and shrinks after a hit,
so the running miss rate tracks 1 - q (Angelopoulos et al., "Conformal PID control", quantile
tracking).
"""
from __future__ import annotations

from typing import Sequence

import numpy as np
import pandas as pd

from predictor.models.base import non_crossing

MIN_POINTS = 48  # below this many residuals (4 h at 5 min) a shift is more noise than signal


def conformal_shifts(actual: np.ndarray, forecast: np.ndarray, quantiles: Sequence[float]) -> np.ndarray:
    """actual (n,), forecast (n, len(quantiles)) -> shift per quantile (zeros when too few points)."""
    actual = np.asarray(actual, dtype=float).ravel()
    forecast = np.asarray(forecast, dtype=float).reshape(len(actual), -1)
    ok = np.isfinite(actual) & np.isfinite(forecast).all(axis=1)
    qs = np.asarray(quantiles, dtype=float)
    if ok.sum() < MIN_POINTS:
        return np.zeros(len(qs))
    r = actual[ok, None] - forecast[ok]
    n = int(ok.sum())
    out = np.empty(len(qs))
    for j, q in enumerate(qs):
        level = min(1.0, np.ceil((n + 1) * q) / n) if q >= 0.5 else max(0.0, np.floor((n + 1) * q) / n)
        out[j] = np.quantile(r[:, j], level, method="higher" if q >= 0.5 else "lower")
    return out


def apply_shifts(values: np.ndarray, shifts: np.ndarray, quantiles: Sequence[float]) -> np.ndarray:
    """values (h, nq) + shifts (nq,), then non-crossing."""
    return non_crossing(np.asarray(values, dtype=float) + np.asarray(shifts, dtype=float)[None, :],
                        np.asarray(quantiles, dtype=float))


def coverage(actual: np.ndarray, upper: np.ndarray) -> float:
    """Share of finite actual values at or under `upper`."""
    a, u = np.asarray(actual, dtype=float).ravel(), np.asarray(upper, dtype=float).ravel()
    ok = np.isfinite(a) & np.isfinite(u)
    return float(np.mean(a[ok] <= u[ok])) if ok.any() else float("nan")


def pinball(actual: np.ndarray, forecast: np.ndarray, quantiles: Sequence[float]) -> np.ndarray:
    """Mean pinball loss per quantile over finite actual values (under-prediction at q costs q,
    over-prediction 1 - q: at the decision quantile 0.95, running short costs 19x more)."""
    a = np.asarray(actual, dtype=float).ravel()
    f = np.asarray(forecast, dtype=float).reshape(len(a), -1)
    ok = np.isfinite(a) & np.isfinite(f).all(axis=1)
    qs = np.asarray(quantiles, dtype=float)
    if not ok.any():
        return np.full(len(qs), np.nan)
    d = a[ok, None] - f[ok]
    return np.mean(np.maximum(qs * d, (qs - 1) * d), axis=0)


class AdaptiveConformal:
    """Per-series online calibration of quantile forecasts: offset_j (in units of the series'
    scale) moves by `rate` x (miss - (1 - q_j)) once each target is observed, so a quantile that
    is missed more often than 1 - q widens and one that is never missed narrows. With rate 0.05 a
    q0.9 forecast widens by 0.045 scales per miss and narrows by 0.005 per hit."""

    def __init__(self, quantiles: Sequence[float], rate: float = 0.05, limit: float = 5.0):
        self.quantiles = np.asarray(quantiles, dtype=float)
        self.rate = rate
        self.limit = limit  # offsets stay within +-limit scales: one outage must not blow the band up
        self.offset = np.zeros(len(self.quantiles))

    def update(self, forecast: np.ndarray, actual: float) -> None:
        """Learn from one origin's calibrated forecast [len(quantiles)] and its observed target."""
        if not np.isfinite(actual) or not np.all(np.isfinite(forecast)):
            return
        miss = (actual > forecast).astype(float)
        self.offset = np.clip(self.offset + self.rate * (miss - (1 - self.quantiles)), -self.limit, self.limit)

    def apply(self, forecast: np.ndarray, scale: float) -> np.ndarray:
        return non_crossing((forecast + self.offset * scale)[None, :], self.quantiles)[0]


# quantiles of the next interval's peak the VPA's hour-peak model gives: the range BudgetLevel walks in
PEAK_LEVELS = (0.5, 0.6, 0.7, 0.75, 0.8, 0.85, 0.9, 0.95, 0.98)


class BudgetLevel:
    """A series' operating point on a forecast of the next interval's peak (issue 24): the quantile
    level `tau` of the predicted peak at which the request is set, moved online so that the share
    of steps with usage over the request meets `budget` — adaptive conformal inference (Gibbs &
    Candès, 2021) on the violation rate a VPA is judged by, not on the coverage of the peak: after
    each interval, tau += gain x (share of its steps over the request - budget), within [low, high].

    The bounds are the fail-safe: a series whose bursts no level within reach covers sits at
    `high` and runs over its budget (reported, not hidden), rather than ask for ever more; a quiet
    one never goes below the predicted median peak. The running rate (`achieved`) is what replay
    and serve report against the budget."""

    def __init__(self, budget: float, gain: float = 0.1, start: float = 0.8, low: float = 0.5, high: float = 0.98):
        if not 0 < budget < 1:
            raise ValueError(f"violation budget {budget}: use a share in (0, 1)")
        self.budget, self.gain, self.low, self.high = float(budget), float(gain), float(low), float(high)
        self.tau = float(np.clip(start, low, high))
        self.over = 0.0  # steps over the request, and steps seen, since the start
        self.steps = 0

    def request(self, peak_quantiles: np.ndarray, levels: Sequence[float]) -> float:
        """The request at the current level: the predicted peak's quantiles read at tau (linear between
        the model's levels, which must span [low, high])."""
        return float(np.interp(self.tau, np.asarray(levels, dtype=float), np.asarray(peak_quantiles, dtype=float)))

    def observe(self, usage: np.ndarray, request: float) -> None:
        """Learn from one interval: its observed steps against the request that was in force."""
        u = np.asarray(usage, dtype=float)
        if np.isfinite(request):
            self.observe_over(u[np.isfinite(u)] > request)

    def observe_over(self, over: np.ndarray) -> None:
        """Learn from one interval given, per observed step, whether usage was over its request."""
        o = np.asarray(over, dtype=bool)
        if not len(o):
            return
        share = float(np.mean(o))
        self.over += float(np.sum(o))
        self.steps += len(o)
        self.tau = float(np.clip(self.tau + self.gain * (share - self.budget), self.low, self.high))

    def describe(self, label: str, interval: pd.Timedelta) -> str:
        """The reason step of a request at the current level (replay's and serve's)."""
        rate = self.achieved
        seen = f"{rate:.3f} so far" if np.isfinite(rate) else "none seen yet"
        return (f"{label}: the next {int(interval / pd.Timedelta('1min'))} min's peak at q{self.tau:.2f}, "
                f"the level meeting violation budget {self.budget:g} (achieved {seen})")

    @property
    def achieved(self) -> float:
        """Share of the steps seen so far over their request (NaN before any)."""
        return self.over / self.steps if self.steps else float("nan")
