"""The restart regime's day planner made cheap (issue 24's serving cost): the stock rule over a week
of hours at once (`logic/stock_rule.py`), the plans' profiles in one pass and `blocks` without its
Python loops must give the very floats, choices and reasons of the one-at-a-time code they replaced
(kept here as `Reference`), on real traces with gaps and on synthetic series with ties and jitter."""
from __future__ import annotations

import functools
import os
import warnings

import numpy as np
import pandas as pd
import pytest

from autoscaler.logic.day_plan import (DAY, LOOK, PROFILE_DAYS, SAME_WEEKDAY, SHAPES, STEP, DayPlanner, block_rows,
                                       blocks, nanmedian_rows)
from autoscaler.logic.plan_costs import FACTORS, multiplier, multipliers, violation
from autoscaler.logic.stock_rule import stock_at, stock_targets
from autoscaler.logic.vpa import vpa_default_request
from autoscaler.settings import VpaSettings
from tests.conftest import SHARED_DATA, needs_shared_data

NAB = ["realAWSCloudwatch/ec2_cpu_utilization_24ae8d", "realAWSCloudwatch/rds_cpu_utilization_cc0c53",
       "realAWSCloudwatch/elb_request_count_8c0756", "realKnownCause/nyc_taxi"]


def stock_one(y: pd.Series, t: pd.Timestamp) -> float:
    """The stock rule at one time, as the planner computed it before (one pandas mask a call)."""
    h = y[(y.index < t) & (y.index >= t - 8 * DAY)].dropna()
    return vpa_default_request(h.to_numpy(), (t - h.index).total_seconds().to_numpy() / 3600.0)


def blocks_loop(peaks: np.ndarray, n: int) -> np.ndarray:
    """`blocks` as written before: a Python loop per (start, end) and per (block, end)."""
    p = np.asarray(peaks, dtype=float)
    if not len(p) or not np.isfinite(p).any():
        return np.full(len(p), np.nan)
    p = np.where(np.isfinite(p), p, np.nanmax(p))
    m, n = len(p), max(1, min(int(n), len(p)))
    waste = np.full((m + 1, m + 1), np.inf)
    for i in range(m):
        top, total = -np.inf, 0.0
        for j in range(i + 1, m + 1):
            top, total = max(top, p[j - 1]), total + p[j - 1]
            waste[i, j] = top * (j - i) - total
    best, cut = np.full((n + 1, m + 1), np.inf), np.zeros((n + 1, m + 1), dtype=int)
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


class Reference(DayPlanner):
    """The planner with its previous, one-at-a-time parts: each hour's steps by pandas' resample,
    reindexed per day and shape, a median per day, the loop `blocks`, the stock rule hour by hour, usage
    by reindex."""

    @functools.cached_property
    def hour_steps(self) -> dict[int, pd.Series]:
        """Each hour's k-th largest sample (the smallest where it has fewer), k = 1..SHAPES."""
        def kth(v: pd.Series, k: int) -> float:
            x = np.sort(v.dropna().to_numpy())
            return float(x[max(len(x) - k, 0)]) if len(x) else np.nan

        hours = self.y.resample("1h")
        return {k: hours.apply(lambda v, k=k: kth(v, k)) for k in range(1, SHAPES + 1)}

    def _plan_days(self, days: list[pd.Timestamp]) -> None:
        for day in days:
            if day.value in self._plans:
                continue
            hours = day + pd.to_timedelta(np.arange(24), unit="h")
            plans = []
            for k in range(1, SHAPES + 1):
                past = np.column_stack([self.hour_steps[k].reindex(hours - d * DAY).to_numpy()
                                        for d in range(1, PROFILE_DAYS + 1)])
                enough = np.isfinite(past).sum(axis=1) >= 2
                votes = np.column_stack([past] + [past[:, 6]] * (SAME_WEEKDAY - 1))  # 7 days back: the same weekday's extra votes
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore", RuntimeWarning)  # an hour with no past peak
                    profile = np.where(enough, np.nanmedian(votes, axis=1) if enough.any() else np.nan, np.nan)
                plans.append(blocks_loop(profile, self.n))
            self._plans[day.value] = np.vstack(plans) if enough.any() else None

    def _stock_at(self, times: np.ndarray) -> np.ndarray:
        return np.array([stock_one(self.y, pd.Timestamp(h, tz="UTC")) for h in times.tolist()])

    def usage(self, *days: pd.Timestamp) -> np.ndarray:
        return np.concatenate([self.y.reindex(pd.date_range(day, day + DAY, freq=STEP, inclusive="left"))
                               .to_numpy(dtype=float) for day in days])


def synthetic(seed: int, days: int = 16, jitter: bool = False) -> pd.Series:
    """A tide with ties (values rounded), missing samples and a missing half day."""
    rng = np.random.default_rng(seed)
    idx = pd.date_range("2026-10-01", periods=days * 288, freq="5min", tz="UTC")
    t = np.arange(len(idx))
    v = np.round(3 + 2 * np.sin(2 * np.pi * t / 288) + rng.gamma(1.0, 0.5, len(idx)), 1)
    y = pd.Series(v, index=idx)
    y[rng.random(len(y)) < 0.05] = np.nan
    y = y.drop(y.index[1000:1150])
    if jitter:  # off any common grid: the stock rule falls back to one time at a time
        y.index = y.index + pd.to_timedelta(rng.integers(0, 7000, len(y)), unit="ms")
    return y


def nab(name: str) -> pd.Series:
    d = pd.read_csv(os.path.join(SHARED_DATA, "nab", name + ".csv"))
    return pd.Series(d["value"].to_numpy(dtype=float), index=pd.DatetimeIndex(pd.to_datetime(d["timestamp"]), tz="UTC"))


@pytest.mark.parametrize("seed,jitter", [(1, False), (2, False), (3, True)])
def test_the_stock_rule_over_many_hours_is_the_rule_at_each(seed, jitter):
    y = synthetic(seed, jitter=jitter)
    times = pd.date_range(y.index[0].floor("D") - DAY, periods=17 * 24 + 5, freq="1h")  # before, in, after
    got = stock_targets(y, times)
    want = np.array([stock_one(y, t) for t in times])
    np.testing.assert_array_equal(got, want)  # to the bit, NaN where no sample is in the window
    assert np.isnan(got[:24]).all() and np.isfinite(got[30:]).all()
    short = y.iloc[:40]  # a few hours of history
    np.testing.assert_array_equal(stock_targets(short, times[20:40]), [stock_one(short, t) for t in times[20:40]])


def test_the_stock_rule_at_a_time_long_before_the_samples_is_nan_without_a_table_that_long():
    """Off any common grid (milliseconds apart) and asked for a time 270 days before the first sample: the
    lag table would span 270 days in milliseconds (gigabytes); the rule goes one time at a time instead."""
    y = synthetic(3, days=9, jitter=True)
    assert np.isnan(stock_targets(y, pd.DatetimeIndex([y.index[0] - pd.Timedelta("270D")]))).all()


def test_the_stock_rule_of_many_series_at_once_is_each_ones():
    """`stock_at` (serve's hourly reads of a run, batched) gives each series' `stock_targets` at that time to
    the bit: on a shared grid with missing samples, ties and gaps; a short series; a microsecond index; and
    series it reads alone (off the grid, unsorted, repeated timestamps, no sample in the window)."""
    rng = np.random.default_rng(7)
    idx = pd.date_range("2026-10-01", periods=9 * 288, freq="5min", tz="UTC")
    t = idx[-1].floor("h")
    series = {}
    for i in range(40):
        y = pd.Series(np.round(rng.gamma(2, 1, len(idx)) * (1.5 + np.sin(np.arange(len(idx)) / 45.8)), 1), index=idx)
        if i % 3 == 0:
            y[rng.random(len(y)) < 0.1] = np.nan
        if i % 5 == 0:
            y = y.drop(y.index[2000:2100])  # a gap inside the window: a group of its own
        if i % 7 == 0:
            y.index = y.index.as_unit("us")
        series[f"s{i}"] = y
    series["short"] = series["s1"].iloc[-30:]
    series["jitter"] = synthetic(3, days=9, jitter=True)
    series["unsorted"] = series["s2"].iloc[::-1]
    series["repeated"] = pd.concat([series["s4"], series["s4"].iloc[-5:]]).sort_index()
    series["empty"] = series["s1"].iloc[:10] * np.nan
    got = stock_at(series, t.value)
    assert set(got) == set(series)
    for sid, y in series.items():
        want = stock_targets(y, pd.DatetimeIndex([t]))[0]
        assert got[sid] == want or (np.isnan(want) and np.isnan(got[sid])), sid
    assert np.isfinite([got[f"s{i}"] for i in range(40)]).all() and np.isnan(got["empty"])


def test_blocks_are_the_loop_blocks():
    rng = np.random.default_rng(5)
    for n in (1, 2, 3, 5, 24, 30):
        for _ in range(30):
            p = np.where(rng.random(24) < 0.1, np.nan, np.round(rng.gamma(2, 1, 24), 1))
            np.testing.assert_array_equal(blocks(p, n), blocks_loop(p, n))
    np.testing.assert_array_equal(blocks(np.full(24, np.nan), 3), blocks_loop(np.full(24, np.nan), 3))
    rows = np.where(rng.random((5, 24)) < 0.1, np.nan, np.round(rng.gamma(2, 1, (5, 24)), 1))
    rows[2] = np.nan  # a row without a plan among rows with one
    np.testing.assert_array_equal(block_rows(rows, 3), np.vstack([blocks_loop(r, 3) for r in rows]))


def same_decisions(y: pd.Series, days: list[pd.Timestamp]) -> int:
    """Every day's decision of the planner equals the reference's (values, choice, reason); how many planned."""
    s = VpaSettings()
    planned = 0
    for day in days:
        past = y[y.index < day]
        fast, ref = DayPlanner(past, s, 3), Reference(past, s, 3)
        a, b = fast.decide(day, 0.05), ref.decide(day, 0.05)
        assert (a.planned, a.why) == (b.planned, b.why), day
        np.testing.assert_array_equal(a.values, b.values)
        hour = day + pd.Timedelta("7h")
        assert fast.stock(hour) == ref.stock(hour) or np.isnan(ref.stock(hour))
        planned += a.planned
    return planned


@needs_shared_data
@pytest.mark.parametrize("name", NAB)
def test_day_plans_on_real_traces_are_unchanged(name):
    y = nab(name)
    start = y.index[0].floor("D")
    days = [start + k * DAY for k in (1, 3, 9, 10, 11)]
    same_decisions(y, [d for d in days if d < y.index[-1]])


def test_day_plans_on_synthetic_series_are_unchanged():
    for seed in (1, 2):
        y = synthetic(seed)
        assert DayPlanner(y, VpaSettings(), 3)._on_grid  # the hourly peaks read from the 12 steps of an hour
        days = [y.index[0].floor("D") + k * DAY for k in (2, 9, 12, 15)]
        assert same_decisions(y, days) >= 1


def test_day_plans_off_the_five_minute_grid_are_unchanged():
    """Samples off the grid (jittered) or finer than it (every minute): the hourly peaks come from the
    resample, not from the 12 steps of an hour, and the decisions are the reference's still."""
    y = synthetic(3, jitter=True)
    assert not DayPlanner(y, VpaSettings(), 3)._on_grid
    same_decisions(y, [y.index[0].floor("D") + k * DAY for k in (9, 12)])
    fine = synthetic(4)
    fine.index = fine.index[0] + (fine.index - fine.index[0]) / 5  # one sample a minute, the same values
    planner = DayPlanner(fine, VpaSettings(), 3)
    assert not planner._on_grid
    same_decisions(fine, [fine.index[0].floor("D") + k * DAY for k in (2, 3)])


def loop_multiplier(usage: np.ndarray, plan: np.ndarray, budget: float) -> float:
    """`multiplier` as written before: one factor at a time."""
    for f in FACTORS:
        if violation(usage, plan * f) <= budget:
            return f
    return FACTORS[-1]


def test_the_plans_calibration_tries_every_factor_at_once_with_the_same_answer():
    rng = np.random.default_rng(11)
    seen = set()
    for _ in range(300):
        u = np.round(rng.gamma(2, 1, 2016), 2)
        plan = np.round(u * rng.uniform(0.5, 1.3) + rng.gamma(1, 0.2, 2016), 2)  # a plan near the usage
        u[rng.random(2016) < 0.1], plan[rng.random(2016) < 0.05] = np.nan, np.nan
        budget = float(rng.choice([0.0, 0.01, 0.03, 0.05, 0.2]))
        got = multiplier(u, plan, budget)
        assert got == loop_multiplier(u, plan, budget)
        seen.add(got)
        negative = -plan  # a plan below 0 (no usage is): p x f then falls with f, and the same answer
        assert multiplier(-u, negative, budget) == loop_multiplier(-u, negative, budget)
        shapes = np.vstack([plan, plan * 0.9, np.full_like(plan, np.nan), -plan])  # rows at once, one without steps
        assert multipliers(u, shapes, budget) == [loop_multiplier(u, r, budget) for r in shapes]
    assert FACTORS[-1] in seen and len(seen) > 5  # the largest (none fits) and many in between
    nothing = np.full(10, np.nan)
    assert multiplier(nothing, np.ones(10), 0.05) == loop_multiplier(nothing, np.ones(10), 0.05) == FACTORS[-1]


def test_the_median_of_each_hours_past_peaks_is_numpys():
    rng = np.random.default_rng(3)
    x = np.round(rng.gamma(2, 1, (500, PROFILE_DAYS)), 1)  # ties
    x[rng.random(x.shape) < 0.3] = np.nan
    x[:7] = np.nan  # rows without a value
    x[7:14, :1] = 5.0
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        want = np.nanmedian(x, axis=1)
    np.testing.assert_array_equal(nanmedian_rows(x), want)  # to the bit, NaN where a row has none


class Counting(DayPlanner):
    """Counts the stock targets and the plans it works out itself."""

    def __init__(self, *a, **k) -> None:  # type: ignore[no-untyped-def]
        self.stock_hours = 0
        self.planned_days: list[int] = []
        super().__init__(*a, **k)

    def _stock_at(self, times: np.ndarray) -> np.ndarray:
        self.stock_hours += len(times)
        return super()._stock_at(times)

    def _plan_days(self, days: list[pd.Timestamp]) -> None:
        self.planned_days += [d.value for d in days if d.value not in self._plans]
        super()._plan_days(days)


@pytest.mark.parametrize("seed", [1, 2])
def test_a_planner_reading_yesterdays_memo_decides_as_a_fresh_one_and_works_out_one_day(seed):
    """Serve's new UTC day: the planner of yesterday's first run hands its week on (`memo`); today's
    planner reads 6 of its days and makes only today's plan and yesterday's stock targets, to the very
    decision a planner without the memo makes on the same samples. A memo keeps no stock targets of a
    day still under way, and one of another number of blocks is not read."""
    y, s = synthetic(seed), VpaSettings()
    for k in (9, 12, 15):
        day = y.index[0].floor("D") + k * DAY
        before = day - DAY + STEP  # yesterday's first run, 5 minutes past midnight
        prev = DayPlanner(y[y.index < before], s, 3)
        prev.decide(day - DAY, 0.05, stock_today=False)
        prev.stock_day(day - DAY)  # the day's stock targets worked out too, from its first 5 minutes
        memo = prev.memo(day - DAY)
        assert memo.has[-1, 0] and not memo.has[-1, 1]  # the day's plan; not its stock targets, short of samples
        assert memo.has[:-1].all()  # the 6 days before it: plans and stock targets
        origin = day + STEP
        seen = y[y.index < origin]
        fresh = Counting(seen, s, 3)
        carried = Counting(seen, s, 3, carried=memo)
        a, b = fresh.decide(day, 0.05, stock_today=False), carried.decide(day, 0.05, stock_today=False)
        assert (a.planned, a.why) == (b.planned, b.why)
        np.testing.assert_array_equal(a.values, b.values)
        assert fresh.stock_hours == LOOK * 24 and len(fresh.planned_days) == LOOK + 1
        assert carried.stock_hours == 24 and carried.planned_days == [day.value]  # yesterday's stock, today's plan
        other = Counting(seen, s, 2, carried=memo)
        other.decide(day, 0.05, stock_today=False)
        assert other.stock_hours == LOOK * 24 and len(other.planned_days) == LOOK + 1
