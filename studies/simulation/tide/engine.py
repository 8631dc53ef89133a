"""The tide simulator's 1-minute loop: whole nodes move between online service and the batch queue.

Every minute t:

1. nodes handed back `return_minutes` ago serve online again;
2. the online side (nodes serving online) is compared with the nodes the HPA's pods need: a
   **late minute** is one in which online service needed more nodes than it had (never counted
   for a need beyond the whole pool: that no policy could serve);
3. batch jobs run at full speed on lent nodes (a whole node is batch's: `allocatable` cores) and
   finished ones leave;
4. the policy sees the minute and moves nodes. A lend drains the online side's mean pods per
   node (online pods moved) and the node takes batch `drain_minutes` later; a hand-back evicts
   the node's batch pods at once (their work is lost; they go back to the head of the queue) and
   the node serves online `return_minutes` later;
5. arrivals join the queue (`batch.draw_jobs`, the colocation simulator's seeded jobs) and the
   scheduler places the first `lookahead` waiting jobs first fit on lent nodes (backfilling).

Metrics: node-hours lent (minutes a node spent on the batch side), late minutes, pods moved
(online pods drained + batch pods evicted), goodput (batch core-hours less the work evictions
threw away).
"""
from __future__ import annotations

import heapq
from dataclasses import dataclass, field
from typing import Callable

import numpy as np

from autoscaler.logic.tide import LEND, RETURN, TideNode
from studies.simulation.harness.batch import Queue, draw_jobs
from studies.simulation.harness.traces import DAY_MIN
from studies.simulation.tide.model import OnlinePool
from studies.simulation.tide.policies import PoolView, TidePolicy

EPS = 1e-9
ONLINE, LENT, RETURNING = 0, 1, 2


@dataclass
class TideRun:
    label: str
    node_hours_lent: float
    late_minutes: int
    online_pods_drained: float
    batch_pods_evicted: int
    goodput_core_hours: float
    lost_core_hours: float
    lends: int
    returns: int
    jobs_completed: int
    days: float
    online_nodes: np.ndarray = field(repr=False)  # per minute: nodes serving online
    lent_nodes: np.ndarray = field(repr=False)  # per minute: nodes on the batch side

    @property
    def pods_moved(self) -> int:
        return int(round(self.online_pods_drained)) + self.batch_pods_evicted

    def metrics(self) -> dict[str, float | int]:
        """results.json's four keys first, then what explains them."""
        return {"node_hours_lent": float(self.node_hours_lent), "late_minutes": int(self.late_minutes),
                "pods_moved": self.pods_moved, "goodput_core_hours": float(self.goodput_core_hours),
                "pods_moved_per_day": self.pods_moved / self.days,
                "online_pods_drained": int(round(self.online_pods_drained)),
                "batch_pods_evicted": int(self.batch_pods_evicted), "lost_core_hours": float(self.lost_core_hours),
                "lends": int(self.lends), "returns": int(self.returns), "jobs_completed": int(self.jobs_completed)}


class _Batch:
    """Jobs running on lent nodes: node -> {job: start minute}, ends in a heap (stale entries skipped)."""

    def __init__(self, nodes: int, allocatable: float, queue: Queue):
        self.queue, self.jobs = queue, queue.jobs
        self.running: list[dict[int, int]] = [{} for _ in range(nodes)]
        self.free = [allocatable] * nodes
        self.ends: list[tuple[int, int, int, int]] = []  # (end, job, start, node)
        self.used = 0.0  # core-minutes
        self.lost = 0.0
        self.evicted = 0

    def finish(self, t: int) -> None:
        while self.ends and self.ends[0][0] <= t:
            end, j, start, n = heapq.heappop(self.ends)
            if self.running[n].get(j) == start:
                del self.running[n][j]
                self.free[n] += self.queue.sizes[j]
                self.used += self.queue.sizes[j] * self.queue.durations[j]
                self.jobs.finish[j] = end

    def evict_node(self, n: int, t: int) -> int:
        """Every job on node n leaves at the start of minute t; their work so far is lost."""
        ids = list(self.running[n])
        for j, start in self.running[n].items():
            done = self.queue.sizes[j] * max(0, t - start)
            self.used += done
            self.lost += done
            self.free[n] += self.queue.sizes[j]
        self.running[n].clear()
        self.jobs.evictions[ids] += 1
        self.queue.requeue(np.array(ids, dtype=np.int64))
        self.evicted += len(ids)
        return len(ids)

    def place(self, t: int, ready: list[int], lookahead: int) -> None:
        """First fit of the first `lookahead` waiting jobs on the ready lent nodes, from minute t."""
        if not ready:
            return
        unplaced = []
        for j in self.queue.head(lookahead):
            size = self.queue.sizes[j]
            n = next((n for n in ready if self.free[n] >= size - EPS), -1)
            if n < 0:
                unplaced.append(j)
                continue
            self.running[n][j] = t
            self.free[n] -= size
            heapq.heappush(self.ends, (t + int(self.queue.durations[j]), j, t, n))
            if self.jobs.first_start[j] > t:
                self.jobs.first_start[j] = t
        self.queue.put_back(unplaced)

    def close(self, t: int) -> None:
        """Jobs still running at the end: their work so far counts (as in the colocation simulator)."""
        for n, running in enumerate(self.running):
            for j, start in running.items():
                self.used += self.queue.sizes[j] * max(0, t - start)


def _view(t: int, pool: OnlinePool, state: np.ndarray, moved_at: np.ndarray, batch: _Batch) -> PoolView:
    online = int((state == ONLINE).sum())
    per_node = int(round(pool.pods[t] / max(online, 1)))
    nodes = [TideNode(f"node-{n:03d}", lent=bool(state[n] == LENT),
                      online_pods=per_node if state[n] == ONLINE else 0, batch_pods=len(batch.running[n]),
                      moved_at=None if moved_at[n] < 0 else 60.0 * moved_at[n]) for n in range(len(state))]
    return PoolView(t, float(pool.requested[t]), int(pool.needed[t]), nodes)


def simulate_tide(pool: OnlinePool, policy: TidePolicy, seed: int, batch_load: float = 0.8, lookahead: int = 32,
                  progress: Callable[[int], None] | None = None) -> TideRun:
    """One policy over the pool; the same seed gives every policy the same batch jobs."""
    ps, N, T = pool.settings, pool.nodes, pool.minutes
    queue = Queue(draw_jobs(T, N, pool.allocatable, seed, batch_load))
    batch = _Batch(N, pool.allocatable, queue)
    state = np.full(N, ONLINE)
    ready_at = np.zeros(N, dtype=np.int64)  # RETURNING: serves online from; LENT: takes batch from
    moved_at = np.full(N, -1, dtype=np.int64)
    online_series, lent_series = np.zeros(T, dtype=np.int64), np.zeros(T, dtype=np.int64)
    late, drained, lends, returns = 0, 0.0, 0, 0
    policy.reset(pool)
    for t in range(T):
        state[(state == RETURNING) & (ready_at <= t)] = ONLINE
        online = int((state == ONLINE).sum())
        online_series[t], lent_series[t] = online, int((state == LENT).sum())
        late += int(min(int(pool.needed[t]), N) > online)
        batch.finish(t + 1)
        by_name = {f"node-{n:03d}": n for n in range(N)}
        for move in policy.decide(_view(t, pool, state, moved_at, batch)):
            n = by_name[move.node]
            if move.action == LEND and state[n] != LENT:
                if state[n] == ONLINE:
                    drained += pool.pods[t] / max(online, 1)
                    online -= 1
                state[n], ready_at[n], moved_at[n] = LENT, t + 1 + ps.drain_minutes, t
                lends += 1
            elif move.action == RETURN and state[n] == LENT:
                batch.evict_node(n, t + 1)
                state[n], ready_at[n], moved_at[n] = RETURNING, t + 1 + ps.return_minutes, t
                returns += 1
        queue.arrive(t)
        batch.place(t + 1, [n for n in range(N) if state[n] == LENT and ready_at[n] <= t + 1], lookahead)
        if progress is not None and (t + 1) % DAY_MIN == 0:
            progress(1)
    batch.close(T)
    return TideRun(policy.label, float(lent_series.sum()) / 60.0, late, drained, batch.evicted,
                   (batch.used - batch.lost) / 60.0, batch.lost / 60.0, lends, returns,
                   int(np.isfinite(queue.jobs.finish).sum()), T / DAY_MIN, online_series, lent_series)
