"""The colocation policies: each decides, every minute, how many cores per node batch may use, and
where the cluster's queued batch jobs go.

A policy sees what the node agents measured in the minute that just ended (`Observation`) and
returns the batch quota for the next minute (cores per node); the engine applies it one minute
later, so every policy reacts with the same one-minute delay. The scheduler then asks the policy
where each queued job goes (`begin_placement` once per minute, `place` per job).

- `none`: no colocation.
- `katalyst`: the reactive rule of Katalyst's canonical provision policy, reclaimable =
  allocatable - reserve - max(online usage x 1.25, recent load), 4-CPU reserve; "recent load" is
  the 1-minute load average (an exponential average with a one-minute time constant) of the online
  runnable demand. Placement: first fit on current free quota.
- `koordinator`: batch = capacity x 0.65 - online usage - system usage (its default 65% threshold).
  Placement: first fit on current free quota.
- `tidewise`: see `studies/simulation/tidewise.py`.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Protocol

import numpy as np

from studies.simulation.harness.cluster import Cluster

EPS = 1e-9


@dataclass
class Observation:
    """What was measured on every node during minute `t` (cores, one value per node)."""

    t: int
    online_usage: np.ndarray  # CPU the online services got (the minute's mean)
    online_demand: np.ndarray  # CPU they asked for (runnable threads: the load)
    system_usage: np.ndarray
    batch_usage: np.ndarray
    online_peak: np.ndarray | None = None  # the minute's peak demand (a 12-s sample's), None: the mean

    @property
    def peak(self) -> np.ndarray:
        return self.online_demand if self.online_peak is None else self.online_peak


class Policy(Protocol):
    name: str

    @property
    def label(self) -> str: ...

    def reset(self, cluster: Cluster) -> None: ...

    def decide(self, obs: Observation) -> np.ndarray: ...

    def begin_placement(self, t: int, free: list[float]) -> None: ...

    def place(self, free: list[float], size: float, duration: float) -> int: ...


class FirstFit:
    """The baselines' scheduler: the lowest-numbered node whose current free quota fits the job."""

    def begin_placement(self, t: int, free: list[float]) -> None:
        pass

    def place(self, free: list[float], size: float, duration: float) -> int:
        need = size - EPS
        return next((n for n, f in enumerate(free) if f >= need), -1)


def label_of(name: str, knob: str | None, owner: object) -> str:
    return name if knob is None else f"{name}@{knob}={getattr(owner, knob):g}"


@dataclass
class NoColocation(FirstFit):
    name: str = "none"

    @property
    def label(self) -> str:
        return self.name

    def reset(self, cluster: Cluster) -> None:
        self._zeros = np.zeros(cluster.nodes)

    def decide(self, obs: Observation) -> np.ndarray:
        return self._zeros


@dataclass
class Katalyst(FirstFit):
    reserve: float = 4.0  # cores kept back on every node (Katalyst's reserved-for-reclaim default)
    factor: float = 1.25  # online usage is inflated by this before it is subtracted
    knob: str | None = None  # which parameter a sweep varied (for the result's label)
    name: str = "katalyst"
    LOAD_DECAY = math.exp(-1.0)  # load1 over one-minute samples: weight of the previous minute

    @property
    def label(self) -> str:
        return label_of(self.name, self.knob, self)

    def reset(self, cluster: Cluster) -> None:
        self.allocatable = cluster.allocatable
        self.load = np.zeros(cluster.nodes)

    def decide(self, obs: Observation) -> np.ndarray:
        self.load = self.load * self.LOAD_DECAY + obs.online_demand * (1.0 - self.LOAD_DECAY)
        need = np.maximum(obs.online_usage * self.factor, self.load)
        return np.maximum(0.0, self.allocatable - self.reserve - need)


@dataclass
class Koordinator(FirstFit):
    threshold: float = 0.65  # share of node capacity that online + system + batch may reach
    knob: str | None = None
    name: str = "koordinator"

    @property
    def label(self) -> str:
        return label_of(self.name, self.knob, self)

    def reset(self, cluster: Cluster) -> None:
        self.capacity = cluster.capacity

    def decide(self, obs: Observation) -> np.ndarray:
        return np.maximum(0.0, self.capacity * self.threshold - obs.online_usage - obs.system_usage)


@dataclass
class NodeForecasts:
    """Per node, the day-ahead forecast quantiles of its online demand, one value per minute.

    `by_day[d][q]` is nodes x (1440 + extra) minutes from the forecast made at the start of day d,
    so that a window reaching past midnight still reads the forecast made that morning.
    """

    quantiles: tuple[float, ...]
    by_day: list[dict[float, np.ndarray]]
    models: dict[str, str] = field(default_factory=dict)  # trace -> model chosen on day 0

    def at(self, q: float) -> np.ndarray:
        """nodes x minutes: the forecast for each minute itself."""
        return np.concatenate([d[q][:, :1440] for d in self.by_day], axis=1)

    def ahead_max(self, q: float, window: int) -> np.ndarray:
        """nodes x minutes: the largest forecast over minutes t+1 .. t+window, as known at t (the
        forecast made at the start of t's day; past its horizon, the same time of day a day earlier
        in that forecast: the tide repeats)."""
        parts = []
        for d in self.by_day:
            f = d[q]
            need = 1441 + window
            ext = f
            while ext.shape[1] < need:  # seasonal extension, one day back
                ext = np.concatenate([ext, ext[:, ext.shape[1] - 1440:ext.shape[1] - 1440 + need - ext.shape[1]]],
                                     axis=1)
            parts.append(forward_max(ext[:, 1:1440 + window], window)[:, :1440])
        return np.concatenate(parts, axis=1)


def forward_max(x: np.ndarray, window: int) -> np.ndarray:
    """out[:, i] = max(x[:, i:i+window]) for every i with a full window (doubling: O(n log window))."""
    span, m = 1, x
    while span * 2 <= window:
        m = np.maximum(m[:, :m.shape[1] - span], m[:, span:])
        span *= 2
    if span == window:
        return m
    rest = window - span
    return np.maximum(m[:, :m.shape[1] - rest], m[:, rest:])
