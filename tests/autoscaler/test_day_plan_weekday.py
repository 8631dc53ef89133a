"""The restart regime's day plan reads a weekly tide (BENCHMARKS.md, "The same weekday counted three times in
the restart plan"): each hour's profile is the median of that hour's peaks on the last 7 days, the same
weekday a week back counted `SAME_WEEKDAY` times."""
import numpy as np
import pandas as pd

import autoscaler.logic.day_plan as day_plan
from autoscaler.logic.day_plan import DAY, DayPlanner
from autoscaler.settings import VpaSettings


def days_at_their_distance(planned: pd.Timestamp) -> pd.Series:
    """8 days of 5-minute samples, each day flat at how many days it lies before `planned`."""
    idx = pd.date_range(planned - 8 * DAY, planned, freq="5min", tz="UTC", inclusive="left")
    return pd.Series(((planned - idx.floor("D")) // DAY).astype(float), index=idx)


def test_the_same_weekday_a_week_back_has_three_votes_in_the_plans_median(monkeypatch):
    planned = pd.Timestamp("2026-10-09", tz="UTC")
    y = days_at_their_distance(planned)
    # peaks 1..7 by days back, the week back's 7 counted three times: the median of 1-7, 7, 7 is 5
    assert day_plan.SAME_WEEKDAY == 3
    np.testing.assert_array_equal(DayPlanner(y, VpaSettings(), 3).plan(planned), np.full(24, 5.0))
    monkeypatch.setattr(day_plan, "SAME_WEEKDAY", 1)  # the plain median of 1..7
    np.testing.assert_array_equal(DayPlanner(y, VpaSettings(), 3).plan(planned), np.full(24, 4.0))


def test_a_week_back_that_is_missing_leaves_the_median_of_the_other_days():
    planned = pd.Timestamp("2026-10-09", tz="UTC")
    y = days_at_their_distance(planned)
    y = y[(y.index < planned - 7 * DAY) | (y.index >= planned - 6 * DAY)]  # no sample of the week back's day
    np.testing.assert_array_equal(DayPlanner(y, VpaSettings(), 3).plan(planned), np.full(24, 3.5))  # 1..6
