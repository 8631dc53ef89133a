"""The batch (`reclaimed_cores`) job queue: an endless, seeded stream of jobs per node.

Sizes and durations follow the shape of batch traces (many small short tasks, a long tail): size
0.5/1/2/4 cores with probabilities 0.25/0.35/0.25/0.15; duration log-normal with a 30-minute median
(sigma 1: a tenth of jobs run over 1 h 45 min), clipped to [5 min, 12 h]. The stream never runs
dry, so whatever a policy offers can be filled. Every policy run draws the same jobs in the same
order (blocks generated in sequence from one seed): policies are compared on common random numbers.
"""
from __future__ import annotations

import numpy as np

SIZES = np.array([0.5, 1.0, 2.0, 4.0])
SIZE_P = np.array([0.25, 0.35, 0.25, 0.15])
DURATION_MEDIAN_MIN = 30.0
DURATION_SIGMA = 1.0
DURATION_RANGE = (5.0, 720.0)


class JobStream:
    """Per node, the jobs waiting in line: `size[n, i]` cores for `duration[n, i]` minutes."""

    def __init__(self, nodes: int, seed: int, block: int = 2048):
        self.nodes = nodes
        self.block = block
        self._rng = np.random.default_rng(np.random.SeedSequence([seed, 2]))
        self.size = np.zeros((nodes, 0))
        self.duration = np.zeros((nodes, 0))
        self.head = np.zeros(nodes, dtype=np.int64)  # next job to admit on each node
        self._grow()

    def _grow(self) -> None:
        size = self._rng.choice(SIZES, p=SIZE_P, size=(self.nodes, self.block))
        dur = np.clip(np.round(self._rng.lognormal(np.log(DURATION_MEDIAN_MIN), DURATION_SIGMA,
                                                   size=(self.nodes, self.block))), *DURATION_RANGE)
        self.size = np.concatenate([self.size, size], axis=1)
        self.duration = np.concatenate([self.duration, dur], axis=1)

    def peek(self, k: int) -> tuple[np.ndarray, np.ndarray]:
        """The next k jobs of every node (nodes x k), without taking them."""
        while int(self.head.max()) + k > self.size.shape[1]:
            self._grow()
        idx = self.head[:, None] + np.arange(k)[None, :]
        rows = np.arange(self.nodes)[:, None]
        return self.size[rows, idx], self.duration[rows, idx]

    def take(self, counts: np.ndarray) -> None:
        self.head += counts.astype(np.int64)
