"""The batch jobs running on every node: nodes x job slots, throttled, evicted and finished together.

Each slot holds a job id (-1: free), its size (cores requested), work left and in total
(core-minutes) and its start order (for newest-first eviction). Numpy over nodes x slots for what
happens to every job each minute; one job at a time only for starting it.
"""
from __future__ import annotations

import numpy as np

EPS = 1e-9


class Slots:
    def __init__(self, nodes: int, slots: int):
        self.size = np.zeros((nodes, slots))
        self.remaining = np.zeros((nodes, slots))
        self.work = np.zeros((nodes, slots))
        self.started = np.full((nodes, slots), np.inf)
        self.job = np.full((nodes, slots), -1, dtype=np.int64)
        self.order = 0
        self.rows = np.arange(nodes)[:, None]
        self.vacant = [list(range(slots - 1, -1, -1)) for _ in range(nodes)]  # free slots per node

    def requested(self) -> np.ndarray:
        return self.size.sum(axis=1)

    def free_slots(self) -> np.ndarray:
        return np.array([len(v) for v in self.vacant])

    def _free(self, mask: np.ndarray) -> np.ndarray:
        ids = self.job[mask]
        for node, slot in zip(*np.nonzero(mask)):
            self.vacant[int(node)].append(int(slot))
        self.size[mask] = 0.0
        self.remaining[mask] = 0.0
        self.work[mask] = 0.0
        self.started[mask] = np.inf
        self.job[mask] = -1
        return ids

    def evict(self, quota: np.ndarray, evict_below: float) -> tuple[np.ndarray, float]:
        """Where the quota covers under `evict_below` of the running requests, the newest jobs go
        until the rest fit in it. Returns (ids evicted, core-minutes of work they lose)."""
        requested = self.requested()
        over = quota < evict_below * requested - EPS
        if not over.any():
            return np.zeros(0, dtype=np.int64), 0.0
        newest_first = np.argsort(-self.started, axis=1, kind="stable")
        s_sorted = self.size[self.rows, newest_first]
        before = np.cumsum(s_sorted, axis=1) - s_sorted  # requests of the jobs newer than this one
        evict_sorted = over[:, None] & (s_sorted > 0) & (requested[:, None] - before > quota[:, None] + EPS)
        evict = np.zeros_like(evict_sorted)
        evict[self.rows, newest_first] = evict_sorted
        lost = float((self.work - self.remaining)[evict].sum())
        return self._free(evict), lost

    def run(self, b: np.ndarray, requested: np.ndarray) -> None:
        """A minute of work: the `b` cores batch got on each node, shared by its jobs pro rata."""
        frac = np.divide(b, requested, out=np.zeros(len(b)), where=requested > EPS)
        self.remaining -= self.size * frac[:, None]

    def finish(self) -> np.ndarray:
        """Jobs whose work is done leave; their ids."""
        done = (self.job >= 0) & (self.remaining <= EPS)
        return self._free(done) if done.any() else np.zeros(0, dtype=np.int64)

    def start(self, node: int, job: int, size: float, duration: float) -> None:
        if not self.vacant[node]:
            raise ValueError(f"node {node} has no free job slot")
        slot = self.vacant[node].pop()
        self.size[node, slot] = size
        self.work[node, slot] = self.remaining[node, slot] = size * duration
        self.started[node, slot] = self.order
        self.job[node, slot] = job
        self.order += 1
