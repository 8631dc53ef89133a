"""How the restart regime's day plan is calibrated and costed on the series' last week (issue 24 item 4):
the share of steps over a request and the mean relative slack, each step weighted by its day's recency;
the smallest factor on a plan (or on the stock rule's targets) that keeps the week within a budget; and
the cost the day's choice compares. Pure: arrays in, numbers out. `autoscaler.logic.day_plan` reads it.
"""
from __future__ import annotations

import numpy as np
import pandas as pd

STEPS_A_DAY = pd.Timedelta("1D") // pd.Timedelta("5min")
# the week a plan is calibrated and costed on (`day_plan.LOOK` days): each day of it weighted
# 0.5 ** ((days back - 1) / HALF_LIFE), yesterday 1, four days back 0.5. The level a fixed day must meet drifts,
# so yesterday says more of today than a week ago does. The plan's and the stock rule's factors and the costs
# they are chosen by are all read on the weighted week. Measured on both suites along the budget
# (BENCHMARKS.md, "The restart week weighted by recency"; 2 and 5 days measured alike)
HALF_LIFE = 3.0
FACTORS = tuple(float(f) for f in np.round(np.arange(0.8, 2.001, 0.05), 3))  # plan multipliers tried
_FACTORS = np.asarray(FACTORS)


def _mean(x: np.ndarray, weights: np.ndarray | None, ok: np.ndarray) -> float:
    """The mean of `x` over `ok`, each step weighted (None: all alike; NaN when nothing is `ok`)."""
    if not ok.any():
        return float("nan")
    if weights is None:
        return float(np.mean(x[ok]))
    w = np.asarray(weights, dtype=float)[ok]
    return float(np.sum(w * x[ok]) / np.sum(w))


def violation(usage: np.ndarray, request: np.ndarray, weights: np.ndarray | None = None) -> float:
    """Share of finite steps with usage over the request, each step weighted by `weights` (None: all alike;
    NaN when none)."""
    u, r = np.asarray(usage, dtype=float), np.asarray(request, dtype=float)
    ok = np.isfinite(u) & np.isfinite(r)
    with np.errstate(invalid="ignore"):  # NaN compared: outside `ok`
        return _mean(u > r, weights, ok)


def slack(usage: np.ndarray, request: np.ndarray, weights: np.ndarray | None = None) -> float:
    """Mean relative slack (request - usage) / request over finite steps, a shortfall counted 0 (each step
    weighted by `weights`, None: all alike)."""
    u, r = np.asarray(usage, dtype=float), np.asarray(request, dtype=float)
    ok = np.isfinite(u) & np.isfinite(r) & (r > 0)
    with np.errstate(invalid="ignore", divide="ignore"):  # outside `ok`
        return _mean(np.clip((r - u) / r, 0, None), weights, ok)


def recency(days_back: list[int]) -> np.ndarray:
    """Each step's weight on a week of days, `days_back` days before the day decided (1: yesterday), one
    after the other as `DayPlanner.usage` lays them out: 0.5 ** ((days_back - 1) / HALF_LIFE)."""
    per_day = 0.5 ** ((np.asarray(days_back, dtype=float) - 1.0) / HALF_LIFE)
    return np.repeat(per_day, STEPS_A_DAY)


def multiplier(usage: np.ndarray, plan: np.ndarray, budget: float, weights: np.ndarray | None = None) -> float:
    """The smallest of `FACTORS` whose plan x factor keeps `usage` within `budget` (the largest when
    none does); each step weighted by `weights` (None: all alike)."""
    return multipliers(usage, np.asarray(plan, dtype=float)[None, :], budget, weights)[0]


def multipliers(usage: np.ndarray, plans: np.ndarray, budget: float, weights: np.ndarray | None = None) -> list[float]:
    """`multiplier` of each row of `plans` [rows, steps], every factor at once: each rate is
    `violation(usage, plan * f, weights)` (the same floats unweighted; weighted, its sums added in another
    order). Only the steps over a plan at its lowest factor can be over it at any: the factors are compared on
    those."""
    u, p = np.asarray(usage, dtype=float), np.asarray(plans, dtype=float)
    w = np.ones(len(u)) if weights is None else np.asarray(weights, dtype=float)
    ok = np.isfinite(u)[None, :] & np.isfinite(p)
    seen = ok.astype(float) @ w  # whole numbers when unweighted: the count
    with np.errstate(invalid="ignore"):  # NaN compared: not over, as outside `ok`
        lowest = np.minimum(p * _FACTORS[0], p * _FACTORS[-1])  # p x f runs one way in f, either sign
        near = ok & (u[None, :] > lowest)
    row, step = np.nonzero(near)
    over = u[step][None, :] > p[row, step][None, :] * _FACTORS[:, None]  # factors x the near steps
    counts = (over * w[step][None, :]) @ (row[:, None] == np.arange(len(p))[None, :])  # factors x rows
    with np.errstate(invalid="ignore", divide="ignore"):  # no step to judge: NaN, within no budget
        rates = counts / seen[None, :]
    out = []
    for r in range(len(p)):
        within = np.flatnonzero(rates[:, r] <= budget)
        out.append(FACTORS[int(within[0])] if len(within) else FACTORS[-1])
    return out


def stock_factor(usage: np.ndarray, stock: np.ndarray, budget: float, weights: np.ndarray | None = None) -> float:
    """The factor on the stock rule's targets the day's choice compares and serves: calibrated on the
    recent days as the plan is (`multiplier`), but never above 1. Where the stock VPA is conservative
    for the series (a flat one, violated far less often than the budget allows) the stock rule is
    offered as lean as the budget lets it be; it is never asked for more than it would give itself."""
    return min(1.0, multiplier(usage, stock, budget, weights))


def cost(usage: np.ndarray, request: np.ndarray, changes_per_day: float, violation_weight: float,
         change_weight: float, weights: np.ndarray | None = None) -> float:
    """slack + violation_weight x violation rate + change_weight x changes a day (NaN: no data); the steps
    weighted by `weights` (None: all alike)."""
    return (slack(usage, request, weights) + violation_weight * violation(usage, request, weights)
            + change_weight * changes_per_day)
