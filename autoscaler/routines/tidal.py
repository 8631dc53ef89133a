"""Tidal VPA requests in the serving loop (issue 24 items 2-4): what `tidewise replay vpa` decides, run
by run, when the registry's "vpa" decision-time model is the hour-peak model and fresh.

- In place: the model's raw quantiles of the next interval's peak at the decision's origin
  (`raw_at_origin`, every series deciding this run at once, no calibration walk), read at the series'
  `BudgetLevel`, the one replay's `HourPeakRequests` walks. Each series is decided once an interval
  (the model's span: an hour), as replay decides, at its own step of the interval (`slot`: a stable
  hash of its id, so a run decides about a twelfth of the fleet, not all of it), and at once when it
  has no request yet or its last one is an interval old. Between decisions its request holds, unless
  its newest sample is not the one just before the origin: then the model gives none and the
  day-ahead forecast's window max serves. Before reading, the level learns from the steps since the
  previous decision against the request that decision gave; it moves once an interval's worth of
  steps is seen (a step's verdict is kept as over/under until then). The seasonal rule competes
  (`logic/rule_choice.py`, `vpa.rule_candidate`): both requests are scored on the same steps, and on
  a UTC day the rule cost less over the series' last 7 days it serves, the level still learning from
  the model's own request.
- Restart: `logic/day_plan.DayPlanner`'s plan for the UTC day, decided once a day per series (the
  stock rule's hourly target when it won, re-read each hour at the series' own 5-minute step of it,
  `slot` of the hour, the previous hour's held until then, across midnight too; a run reads the series due
  at its step at once, `stock_rule.stock_at`); the change cap applies after it. A run makes
  at most `vpa.day_plans_per_run` plans of a new day: a series over that keeps the request it
  was last given (no change) until a later run plans it, so a new day's plans spread over its first
  runs. A series never planned is planned at once (`forecast_budget` already spreads those). Each
  choice keeps its planner's week (`PlanMemo`) and the stock targets it read through the day: the next
  day's planner reads both, so a new day costs one plan a series (and one day of stock targets where the
  plan served and none was read), not eight plans and seven days.

The levels and plans are the loop's state, kept between runs like the decision-time walks.
"""
from __future__ import annotations

import functools
import zlib
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from autoscaler.logic.day_plan import DAY, DayPlanner, PlanMemo
from autoscaler.logic.decide_vpa import TidalRequest
from autoscaler.logic.rule_choice import RuleChoice, describe_rule, rule_request
from autoscaler.logic.stock_rule import stock_at
from autoscaler.settings import VpaSettings
from predictor.history import History
from predictor.models.decision_time import DecisionTimeGBM
from predictor.pipeline.calibration import PEAK_LEVELS, BudgetLevel
from predictor.pipeline.decision import raw_at_origin
from predictor.timestamps import epoch_ns, position

HOUR, STEP = pd.Timedelta("1h"), pd.Timedelta("5min")  # the stock rule's targets: hourly, read on a 5-minute step
CONTEXT = pd.Timedelta("9D")  # history a raw forecast reads (a week ago + a day of level); serve fetches 8d
HOUR_PEAK = "hour_peak"  # the DecisionTimeGBM features serve's VPA reads


@dataclass
class SeriesLevel:
    """One series' budget level and what it still has to learn from."""

    level: BudgetLevel
    last: tuple[pd.Timestamp, float] | None = None  # the previous decision's origin and request
    pending: list[bool] = field(default_factory=list)  # steps seen since the level last moved: over?
    # the raw quantiles at the latest origin: a loop running every minute on a 5-minute step asks
    # for the same origin five times (the features over 9 days are most of a run's cost per series)
    raw: tuple[pd.Timestamp, np.ndarray | None] | None = None
    choice: RuleChoice = field(default_factory=RuleChoice)  # the model or the seasonal rule, once a UTC day
    served: TidalRequest | None = None  # the latest decision's request, held until the next
    held: tuple[DecisionTimeGBM, TidalRequest] | None = None  # served, as the runs between decisions give it


@dataclass
class DayChoice:
    """One series' restart-regime decision for a UTC day."""

    day: pd.Timestamp
    values: np.ndarray | None  # the plan's hourly requests (None: the stock rule serves, hour by hour)
    why: str
    stock: dict[pd.Timestamp, float] = field(default_factory=dict)  # hour -> the stock target, once an hour
    memo: PlanMemo | None = None  # the week's plans and stock targets, read again by the next day's plan
    stock_factor: float = 1.0  # on the stock rule's targets where it serves (autoscaler.logic.day_plan)
    # the stock targets of the day's hours as read (before the factor; NaN: not read), the next day's
    # planner's row for this day when every hour was read: not worked out again after midnight
    hourly: np.ndarray = field(default_factory=lambda: np.full(24, np.nan))
    # the request as the runs of an hour give it, built once: (the hour, the hour its value is of, it)
    served: tuple[pd.Timestamp, pd.Timestamp, TidalRequest] | None = None

    @property
    def last(self) -> float | None:
        """The request last given (held while the next day's plan waits); None before the first."""
        return None if self.served is None else self.served[2].value

    def week(self, day: pd.Timestamp) -> PlanMemo | None:
        """What `day`'s planner reads of this choice: its memo, with this day's stock targets when it is
        the day before and each of its hours was read."""
        if self.memo is None or self.day != day - DAY or not np.isfinite(self.hourly).all():
            return self.memo
        return self.memo.with_last_stock(self.hourly)


@dataclass
class TidalServing:
    """The loop's tidal state: a budget level and a day plan per series."""

    levels: dict[str, SeriesLevel] = field(default_factory=dict)
    plans: dict[str, DayChoice] = field(default_factory=dict)
    # the raw quantiles of the series deciding at the latest origin, made at once (`raw_at_origin`):
    # per series the features and trees would cost ~10 ms, over 20,000 series minutes a run
    batch: tuple[pd.Timestamp, dict[str, tuple[np.ndarray, float]]] | None = None

    def run(self, model: DecisionTimeGBM, version: str, history: History, origin: pd.Timestamp,
            settings: VpaSettings) -> "TidalRun":
        """This run's requests (series no longer fetched forget their state)."""
        for d in (self.levels, self.plans):
            for sid in [k for k in d if k not in history.series]:
                del d[sid]
        return TidalRun(self, model, version, history, origin, settings)


@dataclass
class TidalRun:
    """This run's tidal requests (`logic.decide_vpa.TidalRequests`)."""

    state: TidalServing
    model: DecisionTimeGBM
    version: str
    history: History
    origin: pd.Timestamp
    settings: VpaSettings
    made: int = 0  # day plans made this run (vpa.day_plans_per_run)
    stock_reads: dict[str, float] | None = None  # this hour's stock targets read this run (`_stock_read`)

    @functools.cached_property
    def day(self) -> pd.Timestamp:
        return self.origin.floor("D")

    @functools.cached_property
    def hour(self) -> pd.Timestamp:
        return self.origin.floor("h")

    @property
    def every(self) -> pd.Timedelta:
        return int(self.model.span) * self.model.step_  # type: ignore[no-any-return]

    def request(self, sid: str, in_place: bool, budget: float) -> tuple[TidalRequest | None, str]:
        y = self.history.series.get(sid)
        if y is None:
            return None, ""
        if in_place:  # a pandas mask costs about a millisecond a series: the in-place path reads by position
            return self._hour_peak(sid, y, budget)
        return self._day_plan(sid, y, budget)

    def for_life(self, sid: str, budget: float, life: pd.Timedelta) -> tuple[TidalRequest | None, str]:
        """A request kept for a pod's whole life (updateMode Initial, and Off, which recommends it): the
        restart regime's day plan at its highest hour over the next `life` (the plan of a day stands for
        the next: a life of a day or more reads all of it), or, on a day the stock rule serves, its target
        (8 days' p90 + 15%, the stock VPA's request for a pod's life)."""
        y = self.history.series.get(sid)
        if y is None:
            return None, ""
        hourly, why_not = self._day_plan(sid, y, budget)
        choice = self.state.plans.get(sid)
        if hourly is None or choice is None:
            return hourly, why_not
        if choice.values is None:
            return TidalRequest(hourly.value, "day_plan", None, (
                f"the stock rule's target (8 days' p90 + 15%, made to hold for a pod's life), as the restart "
                f"regime reads it: {hourly.why.removeprefix('restart regime: ')}")), ""
        hours = min(24, max(1, int(np.ceil(life / HOUR))))
        ahead = choice.values[(self.hour.hour + np.arange(hours)) % 24]
        if not np.isfinite(ahead).any():
            return hourly, why_not
        value = float(np.nanmax(ahead))
        return TidalRequest(max(value, 0.0), "day_plan", None, (
            f"the day plan's highest hour over the next {hours} h from {self.hour:%H}:00 UTC: {choice.why}")), ""

    def _hour_peak(self, sid: str, y: pd.Series, budget: float) -> tuple[TidalRequest | None, str]:
        m, origin = self.model, self.origin
        name = f"hour_peak_{m.backend}"
        label = f"{name}@{self.version}"
        s = self.state.levels.get(sid)
        if s is None:
            s = self.state.levels[sid] = SeriesLevel(BudgetLevel(budget))
        s.level.budget = float(budget)
        fresh = len(y) > 0 and position(y.index, origin - m.step_) < len(y)  # a sample since origin - step
        if fresh and s.last is not None and s.served is not None and not self.due(sid, s.last[0]):
            if s.held is None or s.held[0] is not m:  # built once a decision (11 of 12 runs read it)
                t0, served = s.last[0], s.served
                why = (f"{served.why}; decided at {t0:%H:%M} UTC, held until its next "
                       f"decision at {self.next_decision(sid, t0):%H:%M} (one an interval)")
                s.held = (m, TidalRequest(served.value, served.label, served.quantile, why))
            return s.held[1], ""
        s.held = None
        self._learn(s, y)
        if s.raw is None or s.raw[0] != origin:
            made = self._batched(sid).get(sid) if fresh else None
            s.raw = (origin, None if made is None else made[0])
        raw = s.raw[1]
        if raw is None:
            s.last = s.choice.last = s.served = None
            last = y.index[-1] if len(y) else None
            return None, (f"{name}: no forecast at {origin} (newest sample {last}): "
                          f"the day-ahead forecast's window max serves")
        request = max(s.level.request(raw, m.quantiles), 0.0)
        s.last = (origin, request)
        s.served = TidalRequest(request, label, s.level.tau, s.level.describe(label, self.every))
        if self.settings.rule_candidate:
            rule = rule_request(y.to_numpy(dtype=float), epoch_ns(y.index), origin.value, self.every.value)
            value, is_rule = s.choice.decide(origin.value, request, rule, budget)
            if is_rule:
                minutes = int(self.every / pd.Timedelta("1min"))
                s.served = TidalRequest(max(value, 0.0), "seasonal_rule", 0.5, describe_rule(s.choice, minutes))
        return s.served, ""

    def slot(self, sid: str, span: int | None = None) -> int:
        """The series' own step of the interval (of `span` steps; default the model's), where its decisions
        fall (stable across runs and restarts)."""
        return zlib.crc32(sid.encode()) % (span or int(self.model.span))

    def _position(self, t: pd.Timestamp) -> int:
        return int(t.value // self.model.step_.value) % int(self.model.span)

    def due(self, sid: str, decided: pd.Timestamp) -> bool:
        """Whether a series last decided at `decided` is decided at this origin: an interval since, or
        its slot (a decision at this very origin is read again, not made again)."""
        o = self.origin
        return o == decided or o - decided >= self.every or (o > decided and self._position(o) == self.slot(sid))

    def next_decision(self, sid: str, decided: pd.Timestamp) -> pd.Timestamp:
        """When a series decided at `decided` is decided next: its slot's next step, within an interval."""
        span = int(self.model.span)
        ahead = (self.slot(sid) - self._position(decided)) % span or span
        return decided + ahead * self.model.step_  # type: ignore[no-any-return]

    def _batched(self, sid: str) -> dict[str, tuple[np.ndarray, float]]:
        """The raw quantiles at this origin of `sid` and of every series deciding with it, made at once:
        the known series due now, and when `sid` is new, every series no run has asked about yet."""
        st = self.state
        if st.batch is None or st.batch[0] != self.origin:
            st.batch = (self.origin, {})
        made = st.batch[1]
        if sid not in made:
            series = self.history.series
            want = {k for k, lv in st.levels.items()
                    if k in series and k not in made and (lv.last is None or self.due(k, lv.last[0]))}
            if st.levels[sid].last is None:  # new (or fresh again): others no run asked about follow it
                want |= {k for k in series if k not in st.levels and k not in made}
            want.add(sid)
            made.update(raw_at_origin(self.model, {k: series[k] for k in want}, self.origin, fresh_only=True))
        return made

    def _stock_due(self, sid: str, held: dict[pd.Timestamp, float]) -> bool:
        """Whether a series the stock rule serves reads this hour's target now: at its own step of the
        hour, so that the fleet's reads (~0.6 ms each) spread over the hour instead of piling on its
        first run; at once when it holds none of the hour before (new today, or runs were missed)."""
        if next(iter(held), None) != self.hour - HOUR:
            return True
        return (self.origin - self.hour) // STEP >= self.slot(sid, HOUR // STEP)

    def _reads_stock(self, sid: str, choice: DayChoice) -> bool:
        """Whether a series on this day's choice reads the hour's stock target in this run: the stock rule
        serves it, and it holds none of this hour yet and is due one (`_stock_due`)."""
        return (choice.day == self.day and choice.values is None and self.hour not in choice.stock
                and self._stock_due(sid, choice.stock))

    def _stock_read(self, sid: str, y: pd.Series) -> float:
        """This hour's stock target of `sid`. The run's first read reads every series due one at once
        (`stock_at`: ~1,000 a run at 10,000 workloads, a third to two thirds of the cost one at a time); a series whose
        day was chosen later in the run is read alone."""
        if self.stock_reads is None:
            series = self.history.series
            due = {k: series[k] for k, c in self.state.plans.items() if k in series and self._reads_stock(k, c)}
            self.stock_reads = stock_at({**due, sid: y}, self.hour.value)
        if sid not in self.stock_reads:
            self.stock_reads.update(stock_at({sid: y}, self.hour.value))
        return self.stock_reads[sid]

    def _learn(self, s: SeriesLevel, y: pd.Series) -> None:
        """The steps since the previous decision against its request; the level moves per interval."""
        if s.last is not None:
            t0, r0 = s.last
            lo, hi = position(y.index, t0), position(y.index, self.origin)
            seen = y.to_numpy(dtype=float)[lo:hi]
            s.pending.extend(bool(v > r0) for v in seen[np.isfinite(seen)])
            s.choice.observe(seen)
        if len(s.pending) >= int(self.model.span):
            s.level.observe_over(np.asarray(s.pending, dtype=bool))
            s.pending.clear()

    def _day_plan(self, sid: str, y: pd.Series, budget: float) -> tuple[TidalRequest | None, str]:
        day, hour = self.day, self.hour  # once a run, not once a series
        choice = self.state.plans.get(sid)
        if choice is None or choice.day != day:  # a planner only on a new day (most runs read a kept plan)
            cap = self.settings.day_plans_per_run
            if choice is not None and choice.last is not None and self.made >= cap:  # a later run plans it
                return TidalRequest(choice.last, "day_plan", None, (
                    f"restart regime: the day plan for {day.date()} waits for a later run ({self.made} plans made "
                    f"this run, vpa.day_plans_per_run {cap}): the request of {choice.day.date()} holds "
                    f"({choice.why})")), ""
            near = y.iloc[position(y.index, self.origin - CONTEXT): position(y.index, self.origin)]  # sorted
            # the week kept by yesterday's choice: a new day makes one plan (and one day of stock targets where
            # they were not read)
            planner = DayPlanner(near, self.settings, self.settings.max_changes_per_day,
                                 carried=None if choice is None else choice.week(day))
            d = planner.decide(day, budget, stock_today=False)
            self.made += 1
            # the stock rule again: the hour it read last (23:00) holds until the series' step of the new hour
            held = {} if choice is None or d.planned else choice.stock
            choice = self.state.plans[sid] = DayChoice(day, d.values if d.planned else None, d.why, stock=held,
                                                       memo=planner.memo(day), stock_factor=d.stock_factor)
        if self._reads_stock(sid, choice):
            choice.hourly[hour.hour] = target = self._stock_read(sid, y)
            choice.stock = {hour: target * choice.stock_factor}
        if choice.values is None:
            at, value = next(iter(choice.stock.items()))
        else:
            at, value = hour, float(choice.values[hour.hour])
        if choice.served is not None and choice.served[:2] == (hour, at):  # this hour's, as an earlier run gave it
            return choice.served[2], ""
        if not np.isfinite(value):
            return None, f"restart regime: no day plan nor stock target for {day.date()} ({choice.why})"
        what = "the stock rule's target" if choice.values is None else "the day plan's request"
        later = "" if at == hour else (f" (the {hour:%H}:00 one is read at this series' step of the hour, "
                                       f"{hour + self.slot(sid, HOUR // STEP) * STEP:%H:%M})")
        why = f"restart regime: {what} for {at:%H}:00 UTC{later}: {choice.why}"
        request = TidalRequest(max(value, 0.0), "day_plan", None, why)
        choice.served = (hour, at, request)
        return request, ""
