"""The 1-minute control loop: batch jobs admitted, throttled, evicted; online served first.

Every minute t, for all nodes at once (numpy over nodes x job slots):

1. the quota `Q` that the policy decided at the end of minute t-1 applies (one-minute delay);
2. if `Q` is below `evict_below` of the CPU requested by the node's running batch jobs, throttling
   is not enough: the newest jobs are evicted until the rest fit in `Q` (their work is lost);
3. batch gets `b = min(requested batch, Q, capacity - system)`, shared by its jobs pro rata;
4. online services get `min(demand, capacity - system - b)`: batch held that CPU for the minute,
   so when online demand rose within the minute, it waits. A node-minute where online demand was
   not fully served while batch held CPU counts as a shortfall;
5. jobs whose work is done leave; the policy sees the minute's measurements and sets the next
   quota; the scheduler admits queued jobs (first come first served) while they fit in it.

Per node-minute, system + online + batch + idle = capacity exactly (checked by the tests).
"""
from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Callable

import numpy as np

from studies.simulation.batch import JobStream
from studies.simulation.cluster import Cluster
from studies.simulation.policies import Observation, Policy

log = logging.getLogger(__name__)

EPS = 1e-9
SHORT_EPS = 1e-6  # cores: below a micro-core, a "shortfall" is rounding


@dataclass
class EngineSettings:
    evict_below: float = 0.5  # evict when the quota covers under half of the running jobs' requests
    slots: int = 96  # job slots per node (0.5-core jobs on 30 cores need 60)
    lookahead: int = 32  # queued jobs considered per node per minute
    keep_series: bool = False  # keep nodes x minutes arrays (tests, conservation checks)


@dataclass
class RunResult:
    label: str
    utilisation: float
    shortfall: float
    batch_core_hours: float
    evictions: int
    online_unserved_core_hours: float  # online demand that batch delayed
    held_back: float  # mean cores per node-minute kept from batch beyond online demand: allocatable - quota - demand
    util_by_minute: np.ndarray  # mean over nodes, per minute
    shortfall_by_node: np.ndarray  # share of minutes, per node
    batch_by_minute: np.ndarray  # mean batch cores per node, per minute
    series: dict[str, np.ndarray] = field(default_factory=dict)  # nodes x minutes when kept

    def metrics(self) -> dict[str, float | int]:
        return {"utilisation": float(self.utilisation), "shortfall": float(self.shortfall),
                "batch_core_hours": float(self.batch_core_hours), "evictions": int(self.evictions)}


class Slots:
    """The batch jobs running on every node: nodes x job slots of size (cores requested, 0 = free),
    work left and in total (core-minutes), and admission order (for newest-first eviction)."""

    def __init__(self, nodes: int, slots: int):
        self.size = np.zeros((nodes, slots))
        self.remaining = np.zeros((nodes, slots))
        self.work = np.zeros((nodes, slots))
        self.started = np.full((nodes, slots), np.inf)
        self.order = 0
        self.rows = np.arange(nodes)[:, None]

    def _free(self, mask: np.ndarray) -> None:
        self.size[mask] = 0.0
        self.remaining[mask] = 0.0
        self.work[mask] = 0.0
        self.started[mask] = np.inf

    def evict(self, quota: np.ndarray, evict_below: float) -> tuple[int, float]:
        """Where the quota covers under `evict_below` of the running requests, the newest jobs go
        until the rest fit in it. Returns (jobs evicted, core-minutes of work they lose)."""
        requested = self.size.sum(axis=1)
        over = quota < evict_below * requested - EPS
        if not over.any():
            return 0, 0.0
        newest_first = np.argsort(-self.started, axis=1, kind="stable")
        s_sorted = self.size[self.rows, newest_first]
        before = np.cumsum(s_sorted, axis=1) - s_sorted  # requests of the jobs newer than this one
        evict_sorted = over[:, None] & (s_sorted > 0) & (requested[:, None] - before > quota[:, None] + EPS)
        evict = np.zeros_like(evict_sorted)
        evict[self.rows, newest_first] = evict_sorted
        lost = float((self.work - self.remaining)[evict].sum())
        self._free(evict)
        return int(evict.sum()), lost

    def run(self, b: np.ndarray, requested: np.ndarray) -> None:
        """A minute of work: the `b` cores batch got on each node, shared by its jobs pro rata."""
        frac = np.divide(b, requested, out=np.zeros(len(b)), where=requested > EPS)
        self.remaining -= self.size * frac[:, None]

    def finish(self) -> None:
        """Jobs whose work is done leave."""
        done = (self.size > 0) & (self.remaining <= EPS)
        if done.any():
            self._free(done)

    def admit(self, quota: np.ndarray, jobs: JobStream, lookahead: int) -> None:
        """Queued jobs, first come first served, while they fit in the quota and in free slots."""
        free = quota - self.size.sum(axis=1)
        if not (free > EPS).any():
            return
        q_size, q_dur = jobs.peek(lookahead)
        fits = np.cumsum(q_size, axis=1) <= free[:, None] + EPS
        count = np.where(fits.all(axis=1), lookahead, np.argmin(fits, axis=1))
        free_slots = np.argsort(self.size > 0, axis=1, kind="stable")  # free slots first
        count = np.minimum(count, (self.size <= 0).sum(axis=1))
        for j in range(int(count.max(initial=0))):
            sel = np.flatnonzero(count > j)
            slot = free_slots[sel, j]
            self.size[sel, slot] = q_size[sel, j]
            self.work[sel, slot] = q_size[sel, j] * q_dur[sel, j]
            self.remaining[sel, slot] = self.work[sel, slot]
            self.started[sel, slot] = self.order + j
        self.order += int(count.max(initial=0))
        jobs.take(count)


@dataclass
class Tally:
    """What a run adds up minute by minute."""

    util_sum: np.ndarray  # per minute: mean over nodes of the used share of capacity
    batch_sum: np.ndarray  # per minute: mean batch cores per node
    short_count: np.ndarray  # per node: minutes with a shortfall
    unserved: float = 0.0
    held: float = 0.0
    used_batch: float = 0.0
    lost: float = 0.0
    evictions: int = 0

    def result(self, label: str, nodes: int, keep: dict[str, np.ndarray]) -> RunResult:
        minutes = nodes * len(self.util_sum)
        return RunResult(
            label=label,
            utilisation=float(self.util_sum.mean()),
            shortfall=float(self.short_count.sum() / minutes),
            batch_core_hours=(self.used_batch - self.lost) / 60.0,
            evictions=self.evictions,
            online_unserved_core_hours=self.unserved / 60.0,
            held_back=self.held / minutes,
            util_by_minute=self.util_sum,
            shortfall_by_node=self.short_count / len(self.util_sum),
            batch_by_minute=self.batch_sum,
            series=keep,
        )


def simulate(cluster: Cluster, policy: Policy, seed: int, settings: EngineSettings | None = None,
             progress: Callable[[int], None] | None = None) -> RunResult:
    """Run one policy over the whole cluster; the same seed gives the same jobs to every policy."""
    es = settings or EngineSettings()
    n, T = cluster.nodes, cluster.minutes
    cap = cluster.capacity
    jobs = JobStream(n, seed)
    slots = Slots(n, es.slots)
    policy.reset(cluster)
    quota = np.zeros(n)
    tally = Tally(np.zeros(T), np.zeros(T), np.zeros(n))
    keep = {k: np.zeros((n, T)) for k in ("online", "batch", "system", "idle", "quota", "demand")} \
        if es.keep_series else {}
    for t in range(T):
        demand = cluster.online[:, t]
        system = cluster.system[:, t]
        # 2. eviction: newest first, until the rest fit in the quota
        evicted, lost = slots.evict(quota, es.evict_below)
        tally.evictions += evicted
        tally.lost += lost
        requested = slots.size.sum(axis=1)
        # 3. batch runs inside its quota
        b = np.maximum(np.minimum(np.minimum(requested, quota), cap - system), 0.0)
        slots.run(b, requested)
        # 4. online gets what is left
        online = np.minimum(demand, cap - system - b)
        short = (demand - online > SHORT_EPS) & (b > EPS)
        tally.short_count += short
        tally.unserved += float((demand - online)[short].sum())
        tally.used_batch += float(b.sum())
        tally.held += float((cluster.allocatable - quota - demand).sum())
        tally.util_sum[t] = ((system + online + b) / cap).mean()
        tally.batch_sum[t] = b.mean()
        if keep:
            keep["online"][:, t], keep["batch"][:, t], keep["system"][:, t] = online, b, system
            keep["idle"][:, t], keep["quota"][:, t], keep["demand"][:, t] = cap - system - online - b, quota, demand
        # 5. finished jobs leave; the policy sets the next quota; admission against it
        slots.finish()
        quota = np.clip(policy.decide(Observation(t, online, demand, system, b)), 0.0, cap)
        slots.admit(quota, jobs, es.lookahead)
        if progress is not None and (t + 1) % 1440 == 0:
            progress(1)
    return tally.result(policy.label, n, keep)
