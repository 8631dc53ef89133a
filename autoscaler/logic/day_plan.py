"""The restart regime's day plan (issue 24 item 4): where every request change restarts a pod, a day is
planned in at most N blocks — up before the peak, down after it — from a forecast of its hourly peaks.

Pure: arrays in, arrays out. `blocks` cuts a day's hourly peaks into at most `n` contiguous blocks,
each at its own highest hour, wasting least (the sum of block level - peak over the hours; dynamic
programming over cut points, 24 hours x n blocks). The plan's calibration (`multipliers`: the smallest
factor on the plan whose steps over the request, on the recent days replayed, stay within the budget) and
the `cost` the choice between the plan and the stock rule compares are `plan_costs`'. `DayPlanner` puts them
together for one series: each UTC day, N-block plans from the median of each hour's peak, and of its
2nd..`SHAPES`-th largest step, on the last 7 days (the same weekday a week back counted `SAME_WEEKDAY`
times: a weekly tide), each scaled to keep the last week within `PLAN_SHARE` of the budget (a plan fixed
for a day cannot react within it, so it is calibrated below the budget), the one that cost least on that
week (its days weighted by recency, `HALF_LIFE`, in every factor and cost); or the stock VPA's hourly
target, calibrated the same way but never above its own level (`stock_factor`), whichever cost less
on that week; the reason shows both costs. Replay
(`studies/replay/day_plan.py`) and serve's restart regime read it.
"""
from __future__ import annotations

import functools
from dataclasses import dataclass

import numpy as np
import pandas as pd

from autoscaler.logic.plan_costs import FACTORS, HALF_LIFE, cost, multipliers, recency, stock_factor
from autoscaler.logic.stock_rule import stock_targets_ns
from autoscaler.settings import VpaSettings
from predictor.timestamps import epoch_ns

DAY = pd.Timedelta("1D")
STEP = pd.Timedelta("5min")
HOUR_NS = pd.Timedelta("1h").value
PROFILE_DAYS = 7  # the plan's hourly peaks: the median of the same hour on this many past days
# ... in which the same weekday a week back counts this many times: a weekly tide (a quiet weekend, a busy
# Monday) shows in the plan, where the plain median let the 5 other days outvote it. Measured on both suites
# along the budget curve (BENCHMARKS.md, "The same weekday counted three times in the restart plan"); 1 is the
# plain median
SAME_WEEKDAY = 3
# each hour's k-th largest 5-minute step, k = 1..SHAPES (the peak, then the 2nd largest ...; the smallest
# where the hour has fewer steps): a plan of each, the one that cost least on the week chosen. A lower step
# is not set by a spike or two within the hour, so it fits a series whose peaks come and go. Measured on both
# suites along the budget (BENCHMARKS.md, "The plan's shape chosen per series")
SHAPES = 4
LOOK = 7  # days of the series' own past the plan is calibrated and chosen on
PLAN_SHARE = 0.6  # the plan is calibrated to this share of the budget on its last week


def blocks(peaks: np.ndarray, n: int) -> np.ndarray:
    """`peaks` (one per hour; NaN: unknown, taken as the day's highest) as at most `n` flat blocks."""
    return block_rows(np.asarray(peaks, dtype=float)[None, :], n)[0]


def block_rows(peaks: np.ndarray, n: int) -> np.ndarray:
    """`blocks` of each row of `peaks` [rows, hours], every row at once (a row without a finite value: NaN)."""
    p = np.asarray(peaks, dtype=float)
    out = np.full(p.shape, np.nan)
    live = np.isfinite(p).any(axis=1)
    if not p.shape[1] or not live.any():
        return out
    q = p[live]
    q = np.where(np.isfinite(q), q, np.nanmax(q, axis=1, keepdims=True))
    rows, m, n = len(q), q.shape[1], max(1, min(int(n), q.shape[1]))
    # waste[r, i, j]: hours i..j-1 as one block. Row i holds p from hour i on (0 before it for the sum,
    # -inf for the max), so the running sums and maxima are the ones a loop over j from i adds up
    # (0.0 + x is x): the same floats in a few numpy calls instead of 300 Python steps a row
    later = np.arange(m)[None, :] >= np.arange(m)[:, None]
    top = np.maximum.accumulate(np.where(later, q[:, None, :], -np.inf), axis=2)
    total = np.cumsum(np.where(later, q[:, None, :], 0.0), axis=2)
    waste = np.full((rows, m + 1, m + 1), np.inf)
    with np.errstate(invalid="ignore"):  # -inf x 0 before hour i, masked
        waste[:, :m, 1:] = np.where(later, top * (np.arange(1, m + 1)[None, :] - np.arange(m)[:, None]) - total, np.inf)
    best = np.full((rows, n + 1, m + 1), np.inf)
    cut = np.zeros((rows, n + 1, m + 1), dtype=int)
    best[:, 0, 0] = 0.0
    for b in range(1, n + 1):  # every end j at once: waste is inf for i >= j, so argmin stays below j
        c = best[:, b - 1, :, None] + waste[:, :, 1:]
        cut[:, b, 1:] = np.argmin(c, axis=1)
        best[:, b, 1:] = np.take_along_axis(c, cut[:, b, None, 1:], axis=1)[:, 0]
    planned = np.empty((rows, m))
    for r in range(rows):
        b, j = int(np.argmin(best[r, 1:, m])) + 1, m
        while j > 0:
            i = cut[r, b, j]
            planned[r, i:j] = np.max(q[r, i:j])
            j, b = i, b - 1
    out[live] = planned
    return out


def nanmedian_rows(x: np.ndarray) -> np.ndarray:
    """`np.nanmedian(x, axis=1)` without its warning (NaN for a row of NaN), the same floats: the middle
    of each row's sorted finite values, or the mean of the two middle ones (a sum halved, as numpy
    does). numpy's own goes through masked arrays for a short row: ~7x slower."""
    s = np.sort(x, axis=1)  # NaN last
    count = np.isfinite(s).sum(axis=1)
    hi = np.minimum(count // 2, x.shape[1] - 1)
    lo = np.maximum(np.where(count % 2 == 1, hi, hi - 1), 0)
    rows = np.arange(len(x))
    return np.where(count > 0, (s[rows, lo] + s[rows, hi]) / 2.0, np.nan)  # type: ignore[no-any-return]


@dataclass(frozen=True)
class DayDecision:
    """A UTC day's restart-regime choice: its hourly requests (None: no plan and no stock target, or the
    stock rule's not asked for), whether the plan was chosen (else the stock rule, hour by hour), and why."""

    values: np.ndarray | None
    planned: bool
    why: str
    stock_factor: float = 1.0  # on the stock rule's hourly targets, where it serves (`stock_factor`)


@dataclass(frozen=True)
class PlanMemo:
    """What a planner worked out that the next day's decision reads again, kept compact between days
    (serve holds one per restart-regime series): the plans and the hourly stock targets of the `LOOK`
    days up to `last`, row k for day `last - (LOOK - 1 - k)` days (a plan row of NaN: no plan; `has`
    says which rows were worked out). A day's plans are one per shape (`SHAPES`)."""

    n: int  # the plan's blocks: a memo of another `max_changes_per_day` is not read
    last: int  # the newest day's nanoseconds
    plans: np.ndarray  # LOOK x SHAPES x 24
    stock: np.ndarray  # LOOK x 24
    has: np.ndarray  # LOOK x 2 (plan, stock) bool

    def days(self) -> range:
        """The rows' days (nanoseconds), oldest first."""
        return range(self.last - (LOOK - 1) * DAY.value, self.last + 1, DAY.value)

    def with_last_stock(self, hourly: np.ndarray) -> PlanMemo:
        """This memo with the stock targets of its newest day, `last` (serve reads them hour by hour as the
        day goes, where the stock rule serves): the next day's planner reads them instead of working them out."""
        stock, has = self.stock.copy(), self.has.copy()
        stock[-1], has[-1, 1] = hourly, True
        for a in (stock, has):
            a.flags.writeable = False
        return PlanMemo(self.n, self.last, self.plans, stock, has)


class DayPlanner:
    """One series' restart-regime requests, day by day (plans and stock targets memoised).

    `carried`: an earlier planner's memo of the same series (`memo`); what it holds is read, not
    worked out again (serve's new day: all but the day's plan and yesterday's stock targets)."""

    def __init__(self, y: pd.Series, settings: VpaSettings, n: int, carried: PlanMemo | None = None) -> None:
        self.y, self.settings = y, settings
        self.n = max(1, n)  # every change a day is the plan's (keeping one back for a raise measured worse)
        self._plans: dict[int, np.ndarray | None] = {}  # by the day's nanoseconds: SHAPES x 24
        self._stock: dict[int, np.ndarray] = {}  # by the day's nanoseconds: the target at each hour
        if carried is not None and carried.n == self.n:
            for k, day in enumerate(carried.days()):
                if carried.has[k, 0]:
                    plan = carried.plans[k]
                    self._plans[day] = None if np.isnan(plan).all() else plan
                if carried.has[k, 1]:
                    self._stock[day] = carried.stock[k]

    def memo(self, day: pd.Timestamp) -> PlanMemo:
        """For `day`'s next day: the plans of the `LOOK` days up to `day`, and the stock targets of those
        before it (`day` itself is under way when it is decided: its targets would miss samples)."""
        plans, stock = np.full((LOOK, SHAPES, 24), np.nan), np.full((LOOK, 24), np.nan)
        has = np.zeros((LOOK, 2), dtype=bool)
        memo = PlanMemo(self.n, day.value, plans, stock, has)
        for k, d in enumerate(memo.days()):
            if d in self._plans:
                has[k, 0] = True
                if self._plans[d] is not None:
                    plans[k] = self._plans[d]
            if d in self._stock and d < day.value:
                has[k, 1], stock[k] = True, self._stock[d]
        for a in (plans, stock, has):  # read by the next day's planner as its own: never changed
            a.flags.writeable = False
        return memo

    # built on first use, off the grid only: serve's hourly stock target reads none of it
    @functools.cached_property
    def _shapes_at(self) -> list["_Lookup"]:
        """Each hour's k-th largest sample, k = 1..SHAPES (lookups by int64 nanoseconds)."""
        y = self.y.dropna()
        hours = y.groupby(y.index.floor("h")).apply(lambda v: largest(v.to_numpy()[None, :])[0])
        table = np.vstack(hours.to_numpy()) if len(hours) else np.empty((0, SHAPES))
        return [_Lookup(pd.Series(table[:, k], index=hours.index)) for k in range(SHAPES)]

    @functools.cached_property
    def _y_at(self) -> "_Lookup":
        return _Lookup(self.y)

    @functools.cached_property
    def _on_grid(self) -> bool:
        """Every sample on the 5-minute grid and hours in UTC: an hour's peak is the max of its 12 steps."""
        tz = getattr(self.y.index, "tz", None)
        return (tz is None or str(tz) == "UTC") and not (self._y_at.ns % STEP.value).any()

    def _peaks_at(self, hours: np.ndarray) -> np.ndarray:
        """[hours, SHAPES]: the k-th largest samples of the hours starting at `hours` (ns), NaN for an hour
        without one; read from the samples when they sit on the grid (12 a UTC hour)."""
        if not self._on_grid:
            return np.column_stack([at(hours) for at in self._shapes_at])
        steps = self._y_at((hours[:, None] + np.arange(HOUR_NS // STEP.value, dtype=np.int64) * STEP.value).ravel())
        return largest(steps.reshape(len(hours), -1))

    def plan(self, day: pd.Timestamp, shape: int = 1) -> np.ndarray | None:
        """The day's N-block plan of each hour's `shape`-th largest step (1: its peak), before calibration
        (None: under 2 past days)."""
        self._plan_days([day])
        plans = self._plans[day.value]
        return None if plans is None else plans[shape - 1]

    def _plan_days(self, days: list[pd.Timestamp]) -> None:
        """The plans not yet known among `days`, their hourly profiles in one nanmedian (~0.6 ms a call)."""
        todo = [d.value for d in days if d.value not in self._plans]
        if not todo:
            return
        hours = (np.asarray(todo, dtype=np.int64)[:, None] + np.arange(24, dtype=np.int64) * HOUR_NS).ravel()
        back = np.arange(1, PROFILE_DAYS + 1, dtype=np.int64) * DAY.value
        past = self._peaks_at((hours[:, None] - back[None, :]).ravel()).reshape(len(hours), PROFILE_DAYS, SHAPES)
        enough = np.isfinite(past[:, :, 0]).sum(axis=1) >= 2  # a step of an hour is finite where its peak is
        weekday = past[:, [6] * (SAME_WEEKDAY - 1)]  # column 6, 7 days back: the same weekday's extra votes
        votes = np.concatenate([past, weekday], axis=1).transpose(0, 2, 1).reshape(-1, PROFILE_DAYS + SAME_WEEKDAY - 1)
        medians = nanmedian_rows(votes).reshape(len(hours), SHAPES)  # an hour with no past peak is NaN
        for k, day in enumerate(todo):
            ok = enough[24 * k: 24 * (k + 1)]
            profiles = np.where(ok[:, None], medians[24 * k: 24 * (k + 1)], np.nan)
            self._plans[day] = block_rows(profiles.T, self.n) if ok.any() else None

    def stock(self, t: pd.Timestamp) -> float:
        """The stock VPA's target at `t` (8 days, 24 h half-life, p90 + 15%)."""
        return float(self._stock_at(np.asarray([t.value], dtype=np.int64))[0])

    def stock_day(self, day: pd.Timestamp) -> np.ndarray:
        """The stock target at each hour of `day`."""
        self._fill([day.value])
        return self._stock[day.value]

    def _fill(self, days: list[int]) -> None:
        """The stock targets of the days (ns) not yet known, every hour of them at once."""
        todo = [d for d in days if d not in self._stock]
        if todo:
            got = self._stock_at((np.asarray(todo, dtype=np.int64)[:, None]
                                  + np.arange(24, dtype=np.int64) * HOUR_NS).ravel())
            self._stock.update(zip(todo, got.reshape(len(todo), 24)))

    def _stock_at(self, times: np.ndarray) -> np.ndarray:
        """The stock targets at `times` (ns) in one pass (`stock_rule`: a week's 168 hours cost 2.5 ms a
        series, one by one 90 ms)."""
        return stock_targets_ns(self.y, times)

    def usage(self, *days: pd.Timestamp) -> np.ndarray:
        """The days' usage on the 5-minute grid, one day after the other (NaN where missing)."""
        start = np.asarray([d.value for d in days], dtype=np.int64)
        return self._y_at((start[:, None] + np.arange(DAY // STEP, dtype=np.int64) * STEP.value).ravel())

    def decide(self, day: pd.Timestamp, budget: float, stock_today: bool = True) -> DayDecision:
        """The day's choice between its plan and the stock rule (`stock_today` False: the stock rule's
        hourly targets of the day are not worked out — serve reads each hour's when it comes)."""
        past = [day - d * DAY for d in range(1, LOOK + 1)]
        self._plan_days([day, *past])
        week = [(d, p) for d in past if (p := self._plans[d.value]) is not None]  # the days planned: SHAPES x 24
        today = self._plans[day.value]
        if today is None or not week:
            return DayDecision(self.stock_day(day) if stock_today else None, False,
                               "no day plan yet (under 2 days of peaks): the stock rule")
        days = [d for d, _ in week]
        u, w = self.usage(*days), recency([(day - d) // DAY for d in days])
        s = self.settings
        planned = np.concatenate([np.repeat(p, 12, axis=1) for _, p in week], axis=1)
        plan_cost, shape, factor = np.inf, 1, FACTORS[-1]
        # each shape calibrated and costed on the weighted week; the cheapest (ties: the lower k, the peak first)
        for k, f in enumerate(multipliers(u, planned, PLAN_SHARE * budget, w), start=1):
            c = cost(u, planned[k - 1] * f, len(set(today[k - 1])), s.violation_weight, s.change_weight, w)
            if c < plan_cost or k == 1:
                plan_cost, shape, factor = c, k, f
        plan = today[shape - 1]
        self._fill([d.value for d in days])  # the week at once
        stocked = np.concatenate([np.repeat(self.stock_day(d), 12) for d in days])
        # the stock rule calibrated as the plan is, never above its own level (`stock_factor`)
        lean = stock_factor(u, stocked, PLAN_SHARE * budget, w)
        stock_cost = cost(u, stocked * lean, 1.0, s.violation_weight, s.change_weight, w)
        costs = f"cost on the last {len(days)} d, half-life {HALF_LIFE:g} d: plan {plan_cost:.3f}, stock {stock_cost:.3f}"
        if plan_cost <= stock_cost or not np.isfinite(stock_cost):
            of = "each hour's peak" if shape == 1 else f"each hour's {_ordinal(shape)} largest step"
            return DayDecision(plan * factor, True, f"day plan in {len(set(plan))} block(s) x{factor:g} of {of} ({costs})")
        scaled = "" if lean == 1.0 else f" x{lean:g}"
        return DayDecision(self.stock_day(day) * lean if stock_today else None, False,
                           f"the stock rule{scaled} ({costs})", lean)


def _ordinal(k: int) -> str:
    return f"{k}{ {2: 'nd', 3: 'rd'}.get(k, 'th')}"  # 2nd, 3rd, 4th ... (k <= 20, as SHAPES is)


def largest(steps: np.ndarray) -> np.ndarray:
    """[rows, SHAPES]: each row's 1st..SHAPES-th largest finite value (the smallest where the row has
    fewer; NaN where it has none)."""
    s = np.sort(steps, axis=1)  # NaN last
    count = np.isfinite(s).sum(axis=1)
    at = np.clip(count[:, None] - np.arange(1, SHAPES + 1)[None, :], 0, None)
    return np.where(count[:, None] > 0, np.take_along_axis(s, at, axis=1), np.nan)  # type: ignore[no-any-return]


class _Lookup:
    """`y.reindex(times).to_numpy(dtype=float)` for a series with unique timestamps, by binary search."""

    def __init__(self, y: pd.Series) -> None:
        ns = epoch_ns(y.index)
        order = np.argsort(ns, kind="stable")  # already sorted in serve and replay: no cost
        self.ns, self.values = ns[order], y.to_numpy(dtype=float)[order]

    def __call__(self, t: np.ndarray) -> np.ndarray:
        """The values at `t` (int64 nanoseconds; NaN where there is no sample)."""
        pos = np.minimum(np.searchsorted(self.ns, t), max(len(self.ns) - 1, 0))
        found = (self.ns[pos] == t) if len(self.ns) else np.zeros(len(t), dtype=bool)
        return np.where(found, self.values[pos] if len(self.ns) else np.nan, np.nan)
