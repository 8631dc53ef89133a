"""The restart plan's week weighted by recency (issue 24 item 4): the level a fixed day must meet drifts,
so the plan's factor, the stock rule's and the costs the day's choice compares read yesterday more than
a week ago (`HALF_LIFE`). Weighted, the calibration is still every factor at once with the answer of one
factor at a time; unweighted (`weights=None`) it is what it was."""
from __future__ import annotations

import re

import numpy as np
import pandas as pd

from autoscaler.logic.day_plan import DAY, STEP, DayPlanner
from autoscaler.logic.plan_costs import FACTORS, HALF_LIFE, cost, multipliers, recency, slack, violation
from autoscaler.settings import VpaSettings


def test_the_weights_halve_every_half_life_and_cover_each_step_of_a_day():
    w = recency([1, 2, 4, 7])
    per_day = int(DAY // STEP)
    assert len(w) == 4 * per_day
    assert (w[:per_day] == 1.0).all()  # yesterday counts fully
    np.testing.assert_allclose(w[3 * per_day], 0.5 ** (6 / HALF_LIFE))
    np.testing.assert_allclose(w[2 * per_day], 0.5 ** (3 / HALF_LIFE))
    assert (np.diff(w) <= 0).all()


def loop_multiplier(usage: np.ndarray, plan: np.ndarray, budget: float, weights: np.ndarray) -> float:
    """One factor at a time, the weighted share of steps over plan x factor."""
    for f in FACTORS:
        ok = np.isfinite(usage) & np.isfinite(plan)
        if ok.any() and np.sum(weights[ok] * (usage[ok] > plan[ok] * f)) / np.sum(weights[ok]) <= budget:
            return f
    return FACTORS[-1]


def test_weighted_calibration_is_the_loops_and_the_weights_move_it():
    rng = np.random.default_rng(7)
    moved = 0
    for _ in range(200):
        u = np.round(rng.gamma(2, 1, 2016), 2)
        plan = np.round(u * rng.uniform(0.5, 1.3) + rng.gamma(1, 0.2, 2016), 2)
        u = u * np.repeat(rng.uniform(0.7, 1.3, 7), 288)  # each day at its own level
        u[rng.random(2016) < 0.1], plan[rng.random(2016) < 0.05] = np.nan, np.nan
        w = recency(list(range(1, 8)))
        budget = float(rng.choice([0.01, 0.03, 0.05, 0.2]))
        rows = np.vstack([plan, plan * 0.9, np.full_like(plan, np.nan)])
        got = multipliers(u, rows, budget, w)
        assert got == [loop_multiplier(u, r, budget, w) for r in rows]
        moved += got[0] != multipliers(u, rows, budget)[0]
        assert multipliers(u, rows, budget, np.ones(len(u))) == multipliers(u, rows, budget)  # all alike: unweighted
    assert moved > 10  # the weights change the answer where the days differ


def test_weighted_slack_violation_and_cost_are_weighted_means():
    u = np.array([1.0, 3.0, np.nan, 2.0])
    r = np.array([2.0, 2.0, 2.0, 4.0])
    w = np.array([1.0, 3.0, 5.0, 0.5])
    assert violation(u, r, w) == 3.0 / 4.5  # the NaN step's weight is not counted
    np.testing.assert_allclose(slack(u, r, w), (1.0 * 0.5 + 3.0 * 0.0 + 0.5 * 0.5) / 4.5)
    np.testing.assert_allclose(cost(u, r, 2.0, 2.5, 0.01, w), slack(u, r, w) + 2.5 * violation(u, r, w) + 0.02)
    assert violation(u, r) == 1 / 3 and slack(u, r) == (0.5 + 0.0 + 0.5) / 3  # unweighted: as before


def drifting(seed: int, days: int = 16) -> pd.Series:
    """A daily tide whose level moves from one day to the next, with noise."""
    rng = np.random.default_rng(seed)
    idx = pd.date_range("2026-10-01", periods=days * 288, freq="5min", tz="UTC")
    t = np.arange(len(idx))
    level = np.repeat(rng.uniform(0.7, 1.3, days), 288)
    return pd.Series(level * (3 + 2 * np.sin(2 * np.pi * t / 288)) + rng.gamma(2.0, 0.15, len(idx)), index=idx)


def test_the_days_choice_is_costed_on_the_weighted_week():
    """The plan's cost in the reason is the weighted cost of its shape x factor on the week's plans, and
    on a drifting tide it is not the cost with every day alike."""
    s, differs = VpaSettings(), 0
    for seed in (1, 2, 3):
        y = drifting(seed)
        for k in (9, 12, 15):
            day = y.index[0].floor("D") + k * DAY
            planner = DayPlanner(y[y.index < day], s, 3)
            d = planner.decide(day, 0.05)
            got = re.search(r"x([0-9.]+) of each hour's (peak|(\d)\w\w largest step) \(cost on the last 7 d, "
                            r"half-life 3 d: plan ([0-9.]+),", d.why)
            assert got, d.why
            factor, shape = float(got.group(1)), int(got.group(3) or 1)
            week = [day - b * DAY for b in range(1, 8)]
            planned = np.concatenate([np.repeat(planner.plan(w, shape), 12) for w in week]) * factor
            changes = len(set(planner.plan(day, shape)))
            u = planner.usage(*week)
            weighted = cost(u, planned, changes, s.violation_weight, s.change_weight, recency(list(range(1, 8))))
            alike = cost(u, planned, changes, s.violation_weight, s.change_weight)
            assert got.group(4) == f"{weighted:.3f}"
            differs += f"{alike:.3f}" != f"{weighted:.3f}"
    assert differs >= 3
