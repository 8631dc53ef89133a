"""The serve benchmark's new UTC day (`benchmarks/tidal_serve.py`, restart regime) hands each series the memo
a real yesterday would have left (`benchmarks.fleet.yesterdays_memo`), so the runs it times do a real new
day's work: one plan and one day of stock targets a series."""
import numpy as np
import pytest

from autoscaler.logic.day_plan import DAY, STEP, DayPlanner
from autoscaler.settings import VpaSettings
from benchmarks.fleet import yesterdays_memo
from tests.autoscaler.test_day_plan_vectorised import Counting, synthetic


@pytest.mark.parametrize("seed", [1, 2])
def test_the_new_day_memo_is_the_one_yesterdays_first_run_left(seed):
    y, s = synthetic(seed), VpaSettings()
    day = y.index[0].floor("D") + 12 * DAY
    prev = DayPlanner(y[y.index < day - DAY + STEP], s, 3)  # yesterday's first run, 5 minutes past midnight
    prev.decide(day - DAY, 0.05, stock_today=False)
    real = prev.memo(day - DAY)
    seen = y[y.index < day + STEP]
    now = DayPlanner(seen, s, 3)
    now.decide(day, 0.05, stock_today=False)
    made = yesterdays_memo(now.memo(day), seen, s)
    assert (made.n, made.last) == (real.n, real.last)
    for got, want in ((made.has, real.has), (made.plans, real.plans), (made.stock, real.stock)):
        np.testing.assert_array_equal(got, want)
    planner = Counting(seen, s, 3, carried=made)
    planner.decide(day, 0.05, stock_today=False)
    assert planner.stock_hours == 24 and planner.planned_days == [day.value]  # yesterday's stock, today's plan
