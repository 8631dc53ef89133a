"""Tidewise's colocation policy: react fast where a reaction can keep up, forecast where only a
forecast helps.

- **Quota, every minute (the fast reactive path, as Katalyst's).** Batch may use what the node's
  online services and daemons left at the minute's mean, less a reserve:
  quota = min(allocatable, capacity - (online demand + system) - reserve).
- **Reserve from the short-horizon forecast's uncertainty, not a constant.** The one-minute-ahead
  forecast of what the node needs is the last minute's mean (online + system); its error is the
  next minute's *peak* need over it, relative to the level (online demand + 1 core), which is
  exactly what decides a shortfall. The reserve is the `1 - risk` quantile of each node's last
  `window` errors (per node once it has `node_min` of them; before, the fleet's pooled errors;
  in the first hour, Katalyst's 4 cores), refreshed every `refresh` minutes. A quiet node lends
  almost everything; a bursty one keeps what its bursts have needed.
- **Admission and placement from the day-ahead forecast.** A queued job goes only to a node whose
  quota is forecast to last for the job's declared duration: the current quota less the forecast's
  rise of online demand (quantile `admit_quantile`) between now and the end of the job, less the
  batch already running there, must hold the job. Among those nodes, the one with the most room
  left at the forecast's highest point (a miss by the forecast is least likely to throttle or
  evict there). A long job therefore waits for a node whose tide is falling or flat, while short
  jobs fill the capacity a rising tide will take back.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from studies.simulation.colocation.policies import EPS, FirstFit, NodeForecasts, Observation, label_of
from studies.simulation.harness.cluster import Cluster

# Durations the admission check knows the forecast's peak for (minutes); a job is checked against
# the first bucket at least as long as it (12 h: the longest job)
DURATION_BUCKETS = (15, 30, 60, 120, 240, 480, 720)
START_RESERVE = 4.0  # cores, the first hour (Katalyst's default reserve): no errors measured yet


@dataclass
class Tidewise:
    forecasts: NodeForecasts
    risk: float = 0.0005  # share of node-minutes whose peak may exceed the reserve (budget 0.001)
    window: int = 2880  # minutes of one-minute-ahead errors kept per node (two days)
    node_min: int = 1440  # errors a node needs before its own quantile replaces the fleet's
    refresh: int = 15  # minutes between reserve updates
    admit_quantile: float = 0.5  # the day-ahead quantile whose rise the admission check reads
    forecast_placement: bool = True  # False: the baselines' first fit on current free quota (ablation)
    knob: str | None = None
    name: str = "tidewise"
    counters: dict[str, float] = field(default_factory=dict)

    @property
    def label(self) -> str:
        return label_of(self.name, self.knob, self)

    def reset(self, cluster: Cluster) -> None:
        n = cluster.nodes
        self.capacity, self.allocatable = cluster.capacity, cluster.allocatable
        if self.forecasts.at(self.admit_quantile).shape[1] < cluster.minutes:
            raise ValueError(f"forecasts cover fewer minutes than the simulation's {cluster.minutes}")
        self.now_fc = self.forecasts.at(self.admit_quantile)
        self.ahead = {d: self.forecasts.ahead_max(self.admit_quantile, d) for d in DURATION_BUCKETS}
        self.errors = np.zeros((n, self.window))
        self.count = 0
        self.reserve_cores = np.zeros(n)
        self.base = np.zeros(n)
        self.quota = np.zeros(n)
        self.counters = {"reserve_sum": 0.0, "minutes": 0, "deferred": 0, "placed": 0}

    def _update_reserve(self) -> None:
        m = min(self.count, self.window)
        k = max(0, min(m - 1, int(math.ceil((1.0 - self.risk) * m)) - 1))
        if m >= self.node_min:
            self.reserve_cores = np.partition(self.errors[:, :m], k, axis=1)[:, k]
        else:
            pooled = self.errors[:, :m].ravel()
            kp = max(0, min(len(pooled) - 1, int(math.ceil((1.0 - self.risk) * len(pooled))) - 1))
            self.reserve_cores = np.full(len(self.base), np.partition(pooled, kp)[kp])

    def reserve(self) -> np.ndarray:
        """Cores kept back on each node for the next minute."""
        if self.count < 60:
            return np.full(len(self.base), START_RESERVE)
        return np.maximum(self.reserve_cores, 0.0)

    def decide(self, obs: Observation) -> np.ndarray:
        need = obs.peak + obs.system_usage
        if obs.t > 0:  # last minute's forecast (its mean need) against this minute's peak need
            self.errors[:, self.count % self.window] = need - self.base
            self.count += 1
            if self.count % self.refresh == 0 or self.count == 60:
                self._update_reserve()
        self.base = obs.online_demand + obs.system_usage
        r = self.reserve()
        self.quota = np.clip(np.minimum(self.allocatable, self.capacity - self.base - r), 0.0, None)
        self.t = obs.t
        self.counters["reserve_sum"] += float(r.mean())
        self.counters["minutes"] += 1
        return self.quota

    def begin_placement(self, t: int, free: list[float]) -> None:
        """Per duration bucket, each node's quota at the forecast's highest point over it."""
        nxt = min(t + 1, self.now_fc.shape[1] - 1)
        now = self.now_fc[:, nxt]
        self.lasting = {d: self.quota - np.maximum(a[:, nxt] - now, 0.0) for d, a in self.ahead.items()}

    def place(self, free_now: list[float], size: float, duration: float) -> int:
        if not self.forecast_placement:
            return FirstFit.place(self, free_now, size, duration)  # type: ignore[arg-type]
        bucket = next((d for d in DURATION_BUCKETS if d >= duration), DURATION_BUCKETS[-1])
        free = np.asarray(free_now)
        room = self.lasting[bucket] - (self.quota - free)  # what lasts, less the batch already there
        ok = (free >= size - EPS) & (room >= size - EPS)
        if not ok.any():
            if (free >= size - EPS).any():
                self.counters["deferred"] += 1
            return -1
        self.counters["placed"] += 1
        return int(np.argmax(np.where(ok, room, -np.inf)))


RISKS = (0.002, 0.0015, 0.001, 0.0002)


def tidewise_set(forecasts: NodeForecasts, sweeps: bool) -> list[Tidewise]:
    """The default, then (when `sweeps`) its risk level, and the ablation without forecast placement
    (what the forecast adds to the fast path and its reserve)."""
    out = [Tidewise(forecasts)]
    if sweeps:
        out += [Tidewise(forecasts, risk=r, knob="risk") for r in RISKS]
        out.append(Tidewise(forecasts, forecast_placement=False, knob="forecast_placement"))
    return out
