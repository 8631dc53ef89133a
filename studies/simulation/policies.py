"""The four colocation policies: each decides, every minute, how many cores per node batch may use.

A policy sees what the node agents measured in the minute that just ended (`Observation`) and
returns the batch quota for the next minute (cores per node); the engine applies it one minute
later, so every policy reacts with the same one-minute delay.

- `none`: no colocation.
- `katalyst`: the reactive rule of Katalyst's canonical provision policy, reclaimable =
  allocatable - reserve - max(online usage x 1.25, recent load), 4-CPU reserve; "recent load" is
  the 1-minute load average (an exponential average with a one-minute time constant) of the online
  runnable demand.
- `koordinator`: batch = capacity x 0.65 - online usage - system usage (its default 65% threshold).
- `tidewise`: the serving loop's rule (`autoscaler.logic.reclaim`): allocatable - reserved - the
  peak of the node's online-demand forecast quantile over the next window - margin, floored and
  smoothed (dead-band, step limit up, immediate decreases). Forecasts are made once per simulated
  day from the history before it; between them, the forecast is moved by its measured level error
  over the last hour (nowcast), and a reactive term adds the largest recent miss above that, so a
  wrong forecast is corrected within minutes.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from typing import Protocol

import numpy as np

from autoscaler.logic.reclaim import reclaimable, smooth
from autoscaler.settings import ReclaimSettings
from studies.simulation.cluster import Cluster


@dataclass
class Observation:
    """What was measured on every node during minute `t` (cores, one value per node)."""

    t: int
    online_usage: np.ndarray  # CPU the online services got
    online_demand: np.ndarray  # CPU they asked for (runnable threads: the load)
    system_usage: np.ndarray
    batch_usage: np.ndarray


class Policy(Protocol):
    name: str

    @property
    def label(self) -> str: ...

    def reset(self, cluster: Cluster) -> None: ...

    def decide(self, obs: Observation) -> np.ndarray: ...


@dataclass
class NoColocation:
    name: str = "none"

    @property
    def label(self) -> str:
        return self.name

    def reset(self, cluster: Cluster) -> None:
        self._zeros = np.zeros(cluster.nodes)

    def decide(self, obs: Observation) -> np.ndarray:
        return self._zeros


@dataclass
class Katalyst:
    reserve: float = 4.0  # cores kept back on every node (Katalyst's reserved-for-reclaim default)
    factor: float = 1.25  # online usage is inflated by this before it is subtracted
    knob: str | None = None  # which parameter a sweep varied (for the result's label)
    name: str = "katalyst"
    LOAD_DECAY = math.exp(-1.0)  # load1 over one-minute samples: weight of the previous minute

    @property
    def label(self) -> str:
        return self.name if self.knob is None else f"{self.name}@{self.knob}={getattr(self, self.knob):g}"

    def reset(self, cluster: Cluster) -> None:
        self.allocatable = cluster.allocatable
        self.load = np.zeros(cluster.nodes)

    def decide(self, obs: Observation) -> np.ndarray:
        self.load = self.load * self.LOAD_DECAY + obs.online_demand * (1.0 - self.LOAD_DECAY)
        need = np.maximum(obs.online_usage * self.factor, self.load)
        return np.maximum(0.0, self.allocatable - self.reserve - need)


@dataclass
class Koordinator:
    threshold: float = 0.65  # share of node capacity that online + system + batch may reach
    knob: str | None = None
    name: str = "koordinator"

    @property
    def label(self) -> str:
        return self.name if self.knob is None else f"{self.name}@{self.knob}={getattr(self, self.knob):g}"

    def reset(self, cluster: Cluster) -> None:
        self.capacity = cluster.capacity

    def decide(self, obs: Observation) -> np.ndarray:
        return np.maximum(0.0, self.capacity * self.threshold - obs.online_usage - obs.system_usage)


@dataclass
class NodeForecasts:
    """Per node, the summed forecast quantiles of its online services, one value per minute.

    `by_day[d][q]` is nodes x (1440 + extra) minutes from the forecast made at the start of day d,
    so that a window reaching past midnight still reads the forecast made that morning.
    """

    quantiles: tuple[float, ...]
    by_day: list[dict[float, np.ndarray]]
    models: dict[str, str] = field(default_factory=dict)  # trace -> model chosen on day 0

    def at(self, q: float) -> np.ndarray:
        """nodes x minutes: the forecast for each minute itself."""
        return np.concatenate([d[q][:, :1440] for d in self.by_day], axis=1)

    def window_peak(self, q: float, window: int) -> np.ndarray:
        """nodes x minutes: max of the forecast over minutes t+1 .. t+window."""
        parts = []
        for d in self.by_day:
            f = d[q]
            if f.shape[1] < 1440 + window:
                raise ValueError(f"forecasts cover {f.shape[1]} minutes a day; a {window}-minute window needs "
                                 f"{1440 + window}")
            view = np.lib.stride_tricks.sliding_window_view(f[:, 1:1440 + window], window, axis=1)
            parts.append(view.max(axis=2))
        return np.concatenate(parts, axis=1)


@dataclass
class Tidewise:
    forecasts: NodeForecasts
    quantile: float = 0.95  # ReclaimSettings.quantile
    margin: float = 0.05  # of allocatable (ReclaimSettings.margin_fraction)
    window: int = 60  # minutes (ReclaimSettings.window "1h")
    nowcast: int = 60  # minutes over which the forecast's current level error is measured (0: off)
    recent: int = 15  # minutes over which a miss above the corrected quantile is remembered
    settings: ReclaimSettings = field(default_factory=ReclaimSettings)
    knob: str | None = None
    name: str = "tidewise"

    @property
    def label(self) -> str:
        return self.name if self.knob is None else f"{self.name}@{self.knob}={getattr(self, self.knob):g}"

    def reset(self, cluster: Cluster) -> None:
        self.s = replace(self.settings, quantile=self.quantile, margin_fraction=self.margin)
        self.alloc_m = int(round(cluster.allocatable * 1000))
        self.peak = self.forecasts.window_peak(self.quantile, self.window)
        self.now = self.forecasts.at(self.quantile)
        self.median = self.forecasts.at(0.5) if self.nowcast else self.now
        if self.peak.shape[1] < cluster.minutes:
            raise ValueError(f"forecasts cover {self.peak.shape[1]} minutes, the simulation {cluster.minutes}")
        self.errors = np.zeros((cluster.nodes, max(1, self.nowcast)))
        self.misses = np.zeros((cluster.nodes, self.recent))
        self.previous: list[int | None] = [None] * cluster.nodes
        self.margin_m = int(math.ceil(self.alloc_m * self.s.margin_fraction))
        self.step_up = int(self.alloc_m * self.s.max_step_fraction)

    def level_error(self, obs: Observation) -> np.ndarray:
        """Cores: how far the measured demand ran above (+) or below (-) the median forecast, on
        average over the last `nowcast` minutes. A day-ahead forecast's error is mostly a level
        error that persists for hours; measuring it corrects the whole window (a nowcast)."""
        if not self.nowcast:
            return np.zeros(len(obs.online_demand))
        self.errors[:, obs.t % self.nowcast] = obs.online_demand - self.median[:, obs.t]
        if obs.t + 1 < self.nowcast:  # not yet a full window: only ever correct upwards
            return np.maximum(self.errors[:, :obs.t + 1].mean(axis=1), 0.0)
        return self.errors.mean(axis=1)

    def demand_estimate(self, obs: Observation) -> np.ndarray:
        """Cores: the forecast quantile's peak over the next window, moved by the measured level
        error, plus the largest recent miss above that corrected quantile; never below the demand
        just measured."""
        bias = self.level_error(obs)
        self.misses[:, obs.t % self.recent] = np.maximum(0.0, obs.online_demand - (self.now[:, obs.t] + bias))
        nxt = min(obs.t + 1, self.peak.shape[1] - 1)
        return np.maximum(self.peak[:, nxt] + bias + self.misses.max(axis=1), obs.online_demand)

    def decide(self, obs: Observation) -> np.ndarray:
        est = self.demand_estimate(obs)
        out = np.empty(len(est))
        for n, cores in enumerate(est):
            peak_m = int(math.ceil(round(float(cores) * 1000, 6)))
            raw = reclaimable(self.alloc_m, self.s.reserved_millicpu, peak_m, self.margin_m)
            value, _ = smooth(self.previous[n], raw, self.s.deadband_millicpu, self.step_up)
            self.previous[n] = value
            out[n] = value / 1000.0
        return out


POLICY_NAMES = ("none", "katalyst", "koordinator", "tidewise")

# The sweeps: each baseline's main knob (issue 6), one parameter at a time around its default.
KATALYST_RESERVES = (0.0, 2.0, 6.0, 8.0)
KATALYST_FACTORS = (1.0, 1.5, 2.0)
KOORDINATOR_THRESHOLDS = (0.5, 0.55, 0.6, 0.7, 0.75, 0.8, 0.85)
TIDEWISE_MARGINS = (0.0, 0.025, 0.1)
TIDEWISE_QUANTILES = (0.5, 0.9, 0.99)
TIDEWISE_WINDOWS = (15,)


def policy_set(which: str, forecasts: NodeForecasts | None, sweeps: bool = True,
               tidewise_quantiles: tuple[float, ...] | None = None) -> list[Policy]:
    """The default of each requested policy, then (when `sweeps`) its swept settings."""
    names = POLICY_NAMES if which == "all" else (which,)
    out: list[Policy] = []
    for name in names:
        if name == "none":
            out.append(NoColocation())
        elif name == "katalyst":
            out.append(Katalyst())
            if sweeps:
                out += [Katalyst(reserve=r, knob="reserve") for r in KATALYST_RESERVES]
                out += [Katalyst(factor=f, knob="factor") for f in KATALYST_FACTORS]
        elif name == "koordinator":
            out.append(Koordinator())
            if sweeps:
                out += [Koordinator(threshold=t, knob="threshold") for t in KOORDINATOR_THRESHOLDS]
        elif name == "tidewise":
            if forecasts is None:
                raise ValueError("the tidewise policy needs forecasts")
            out.append(Tidewise(forecasts))
            if sweeps:
                out += [Tidewise(forecasts, margin=m, knob="margin") for m in TIDEWISE_MARGINS]
                qs = tidewise_quantiles if tidewise_quantiles is not None else TIDEWISE_QUANTILES
                out += [Tidewise(forecasts, quantile=q, knob="quantile") for q in qs if q in forecasts.quantiles]
                out += [Tidewise(forecasts, window=w, knob="window") for w in TIDEWISE_WINDOWS]
        else:
            raise ValueError(f"unknown policy {name!r}: use all or one of {', '.join(POLICY_NAMES)}")
    return out
