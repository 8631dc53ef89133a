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
- `tidewise`: the serving loop's own plan (`plan_pool`) on the forecast of the pool's requested
  cores: nodes needed over the next `lead` minutes stay or come back online, nodes idle over
  lead + min dwell are lent, at most `max_moves` moves a minute. Step 0 also holds the need
  measured now (a forecast that is low is corrected by what is already there).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Protocol

import numpy as np

from autoscaler.logic.tide import LEND, RETURN, NodeMove, TideNode, TideSettings, nodes_needed, plan_pool
from studies.simulation.tide_forecasts import PoolForecasts
from studies.simulation.tide_model import OnlinePool, history_needed_by_hour

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
    forecasts: PoolForecasts
    lead: int = _minutes(_DEFAULT.lead)
    quantile: float = _DEFAULT.quantile
    min_dwell: int = _minutes(_DEFAULT.min_dwell)
    headroom: float = _DEFAULT.headroom
    max_moves: int = _DEFAULT.max_moves
    knob: str | None = None
    name: str = "tidewise"
    counters: dict[str, int] = field(default_factory=dict)

    @property
    def label(self) -> str:
        return _label(self.name, self.knob, getattr(self, self.knob) if self.knob else None)

    def reset(self, pool: OnlinePool) -> None:
        self.allocatable = pool.allocatable
        # minutes with a hand-back, by what asked for it: the need measured now (step 0), a new
        # hourly forecast, or a rise of the standing forecast entering the lead window
        self.counters = {"held_by_dwell_or_rate": 0, "return_minutes_need_now": 0, "return_minutes_new_forecast": 0,
                         "return_minutes_forecast_rise": 0}

    def needed_ahead(self, view: PoolView) -> np.ndarray:
        """Nodes needed at each of the next lead + min_dwell + 1 minutes, from the forecast (made at
        or before t), at least what the requests measured now need at step 0."""
        fc = self.forecasts.window(view.t, self.quantile, self.lead + self.min_dwell + 1)
        need = nodes_needed(fc, self.allocatable, self.headroom)
        need[0] = max(need[0], int(nodes_needed(np.array([view.requested]), self.allocatable, self.headroom)[0]))
        return need

    def decide(self, view: PoolView) -> list[NodeMove]:
        need = self.needed_ahead(view)
        plan = plan_pool(view.nodes, need, lead_steps=self.lead, dwell_steps=self.min_dwell,
                         max_moves=self.max_moves, now=60.0 * view.t, min_dwell_seconds=60.0 * self.min_dwell)
        self.counters["held_by_dwell_or_rate"] += len(plan.held)
        if any(m.action == RETURN for m in plan.moves):
            forecast_only = int(need[1:self.lead + 1].max()) if self.lead > 0 else 0
            key = ("need_now" if need[0] > forecast_only
                   else "new_forecast" if self.forecasts.made_at(view.t) == view.t else "forecast_rise")
            self.counters[f"return_minutes_{key}"] += 1
        return plan.moves


LEADS = (30, 120, 180)
TIDE_QUANTILES = (0.5, 0.95, 0.99)
HEADROOMS = (0.1, 0.15)  # below the serving default 0.25: what a tighter fill buys and costs
WATERMARK_HIGHS = (0.65, 0.7, 0.75, 0.85)
WATERMARK_LOWS = (0.4, 0.5, 0.7)
SCHEDULE_HOURS = (6, 10, 12)
POLICY_NAMES = ("watermark", "schedule", "tidewise")


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
    if which in ("all", "tidewise"):
        if forecasts is None:
            raise ValueError("the tidewise policy needs the pool's forecasts")
        out.append(TidewiseTide(forecasts))
        if sweeps:
            out += [TidewiseTide(forecasts, lead=lead, knob="lead") for lead in LEADS]
            out += [TidewiseTide(forecasts, quantile=q, knob="quantile") for q in TIDE_QUANTILES]
            out += [TidewiseTide(forecasts, headroom=h, knob="headroom") for h in HEADROOMS]
    return out
