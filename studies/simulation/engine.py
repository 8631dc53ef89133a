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


def simulate(cluster: Cluster, policy: Policy, seed: int, settings: EngineSettings | None = None,
             progress: Callable[[int], None] | None = None) -> RunResult:
    """Run one policy over the whole cluster; the same seed gives the same jobs to every policy."""
    es = settings or EngineSettings()
    n, T, K = cluster.nodes, cluster.minutes, es.slots
    cap = cluster.capacity
    jobs = JobStream(n, seed)
    size = np.zeros((n, K))  # cores requested; 0 = free slot
    remaining = np.zeros((n, K))  # core-minutes of work left
    work = np.zeros((n, K))  # core-minutes of work in total
    started = np.full((n, K), np.inf)  # admission order (for newest-first eviction)
    order = 0
    rows = np.arange(n)[:, None]
    policy.reset(cluster)
    quota = np.zeros(n)
    util_sum = np.zeros(T)
    batch_sum = np.zeros(T)
    short_count = np.zeros(n)
    unserved = 0.0
    held = 0.0
    used_batch = 0.0
    lost = 0.0
    evictions = 0
    keep = {k: np.zeros((n, T)) for k in ("online", "batch", "system", "idle", "quota", "demand")} \
        if es.keep_series else {}
    for t in range(T):
        demand = cluster.online[:, t]
        system = cluster.system[:, t]
        requested = size.sum(axis=1)
        # 2. eviction: newest first, until the rest fit in the quota
        over = quota < es.evict_below * requested - EPS
        if over.any():
            newest_first = np.argsort(-started, axis=1, kind="stable")
            s_sorted = size[rows, newest_first]
            before = np.cumsum(s_sorted, axis=1) - s_sorted  # requests of the jobs newer than this one
            evict_sorted = over[:, None] & (s_sorted > 0) & (requested[:, None] - before > quota[:, None] + EPS)
            evict = np.zeros_like(evict_sorted)
            evict[rows, newest_first] = evict_sorted
            evictions += int(evict.sum())
            lost += float((work - remaining)[evict].sum())
            size[evict] = 0.0
            remaining[evict] = 0.0
            work[evict] = 0.0
            started[evict] = np.inf
            requested = size.sum(axis=1)
        # 3. batch runs inside its quota
        b = np.minimum(np.minimum(requested, quota), cap - system)
        b = np.maximum(b, 0.0)
        frac = np.divide(b, requested, out=np.zeros(n), where=requested > EPS)
        remaining -= size * frac[:, None]
        # 4. online gets what is left
        online = np.minimum(demand, cap - system - b)
        short = (demand - online > SHORT_EPS) & (b > EPS)
        short_count += short
        unserved += float((demand - online)[short].sum())
        used_batch += float(b.sum())
        held += float((cluster.allocatable - quota - demand).sum())
        util = (system + online + b) / cap
        util_sum[t] = util.mean()
        batch_sum[t] = b.mean()
        if keep:
            keep["online"][:, t], keep["batch"][:, t], keep["system"][:, t] = online, b, system
            keep["idle"][:, t], keep["quota"][:, t], keep["demand"][:, t] = cap - system - online - b, quota, demand
        # 5. finished jobs leave
        done = (size > 0) & (remaining <= EPS)
        if done.any():
            size[done] = 0.0
            remaining[done] = 0.0
            work[done] = 0.0
            started[done] = np.inf
        quota = np.clip(policy.decide(Observation(t, online, demand, system, b)), 0.0, cap)
        # admission against the new quota, first come first served
        free = quota - size.sum(axis=1)
        if (free > EPS).any():
            q_size, q_dur = jobs.peek(es.lookahead)
            fits = np.cumsum(q_size, axis=1) <= free[:, None] + EPS
            count = np.where(fits.all(axis=1), es.lookahead, np.argmin(fits, axis=1))
            free_slots = np.argsort(size > 0, axis=1, kind="stable")  # free slots first
            n_free = (size <= 0).sum(axis=1)
            count = np.minimum(count, n_free)
            for j in range(int(count.max(initial=0))):
                sel = np.flatnonzero(count > j)
                slot = free_slots[sel, j]
                size[sel, slot] = q_size[sel, j]
                work[sel, slot] = q_size[sel, j] * q_dur[sel, j]
                remaining[sel, slot] = work[sel, slot]
                started[sel, slot] = order + j
            order += int(count.max(initial=0))
            jobs.take(count)
        if progress is not None and (t + 1) % 1440 == 0:
            progress(1)
    minutes = n * T
    return RunResult(
        label=policy.label,
        utilisation=float(util_sum.mean()),
        shortfall=float(short_count.sum() / minutes),
        batch_core_hours=(used_batch - lost) / 60.0,
        evictions=evictions,
        online_unserved_core_hours=unserved / 60.0,
        held_back=held / minutes,
        util_by_minute=util_sum,
        shortfall_by_node=short_count / T,
        batch_by_minute=batch_sum,
        series=keep,
    )
