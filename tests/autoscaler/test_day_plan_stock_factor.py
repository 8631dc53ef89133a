"""The restart regime's stock candidate is calibrated as the plan is, never above its own level (issue 24
item 4: "never worse than stock"): on a flat series, where the stock VPA is rarely violated, the day's
choice compares and serves the stock rule as lean as the plan's share of the budget allows; where the
stock VPA is violated more than that, it keeps the stock rule's own target (it is never raised)."""
from __future__ import annotations

import numpy as np
import pandas as pd

from autoscaler.logic.day_plan import DAY, PLAN_SHARE, DayPlanner
from autoscaler.logic.plan_costs import FACTORS, multiplier, stock_factor, violation
from autoscaler.settings import VpaSettings
from studies.replay.day_plan import replay_restart


def flat(seed: int, days: int = 16) -> pd.Series:
    rng = np.random.default_rng(seed)
    idx = pd.date_range("2026-10-01", periods=days * 288, freq="5min", tz="UTC")
    return pd.Series(2.0 + rng.gamma(2.0, 0.05, len(idx)), index=idx)


def test_the_factor_is_the_plans_calibration_capped_at_one():
    rng = np.random.default_rng(0)
    usage = rng.uniform(0.9, 1.1, 2016)
    roomy = np.full_like(usage, 1.5)  # never violated: as lean as the factors go
    assert stock_factor(usage, roomy, 0.03) == FACTORS[0] == multiplier(usage, roomy, 0.03)
    some = np.full_like(usage, 1.2)  # 1.2 x 0.9 = 1.08 is over ~10% of the steps, 1.2 x 0.95 = 1.14 over none
    assert stock_factor(usage, some, 0.03) == 0.95 and violation(usage, some * 0.95) <= 0.03 < violation(usage, some * 0.9)
    tight = np.full_like(usage, 1.0)  # half the steps over: the plan's calibration would raise it ...
    assert multiplier(usage, tight, 0.03) > 1.0
    assert stock_factor(usage, tight, 0.03) == 1.0  # ... the stock rule is never asked for more than its own


def test_a_flat_series_is_served_the_stock_rule_scaled_down_and_the_reason_says_by_how_much():
    y = flat(1)
    s = VpaSettings()
    day = y.index[0] + 12 * DAY
    planner = DayPlanner(y[y.index < day], s, 3)
    d = planner.decide(day, 0.05)
    assert not d.planned and d.stock_factor < 1.0
    np.testing.assert_array_equal(d.values, planner.stock_day(day) * d.stock_factor)
    assert d.why.startswith(f"the stock rule x{d.stock_factor:g} (cost on the last 7 d, half-life 3 d: plan ")
    # yesterday (a day of the week the factor was calibrated on) at that factor: within twice the plan's
    # share of the budget, while a factor far too lean (0.8 on every series) would not be
    served = violation(planner.usage(day - DAY), np.repeat(planner.stock_day(day - DAY) * d.stock_factor, 12))
    assert served <= 2 * PLAN_SHARE * 0.05
    assert d.stock_factor == 0.8 or violation(planner.usage(day - DAY),
                                              np.repeat(planner.stock_day(day - DAY) * 0.8, 12)) > PLAN_SHARE * 0.05
    # serve's call (no stock day worked out) carries the same factor for its hourly reads
    same = DayPlanner(y[y.index < day], s, 3).decide(day, 0.05, stock_today=False)
    assert same.values is None and same.stock_factor == d.stock_factor and same.why == d.why


def test_the_restart_replay_of_a_flat_series_asks_for_less_than_the_stock_rule_alone():
    y = flat(2)
    start, end = y.index[0] + 9 * DAY, y.index[0] + 16 * DAY
    out = replay_restart(y, start, end, VpaSettings(), 3)
    stocked = out["reason"].str.contains("the stock rule x0.")  # scaled down; never at its own level
    assert stocked.mean() > 0.5 and (stocked | out["reason"].str.contains("day plan in")).all()  # or a plan cost less
    planner = DayPlanner(y[y.index < end], VpaSettings(), 3)
    stock = np.array([planner.stock(t) for t in out["timestamp"]])
    assert (out["target"].to_numpy() < stock).all()  # every hour under the stock rule's own target
    use = y[(y.index >= start) & (y.index < end)]
    req = out.set_index("timestamp")["target"].reindex(use.index, method="ffill").to_numpy()
    assert violation(use.to_numpy(), req) <= 0.05  # within the budget
