"""The cluster's batch (`reclaimed_cores`) queue: jobs arrive at the cluster, a scheduler places them.

Arrivals are a seeded Poisson process at the cluster: `load` x nodes x allocatable cores of work
per minute on average (0.8 by default: more than any policy can offer next to the online services,
so the queue never empties and what a policy offers, not what arrives, bounds the batch work).
Sizes and durations keep the mix of batch traces (many small short tasks, a long tail): size
0.5/1/2/4 cores with probabilities 0.25/0.35/0.25/0.15; duration log-normal with a 30-minute median
(sigma 1: a tenth of jobs run over 1 h 45 min), clipped to [5 min, 12 h]. A job's duration is its
nominal runtime at full speed, and it is what the job declares (as a batch system's time limit):
a scheduler may read it. Every policy run draws the same jobs at the same minutes (one seed).

The queue is first come first served with backfilling: the scheduler looks at the first
`lookahead` waiting jobs in order and places each that fits somewhere. An evicted job goes back
to the head of the queue and restarts from zero (its work is lost).
"""
from __future__ import annotations

from collections import deque
from dataclasses import dataclass

import numpy as np

SIZES = np.array([0.5, 1.0, 2.0, 4.0])
SIZE_P = np.array([0.25, 0.35, 0.25, 0.15])
DURATION_MEDIAN_MIN = 30.0
DURATION_SIGMA = 1.0
DURATION_RANGE = (5.0, 720.0)


def mean_work() -> float:
    """Core-minutes of work per job on average (size x clipped log-normal duration), by sampling."""
    rng = np.random.default_rng(0)
    dur = np.clip(np.round(rng.lognormal(np.log(DURATION_MEDIAN_MIN), DURATION_SIGMA, 200_000)), *DURATION_RANGE)
    return float((SIZES * SIZE_P).sum() * dur.mean())


@dataclass
class Jobs:
    """Every job of a run: size (cores), nominal duration (minutes), arrival minute, and what happened."""

    size: np.ndarray
    duration: np.ndarray
    arrival: np.ndarray
    first_start: np.ndarray  # minute the job first started (inf: never)
    finish: np.ndarray  # minute its work was done (inf: not done)
    evictions: np.ndarray

    @property
    def work(self) -> np.ndarray:
        return self.size * self.duration


def draw_jobs(minutes: int, nodes: int, allocatable: float, seed: int, load: float = 0.8) -> Jobs:
    """The run's arrivals: Poisson per minute at `load` x nodes x allocatable cores of work a minute."""
    rng = np.random.default_rng(np.random.SeedSequence([seed, 2]))
    rate = load * nodes * allocatable / mean_work()  # jobs per minute
    counts = rng.poisson(rate, size=minutes)
    total = int(counts.sum())
    size = rng.choice(SIZES, p=SIZE_P, size=total)
    dur = np.clip(np.round(rng.lognormal(np.log(DURATION_MEDIAN_MIN), DURATION_SIGMA, size=total)), *DURATION_RANGE)
    arrival = np.repeat(np.arange(minutes), counts).astype(float)
    return Jobs(size, dur, arrival, np.full(total, np.inf), np.full(total, np.inf), np.zeros(total, dtype=np.int64))


class Queue:
    """Waiting jobs in order: arrivals join at the tail, evicted jobs go back to the head."""

    def __init__(self, jobs: Jobs):
        self.jobs = jobs
        self.waiting: deque[int] = deque()
        self._next = 0  # the next job not yet arrived
        self.sizes: list[float] = jobs.size.tolist()  # per-job reads in the scheduler's loop
        self.durations: list[float] = jobs.duration.tolist()

    def arrive(self, t: int) -> None:
        end = int(np.searchsorted(self.jobs.arrival, t, side="right"))
        self.waiting.extend(range(self._next, end))
        self._next = max(self._next, end)

    def requeue(self, ids: np.ndarray) -> None:
        for j in sorted(ids.tolist(), reverse=True):  # the oldest ends up first
            self.waiting.appendleft(int(j))

    def head(self, k: int) -> list[int]:
        """Take the first k waiting jobs out; give back the unplaced with `put_back`."""
        return [self.waiting.popleft() for _ in range(min(k, len(self.waiting)))]

    def put_back(self, ids: list[int]) -> None:
        for j in reversed(ids):
            self.waiting.appendleft(j)
