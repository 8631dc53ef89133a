"""The restart regime's day plan (issue 24 item 4): where every request change restarts a pod, a day is
planned in at most N blocks — up before the peak, down after it — from a forecast of its hourly peaks.

Pure: arrays in, arrays out. `blocks` cuts a day's hourly peaks into at most `n` contiguous blocks,
each at its own highest hour, wasting least (the sum of block level - peak over the hours; dynamic
programming over cut points, 24 hours x n blocks). `multiplier` is the plan's calibration: the
smallest factor on the plan whose steps over the request, on the recent days replayed, stay within
the budget. `cost` is what the choice between the plan and the stock rule compares. `DayPlanner` puts them
together for one series: each UTC day, the N-block plan from the median of each hour's peak on the
last 7 days, scaled to keep the last week within `PLAN_SHARE` of the budget (a plan fixed for a
day cannot react within it, so it is calibrated below the budget), or the stock VPA's hourly
target, whichever cost less on that week; the reason shows both costs. Replay
(`studies/replay/day_plan.py`) and serve's restart regime read it.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from autoscaler.logic.vpa import vpa_default_request
from autoscaler.settings import VpaSettings

DAY = pd.Timedelta("1D")
STEP = pd.Timedelta("5min")
PROFILE_DAYS = 7  # the plan's hourly peaks: the median of the same hour on this many past days
LOOK = 7  # days of the series' own past the plan is calibrated and chosen on
PLAN_SHARE = 0.6  # the plan is calibrated to this share of the budget on its last week
FACTORS = tuple(float(f) for f in np.round(np.arange(0.8, 2.001, 0.05), 3))  # plan multipliers tried


def blocks(peaks: np.ndarray, n: int) -> np.ndarray:
    """`peaks` (one per hour; NaN: unknown, taken as the day's highest) as at most `n` flat blocks."""
    p = np.asarray(peaks, dtype=float)
    if not len(p) or not np.isfinite(p).any():
        return np.full(len(p), np.nan)
    p = np.where(np.isfinite(p), p, np.nanmax(p))
    m, n = len(p), max(1, min(int(n), len(p)))
    waste = np.full((m + 1, m + 1), np.inf)  # waste[i, j]: hours i..j-1 as one block
    for i in range(m):
        top = -np.inf
        total = 0.0
        for j in range(i + 1, m + 1):
            top, total = max(top, p[j - 1]), total + p[j - 1]
            waste[i, j] = top * (j - i) - total
    best = np.full((n + 1, m + 1), np.inf)
    cut = np.zeros((n + 1, m + 1), dtype=int)
    best[0, 0] = 0.0
    for b in range(1, n + 1):
        for j in range(1, m + 1):
            c = best[b - 1, :j] + waste[:j, j]
            cut[b, j] = int(np.argmin(c))
            best[b, j] = c[cut[b, j]]
    b = int(np.argmin(best[1:, m])) + 1
    out, j = np.empty(m), m
    while j > 0:
        i = cut[b, j]
        out[i:j] = np.max(p[i:j])
        j, b = i, b - 1
    return out


def violation(usage: np.ndarray, request: np.ndarray) -> float:
    """Share of finite steps with usage over the request (NaN when none)."""
    u, r = np.asarray(usage, dtype=float), np.asarray(request, dtype=float)
    ok = np.isfinite(u) & np.isfinite(r)
    return float(np.mean(u[ok] > r[ok])) if ok.any() else float("nan")


def slack(usage: np.ndarray, request: np.ndarray) -> float:
    """Mean relative slack (request - usage) / request over finite steps, a shortfall counted 0."""
    u, r = np.asarray(usage, dtype=float), np.asarray(request, dtype=float)
    ok = np.isfinite(u) & np.isfinite(r) & (r > 0)
    return float(np.mean(np.clip((r[ok] - u[ok]) / r[ok], 0, None))) if ok.any() else float("nan")


def multiplier(usage: np.ndarray, plan: np.ndarray, budget: float) -> float:
    """The smallest of `FACTORS` whose plan x factor keeps `usage` within `budget` (the largest when
    none does)."""
    for f in FACTORS:
        if violation(usage, plan * f) <= budget:
            return f
    return FACTORS[-1]


def cost(usage: np.ndarray, request: np.ndarray, changes_per_day: float, violation_weight: float,
         change_weight: float) -> float:
    """slack + violation_weight x violation rate + change_weight x changes a day (NaN: no data)."""
    return slack(usage, request) + violation_weight * violation(usage, request) + change_weight * changes_per_day


@dataclass(frozen=True)
class DayDecision:
    """A UTC day's restart-regime choice: its hourly requests (None: no plan and no stock target),
    whether the plan was chosen (else the stock rule, hour by hour), and why."""

    values: np.ndarray | None
    planned: bool
    why: str


class DayPlanner:
    """One series' restart-regime requests, day by day (plans and stock targets memoised)."""

    def __init__(self, y: pd.Series, settings: VpaSettings, n: int) -> None:
        self.y, self.settings = y, settings
        self.n = max(1, n)  # every change a day is the plan's (keeping one back for a raise measured worse)
        self.peaks = y.resample("1h").max()
        self._plans: dict[pd.Timestamp, np.ndarray | None] = {}
        self._stock: dict[pd.Timestamp, float] = {}

    def plan(self, day: pd.Timestamp) -> np.ndarray | None:
        """The day's N-block plan of hourly peaks, before calibration (None: under 2 past days)."""
        if day not in self._plans:
            hours = day + pd.to_timedelta(np.arange(24), unit="h")
            past = np.column_stack([self.peaks.reindex(hours - d * DAY).to_numpy() for d in range(1, PROFILE_DAYS + 1)])
            enough = np.isfinite(past).sum(axis=1) >= 2
            profile = np.where(enough, np.nanmedian(np.where(np.isfinite(past), past, np.nan), axis=1)
                               if enough.any() else np.nan, np.nan)
            self._plans[day] = blocks(profile, self.n) if enough.any() else None
        return self._plans[day]

    def stock(self, t: pd.Timestamp) -> float:
        """The stock VPA's target at `t` (8 days, 24 h half-life, p90 + 15%)."""
        if t not in self._stock:
            h = self.y[(self.y.index < t) & (self.y.index >= t - 8 * DAY)].dropna()
            self._stock[t] = vpa_default_request(h.to_numpy(), (t - h.index).total_seconds().to_numpy() / 3600.0)
        return self._stock[t]

    def stock_day(self, day: pd.Timestamp) -> np.ndarray:
        """The stock target at each hour of `day`."""
        return np.array([self.stock(day + pd.Timedelta(hours=h)) for h in range(24)])

    def usage(self, day: pd.Timestamp) -> np.ndarray:
        """The day's usage on the 5-minute grid (NaN where missing)."""
        return self.y.reindex(pd.date_range(day, day + DAY, freq=STEP, inclusive="left")).to_numpy(dtype=float)

    def decide(self, day: pd.Timestamp, budget: float) -> DayDecision:
        """The day's choice between its plan and the stock rule."""
        past = [day - d * DAY for d in range(1, LOOK + 1)]
        past = [d for d in past if self.plan(d) is not None]
        plan = self.plan(day)
        if plan is None or not past:
            return DayDecision(self.stock_day(day), False, "no day plan yet (under 2 days of peaks): the stock rule")
        u = np.concatenate([self.usage(d) for d in past])
        planned = np.concatenate([np.repeat(self.plan(d), 12) for d in past])  # type: ignore[arg-type]
        factor = multiplier(u, planned, PLAN_SHARE * budget)
        s = self.settings
        plan_cost = cost(u, planned * factor, len(set(plan)), s.violation_weight, s.change_weight)
        stocked = np.concatenate([np.repeat(self.stock_day(d), 12) for d in past])
        stock_cost = cost(u, stocked, 1.0, s.violation_weight, s.change_weight)
        costs = f"cost on the last {len(past)} d: plan {plan_cost:.3f}, stock {stock_cost:.3f}"
        if plan_cost <= stock_cost or not np.isfinite(stock_cost):
            return DayDecision(plan * factor, True, f"day plan in {len(set(plan))} block(s) x{factor:g} ({costs})")
        return DayDecision(self.stock_day(day), False, f"the stock rule ({costs})")
