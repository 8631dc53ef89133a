"""The 1-minute control loop: a cluster batch queue placed by each policy; online served first.

Every minute t, for all nodes at once (numpy over nodes x job slots):

1. the quota `Q` that the policy decided at the end of minute t-1 applies (one-minute delay);
2. if `Q` is below `evict_below` of the CPU requested by the node's running batch jobs, throttling
   is not enough: the newest jobs are evicted until the rest fit in `Q` (their work is lost, they
   go back to the head of the queue);
3. batch gets `b = min(requested batch, Q, capacity - system)`, shared by its jobs pro rata (a
   throttled job runs slower than nominal: its slowdown);
4. online services get `min(mean demand, capacity - system - b)`. Inside the minute their demand
   peaks above its mean (`Cluster.peak`, the burst model); batch held its CPU for the minute, so a
   node-minute whose *peak* did not fit beside batch counts as a shortfall;
5. finished jobs leave; the policy sees the minute's measurements and sets the next quota; the
   minute's arrivals join the queue and the policy places queued jobs (first come first served,
   backfilling within `lookahead`) on nodes whose next quota has room for them.

Per node-minute, system + online + batch + idle = capacity exactly (checked by the tests).
"""
from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Callable

import numpy as np

from studies.simulation.colocation.bursts import WINDOW
from studies.simulation.colocation.policies import Observation, Policy
from studies.simulation.colocation.slots import Slots
from studies.simulation.harness.batch import SIZES, Jobs, Queue, draw_jobs
from studies.simulation.harness.cluster import Cluster

log = logging.getLogger(__name__)

EPS = 1e-9
SHORT_EPS = 1e-6  # cores: below a micro-core, a "shortfall" is rounding


@dataclass
class EngineSettings:
    evict_below: float = 0.5  # evict when the quota covers under half of the running jobs' requests
    slots: int = 96  # job slots per node (0.5-core jobs on 30 cores need 60)
    lookahead: int = 32  # waiting jobs the scheduler considers per minute (backfilling)
    batch_load: float = 0.8  # arriving batch work, share of the cluster's allocatable (see batch.py)
    keep_series: bool = False  # keep nodes x minutes arrays (tests, conservation checks)


@dataclass
class RunResult:
    label: str
    utilisation: float
    shortfall: float
    batch_core_hours: float  # CPU batch used, evicted jobs' work included
    evictions: int
    online_unserved_core_hours: float  # online demand (its peaks) that batch delayed
    held_back: float  # mean cores per node-minute kept from batch beyond online demand: allocatable - quota - demand
    util_by_minute: np.ndarray  # mean over nodes, per minute
    shortfall_by_node: np.ndarray  # share of minutes, per node
    batch_by_minute: np.ndarray  # mean batch cores per node, per minute
    lost_core_hours: float = 0.0  # work of evicted jobs, done and thrown away
    jobs_completed: int = 0
    slowdown_p50: float = float("nan")  # (finish - first start) / nominal duration, completed jobs
    slowdown_p95: float = float("nan")
    series: dict[str, np.ndarray] = field(default_factory=dict)  # nodes x minutes when kept

    @property
    def goodput_core_hours(self) -> float:
        """Batch CPU net of the work evictions threw away."""
        return self.batch_core_hours - self.lost_core_hours

    def metrics(self) -> dict[str, float | int]:
        return {"utilisation": float(self.utilisation), "shortfall": float(self.shortfall),
                "batch_core_hours": float(self.batch_core_hours), "evictions": int(self.evictions),
                "goodput_core_hours": float(self.goodput_core_hours), "lost_core_hours": float(self.lost_core_hours),
                "jobs_completed": int(self.jobs_completed), "slowdown_p50": float(self.slowdown_p50),
                "slowdown_p95": float(self.slowdown_p95)}


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

    def result(self, label: str, nodes: int, jobs: Jobs, keep: dict[str, np.ndarray]) -> RunResult:
        minutes = nodes * len(self.util_sum)
        done = np.isfinite(jobs.finish)
        slow = (jobs.finish[done] - jobs.first_start[done]) / jobs.duration[done]
        p50, p95 = (float(np.quantile(slow, 0.5)), float(np.quantile(slow, 0.95))) if len(slow) else (np.nan, np.nan)
        return RunResult(
            label=label, utilisation=float(self.util_sum.mean()), shortfall=float(self.short_count.sum() / minutes),
            batch_core_hours=self.used_batch / 60.0, evictions=self.evictions,
            online_unserved_core_hours=self.unserved / 60.0, held_back=self.held / minutes,
            util_by_minute=self.util_sum, shortfall_by_node=self.short_count / len(self.util_sum),
            batch_by_minute=self.batch_sum, lost_core_hours=self.lost / 60.0, jobs_completed=int(done.sum()),
            slowdown_p50=p50, slowdown_p95=p95, series=keep)


def place_queued(t: int, quota: np.ndarray, slots: Slots, queue: Queue, policy: Policy, lookahead: int) -> None:
    """The scheduler: the first `lookahead` waiting jobs in order, each where the policy places it.

    Plain Python lists over the nodes: per job, list operations on 40 numbers beat numpy calls."""
    jobs = queue.jobs
    room = slots.free_slots().tolist()
    free = [f if r > 0 else -np.inf for f, r in zip((quota - slots.requested()).tolist(), room)]
    smallest = float(SIZES.min()) - EPS
    most = max(free)
    if most < smallest:
        return
    policy.begin_placement(t, free)
    unplaced: list[int] = []
    ids = queue.head(lookahead)
    for i, j in enumerate(ids):
        size, duration = queue.sizes[j], queue.durations[j]
        node = policy.place(free, size, duration) if most >= size - EPS else -1
        if node < 0:
            unplaced.append(j)
            continue
        slots.start(node, j, size, duration)
        if jobs.first_start[j] > t + 1:
            jobs.first_start[j] = t + 1  # it runs from the next minute
        free[node] -= size
        room[node] -= 1
        if room[node] <= 0:
            free[node] = -np.inf
        most = max(free)
        if most < smallest:
            unplaced += ids[i + 1:]
            break
    queue.put_back(unplaced)


def simulate(cluster: Cluster, policy: Policy, seed: int, settings: EngineSettings | None = None,
             progress: Callable[[int], None] | None = None) -> RunResult:
    """Run one policy over the whole cluster; the same seed gives the same jobs to every policy."""
    es = settings or EngineSettings()
    n, T = cluster.nodes, cluster.minutes
    cap = cluster.capacity
    jobs = draw_jobs(T, n, cluster.allocatable, seed, es.batch_load)
    queue = Queue(jobs)
    slots = Slots(n, es.slots)
    policy.reset(cluster)
    quota = np.zeros(n)
    tally = Tally(np.zeros(T), np.zeros(T), np.zeros(n))
    keep = {k: np.zeros((n, T)) for k in ("online", "batch", "system", "idle", "quota", "demand")} \
        if es.keep_series else {}
    peaks = cluster.peak
    for t in range(T):
        demand, peak, system = cluster.online[:, t], peaks[:, t], cluster.system[:, t]
        # 2. eviction: newest first, until the rest fit in the quota; back to the head of the queue
        evicted, lost = slots.evict(quota, es.evict_below)
        if len(evicted):
            tally.evictions += len(evicted)
            tally.lost += lost
            jobs.evictions[evicted] += 1
            queue.requeue(evicted)
        requested = slots.requested()
        # 3. batch runs inside its quota
        b = np.maximum(np.minimum(np.minimum(requested, quota), cap - system), 0.0)
        slots.run(b, requested)
        # 4. online gets what is left; its peak inside the minute is what must fit
        room = cap - system - b
        online = np.minimum(demand, room)
        short = (peak - room > SHORT_EPS) & (b > EPS)
        tally.short_count += short
        # a burst is one of the minute's WINDOW sub-periods: what did not fit waited that long
        tally.unserved += float((np.minimum(peak, cap - system) - room)[short].sum()) / WINDOW
        tally.used_batch += float(b.sum())
        tally.held += float((cluster.allocatable - quota - demand).sum())
        tally.util_sum[t] = ((system + online + b) / cap).mean()
        tally.batch_sum[t] = b.mean()
        if keep:
            keep["online"][:, t], keep["batch"][:, t], keep["system"][:, t] = online, b, system
            keep["idle"][:, t], keep["quota"][:, t], keep["demand"][:, t] = cap - system - online - b, quota, demand
        # 5. finished jobs leave; the policy sets the next quota; arrivals; placement against it
        jobs.finish[slots.finish()] = t + 1
        quota = np.clip(policy.decide(Observation(t, online, demand, system, b, peak)), 0.0, cap)
        queue.arrive(t)
        place_queued(t, quota, slots, queue, policy, es.lookahead)
        if progress is not None and (t + 1) % 1440 == 0:
            progress(1)
    return tally.result(policy.label, n, jobs, keep)
