"""The tide policies: each minute, which whole nodes go to batch (lend) and which come back (return).

A policy sees what was measured in the minute that just ended (`PoolView`: the online pods'
requested cores, the nodes they need, every node's side and pods) and returns moves; the engine
applies them from the next minute. Which node moves is the serving loop's rule for every policy
(`pick`, as `autoscaler.logic.tide.plan_pool` picks): a return takes the lent node with the fewest
batch pods, a lend the online node with the fewest online pods.

- `watermark` (Katalyst's reactive rule): the online side's utilisation u = requested cores /
  online allocatable (handed-back nodes on their way count); u < low lends one node a minute,
  u > high hands back at once as many nodes as bring u to the middle of the band.
- `schedule` (as teams do by hand): during fixed hours of the simulated clock (a window ending at
  06:00), lend the nodes the history days never needed in those hours, less one spare; hand all
  back at the window's end.
- `tidewise`: the serving loop's own plan (`plan_pool`) on the hourly forecast of the pool's
  requested cores: nodes needed over the next `lead` minutes stay or come back online, nodes idle
  over lead + min dwell are lent, at most `max_moves` moves a minute. The need per step is the
  median forecast plus one margin calibrated from its own past errors at that lead hour
  (`tide_calibration`), floored by the need measured now plus how far it rose within a hand-back's
  time in the past, packed with the pool's packing headroom; a shortfall of one node is waited out
  unless the measured need is close (`return_slack`). `tidewise-serve` is serve's fixed stack
  (the forecast's 0.9 quantile x 1.25 headroom, step 0 floored by the need now).
- `oracle`: perfect foresight (the bound; see `Oracle`).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Protocol

import numpy as np

from autoscaler.logic.tide import LEND, RETURN, NodeMove, TideNode, nodes_needed, plan_pool
from autoscaler.settings import TideSettings
from studies.simulation.tide.calibration import BUCKET, ForecastErrors
from studies.simulation.tide.forecasts import PoolForecasts
from studies.simulation.tide.model import OnlinePool, history_needed_by_hour

_DEFAULT = TideSettings()


def _minutes(duration: str) -> int:
    from predictor.durations import parse_duration

    return int(parse_duration(duration).total_seconds() // 60)


@dataclass
class PoolView:
    """The end of minute t, as the controller sees it."""

    t: int
    requested: float  # cores the online pods requested this minute
    needed: int  # nodes those requests need
    nodes: list[TideNode]  # every node: its side (returning counts as online), pods, last move

    @property
    def online(self) -> int:
        return sum(not n.lent for n in self.nodes)


class TidePolicy(Protocol):
    @property
    def label(self) -> str: ...

    def reset(self, pool: OnlinePool) -> None: ...

    def decide(self, view: PoolView) -> list[NodeMove]: ...


def pick(nodes: list[TideNode], action: str, k: int, reason: str) -> list[NodeMove]:
    """k moves of the cheapest nodes: returns by fewest batch pods, lends by fewest online pods."""
    if k <= 0:
        return []
    if action == RETURN:
        cands = sorted((n for n in nodes if n.lent), key=lambda n: (n.batch_pods, n.name))
    else:
        cands = sorted((n for n in nodes if not n.lent and not n.blocked), key=lambda n: (n.online_pods, n.name))
    return [NodeMove(n.name, action, reason) for n in cands[:k]]


def _label(name: str, knob: str | None, value: float | None) -> str:
    return name if knob is None else f"{name}@{knob}={value:g}"


@dataclass
class Watermark:
    low: float = 0.6
    high: float = 0.8
    knob: str | None = None
    name: str = "watermark"

    @property
    def label(self) -> str:
        return _label(self.name, self.knob, getattr(self, self.knob) if self.knob else None)

    def reset(self, pool: OnlinePool) -> None:
        self.allocatable = pool.allocatable

    def decide(self, view: PoolView) -> list[NodeMove]:
        online = view.online
        u = view.requested / max(online * self.allocatable, 1e-9)
        if u > self.high:
            k = max(1, math.ceil(view.requested / ((self.low + self.high) / 2 * self.allocatable)) - online)
            return pick(view.nodes, RETURN, k, f"utilisation {u:.2f} > high watermark {self.high:g}")
        if u < self.low and online > 1:
            return pick(view.nodes, LEND, 1, f"utilisation {u:.2f} < low watermark {self.low:g}")
        return []


@dataclass
class Schedule:
    hours: int = 8  # the window's length; it ends at `end`
    end: int = 6  # hour of the simulated clock
    spare: int = 1  # nodes kept online beyond the history's most needed in the window
    knob: str | None = None
    name: str = "schedule"

    @property
    def label(self) -> str:
        return _label(self.name, self.knob, getattr(self, self.knob) if self.knob else None)

    def reset(self, pool: OnlinePool) -> None:
        by_hour = history_needed_by_hour(pool)
        self.window = {(self.end - k - 1) % 24 for k in range(self.hours)}
        self.lend = max(0, pool.nodes - int(max(by_hour[h] for h in self.window)) - self.spare)

    def decide(self, view: PoolView) -> list[NodeMove]:
        hour = ((view.t + 1) // 60) % 24  # the hour the moves take effect in
        lent = sum(n.lent for n in view.nodes)
        target = self.lend if hour in self.window else 0
        if lent < target:
            return pick(view.nodes, LEND, target - lent, f"{hour:02d}:00 is in the lending window")
        if lent > target:
            return pick(view.nodes, RETURN, lent - target, f"{hour:02d}:00: lending window over")
        return []


@dataclass
class TidewiseTide:
    """The serving loop's plan on the pool's forecast. `margin="calibrated"` (the default): the median
    forecast plus the `error_quantile` of its own past errors at that lead hour (last `error_window`
    minutes), packed with the pool's own packing headroom, the need measured now as a floor and
    hand-backs with `return_slack`; until every lead hour has `error_min` errors (the first ~10 h),
    and with `margin="quantile"`, serve's fixed stack: the forecast's `quantile` x (1 + `headroom`)."""

    forecasts: PoolForecasts
    lead: int = _minutes(_DEFAULT.lead)
    quantile: float = _DEFAULT.quantile
    min_dwell: int = _minutes(_DEFAULT.min_dwell)
    headroom: float = _DEFAULT.headroom
    max_moves: int = _DEFAULT.max_moves
    # hand back only when the forecast is short by more than this many nodes or the need measured now
    # comes within it of the online side: a one-node wiggle of the forecast is noise, not a ramp (such
    # hand-backs were re-lent after the dwell: pods moved for nothing). The fixed stack does not wait
    return_slack: int = 1
    margin: str = "calibrated"
    # of past one-minute errors at a lead hour; the plan then takes the most over the lead window and
    # the floor covers fast rises (seeds 0-2, development: 0.97 was late, 0.99 not)
    error_quantile: float = 0.99
    hold: int = _minutes(_DEFAULT.hold_after_return)  # no lend this long after a hand-back (serve's rule)
    # of the need's past rises within a hand-back's time: the measured floor's margin, one minute in
    # 1000 (a rise faster than a hand-back cannot be waited for)
    rise_quantile: float = 0.999
    error_window: int = 3 * 1440  # minutes of errors per lead hour: three days follow a change of regime
    error_min: int = 360  # errors a lead hour needs (6 h) before its margin replaces the fixed stack
    knob: str | None = None
    name: str = "tidewise"
    counters: dict[str, int] = field(default_factory=dict)

    @property
    def label(self) -> str:
        return _label(self.name, self.knob, getattr(self, self.knob) if self.knob else None)

    def reset(self, pool: OnlinePool) -> None:
        self.allocatable = pool.allocatable
        self.pack_headroom = pool.settings.pack_headroom
        self.errors = (ForecastErrors(self.forecasts, self.error_window, pool.settings.return_minutes + 1)
                       if self.margin == "calibrated" else None)
        self.cores_margin = np.full(1, np.nan)
        self.rise = np.nan
        self.calibrated = False
        self.margin_origin = -1
        # minutes with a hand-back, by what asked for it: the need measured now (step 0), a new
        # hourly forecast, or a rise of the standing forecast entering the lead window
        self.counters = {"held_by_dwell_or_rate": 0, "return_minutes_need_now": 0, "return_minutes_new_forecast": 0,
                         "return_minutes_forecast_rise": 0, "minutes_calibrated": 0, "returns_waited_out": 0}

    def needed_ahead(self, view: PoolView) -> np.ndarray:
        """Nodes needed at each of the next lead + min_dwell + 1 minutes, from the forecast (made at
        or before t) and the need measured now (see the class docstring)."""
        length = self.lead + self.min_dwell + 1
        margin = self._margin(view.t, length) if self.margin == "calibrated" else None
        self.calibrated = margin is not None
        if margin is not None:
            # the measured need (plus how far it rose in a hand-back's time) floors every step:
            # the forecast may add to what is there, never lend it away
            fc = np.maximum(self.forecasts.window(view.t, 0.5, length) + margin, view.requested + max(self.rise, 0.0))
            self.counters["minutes_calibrated"] += 1
            return nodes_needed(fc, self.allocatable, self.pack_headroom)
        need = nodes_needed(self.forecasts.window(view.t, self.quantile, length), self.allocatable, self.headroom)
        need[0] = max(need[0], int(nodes_needed(np.array([view.requested]), self.allocatable, self.headroom)[0]))
        return need

    def _margin(self, t: int, length: int) -> np.ndarray | None:
        """Cores per step from the errors of lead hours, None while any of them has too few."""
        origin = self.forecasts.made_at(t)
        if origin != self.margin_origin and self.errors is not None:
            self.cores_margin = self.errors.margins(self.error_quantile, self.error_min)
            self.rise = self.errors.rise(self.rise_quantile, self.error_min)
            self.margin_origin = origin
        buckets = (t + 1 + np.arange(length) - origin) // BUCKET
        m = self.cores_margin[np.minimum(buckets, len(self.cores_margin) - 1)]
        return None if np.isnan(m).any() or np.isnan(self.rise) else m

    def decide(self, view: PoolView) -> list[NodeMove]:
        need = self.needed_ahead(view)
        if self.errors is not None:  # after the decision: the margin above was read from the past
            self.errors.observe(view.t, view.requested)
        slack = self.return_slack if self.calibrated else 0  # the fixed stack hands back as serve does
        plan = plan_pool(view.nodes, need, lead_steps=self.lead, dwell_steps=self.min_dwell,
                         max_moves=self.max_moves, now=60.0 * view.t, min_dwell_seconds=60.0 * self.min_dwell,
                         return_slack=slack, needed_now=self.needed_now(view), hold_after_return=60.0 * self.hold)
        self.counters["held_by_dwell_or_rate"] += len(plan.held)
        self.counters["returns_waited_out"] += int(not plan.moves and plan.must_online > plan.online_now)
        if any(m.action == RETURN for m in plan.moves):
            forecast_only = int(need[1:self.lead + 1].max()) if self.lead > 0 else 0
            key = ("need_now" if need[0] > forecast_only
                   else "new_forecast" if self.forecasts.made_at(view.t) == view.t else "forecast_rise")
            self.counters[f"return_minutes_{key}"] += 1
        return plan.moves

    def needed_now(self, view: PoolView) -> int:
        """Nodes the requests measured now need, plus how far they rose within a hand-back's time
        (once calibrated): the hysteresis waits only while this is clear of the online side."""
        rise = max(self.rise, 0.0) if self.calibrated else 0.0
        return int(nodes_needed(np.array([view.requested + rise]), self.allocatable, self.pack_headroom)[0])


@dataclass
class Oracle:
    """Perfect foresight, the bound every policy is read against: it knows the nodes needed in every
    future minute and the hand-back delay, lends every node not needed before a hand-back could bring
    it back, and hands a node back exactly `return_minutes` before it is needed (no move limit, no
    dwell). No policy with zero late minutes lends more: a node lent in minute m cannot serve online
    before m + return_minutes + 1, so at most pool - (most needed over those minutes) nodes are lent in m."""

    name: str = "oracle"
    knob: str | None = None

    @property
    def label(self) -> str:
        return self.name

    def reset(self, pool: OnlinePool) -> None:
        self.needed = np.minimum(pool.needed, pool.nodes)
        self.delay = pool.settings.return_minutes

    def decide(self, view: PoolView) -> list[NodeMove]:
        t, online = view.t, view.online  # online counts nodes on their way back
        ahead = self.needed[t + 1:t + self.delay + 2]
        if len(ahead) == 0:
            return []
        if ahead[-1] > online:
            return pick(view.nodes, RETURN, int(ahead[-1]) - online, "needed in exactly a hand-back's time")
        return pick(view.nodes, LEND, online - int(ahead.max()), "not needed before a hand-back could return it")


LEADS = (30, 120)
ERROR_QUANTILES = (0.995, 0.999)
WATERMARK_HIGHS = (0.65, 0.7, 0.75, 0.85)
WATERMARK_LOWS = (0.4, 0.5, 0.7)
SCHEDULE_HOURS = (6, 10, 12)
POLICY_NAMES = ("watermark", "schedule", "tidewise", "oracle")


def tide_policy_set(which: str, forecasts: PoolForecasts | None, sweeps: bool = True) -> list[TidePolicy]:
    """Each policy's default, then (with `sweeps`) its knobs one at a time."""
    out: list[TidePolicy] = []
    if which in ("all", "watermark"):
        out.append(Watermark())
        if sweeps:
            out += [Watermark(low=min(0.6, h - 0.15), high=h, knob="high") for h in WATERMARK_HIGHS]
            out += [Watermark(low=lo, knob="low") for lo in WATERMARK_LOWS]
    if which in ("all", "schedule"):
        out.append(Schedule())
        if sweeps:
            out += [Schedule(hours=h, knob="hours") for h in SCHEDULE_HOURS]
    if which in ("all", "oracle"):
        out.append(Oracle())
    if which in ("all", "tidewise"):
        if forecasts is None:
            raise ValueError("the tidewise policy needs the pool's forecasts")
        out.append(TidewiseTide(forecasts))
        if sweeps:
            out += [TidewiseTide(forecasts, lead=lead, knob="lead") for lead in LEADS]
            out += [TidewiseTide(forecasts, error_quantile=q, knob="error_quantile") for q in ERROR_QUANTILES]
            out += [TidewiseTide(forecasts, return_slack=0, knob="return_slack"),
                    TidewiseTide(forecasts, hold=0, knob="hold"),
                    TidewiseTide(forecasts, margin="quantile", name="tidewise-serve")]
    return out
