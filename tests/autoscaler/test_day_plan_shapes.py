"""The restart plan's shapes (issue 24 item 4): a day is planned from each hour's peak and from its 2nd
to `SHAPES`-th largest step, each calibrated on the week, and the one that cost least there is the
plan; the reason names it. A planner with the peak alone is one of the candidates, so the chosen plan
never costs more than it on the week."""
from __future__ import annotations

import re

import numpy as np

from autoscaler.logic import day_plan
from autoscaler.logic.day_plan import DAY, DayPlanner, largest
from autoscaler.settings import VpaSettings
from tests.autoscaler.test_day_plan_vectorised import synthetic


def test_each_rows_largest_steps_in_order_the_smallest_where_fewer():
    rows = np.array([[1.0, 5.0, 3.0, np.nan, 5.0, 2.0],
                     [np.nan, 4.0, np.nan, 2.0, np.nan, np.nan],
                     [np.nan] * 6])
    np.testing.assert_array_equal(largest(rows), [[5.0, 5.0, 3.0, 2.0], [4.0, 2.0, 2.0, 2.0], [np.nan] * 4])


def plan_cost(why: str) -> float:
    return float(re.search(r"plan ([0-9.]+),", why).group(1))  # type: ignore[union-attr]


def test_the_plan_is_the_cheapest_shape_on_the_week_and_says_which(monkeypatch):
    s, chosen = VpaSettings(), []
    for seed in (1, 2):
        y = synthetic(seed)
        for k in range(8, 16):
            day = y.index[0].floor("D") + k * DAY
            past = y[y.index < day]
            d = DayPlanner(past, s, 3).decide(day, 0.05)
            with monkeypatch.context() as m:
                m.setattr(day_plan, "SHAPES", 1)
                peak = DayPlanner(past, s, 3).decide(day, 0.05)
            assert d.planned and peak.planned
            of = re.search(r"x[0-9.]+ of each hour's (peak|\dth|\dnd|\drd) ", d.why)
            assert of, d.why
            chosen.append(of.group(1))
            assert plan_cost(d.why) <= plan_cost(peak.why)
            if of.group(1) == "peak":
                assert d.why == peak.why
                np.testing.assert_array_equal(d.values, peak.values)
    assert "peak" in chosen and len(set(chosen)) >= 3  # the peak's plan wins some days, lower steps others
