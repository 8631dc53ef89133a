"""The forecaster's own errors per hour of lead, and the measured need's rises: the tide plan's
calibrated margin (issue 17). Pure (numpy only); serve's tide step and the studies' tide simulator
keep one `ErrorLedger` per pool (and resource) and read the same numbers from it.

A forecast is recorded when it is made (`forecast(origin, step, values)`: values[k] is for time
origin + k x step). When a time is observed (`observe(time, actual)`), every recorded forecast made
at or before that time whose horizon reaches it adds the error `actual - forecast` under its hour
of lead (lead // bucket). Nothing is scored before it is observed, so a margin read at time t holds
no error from after t. The margin is `forecast_margin` (a quantile) over the errors of the last
`window` time units. The measured need read as a forecast `reaction` ahead (a hand-back decided
now serves that much later) has an error too: how far the need rose in that time, `rise()`, the
margin of the floor. Times are in the caller's unit (the simulator: minutes, serve: seconds).
"""
from __future__ import annotations

import math
from collections import deque
from typing import Sequence

import numpy as np

from autoscaler.logic.tide import forecast_margin


class ErrorLedger:
    """Past errors per lead bucket and past rises of the need, from observations only, over `window`."""

    def __init__(self, bucket: float, buckets: int, window: float, reaction: float) -> None:
        if bucket <= 0 or buckets < 1 or window <= 0 or reaction <= 0:
            raise ValueError("bucket, window and reaction must be > 0 and buckets >= 1")
        self.bucket, self.window, self.reaction = bucket, window, reaction
        self.errors: list[deque[tuple[float, float]]] = [deque() for _ in range(buckets)]
        self.pending: list[tuple[float, float, np.ndarray]] = []  # (origin, step, values), oldest first
        self.seen: deque[tuple[float, float]] = deque()  # (time, need) since time - reaction
        self.rises: deque[tuple[float, float]] = deque()

    def forecast(self, origin: float, step: float, values: np.ndarray) -> None:
        """A forecast made at `origin`: values[k] is what it says for [origin + k x step, + step)."""
        self.pending.append((origin, step, np.asarray(values, dtype=float)))

    def observe(self, time: float, actual: float) -> None:
        """`actual` was measured at `time`: score every recorded forecast made at or before it."""
        cut = time - self.reaction
        while len(self.seen) > 1 and self.seen[1][0] <= cut:
            self.seen.popleft()
        if self.seen and self.seen[0][0] <= cut:
            self.rises.append((time, actual - self.seen[0][1]))
        self.seen.append((time, actual))
        kept = []
        for origin, step, values in self.pending:
            k = math.floor((time - origin) / step + 1e-9)  # the step whose interval holds `time`
            if k >= len(values):
                continue  # its horizon has passed: nothing more to score
            kept.append((origin, step, values))
            b = int(k * step // self.bucket)
            if 0 <= k and origin <= time and b < len(self.errors):
                self.errors[b].append((time, actual - float(values[k])))
        self.pending = kept
        for d in (*self.errors, self.rises):
            while d and d[0][0] <= time - self.window:
                d.popleft()

    def counts(self) -> list[int]:
        """Errors held per lead bucket."""
        return [len(d) for d in self.errors]

    def margins(self, quantile: float, min_count: int | Sequence[int]) -> np.ndarray:
        """Per lead bucket, the `quantile` of its errors; NaN where fewer than min_count (one for all
        buckets or one per bucket)."""
        mins = [min_count] * len(self.errors) if isinstance(min_count, int) else list(min_count)
        return np.array([forecast_margin([np.fromiter((e for _, e in d), float, len(d))], quantile, m)[0]
                         for d, m in zip(self.errors, mins)])

    def rise(self, quantile: float, min_count: int) -> float:
        """How far the need rose within `reaction` at this quantile (NaN: fewer than min_count rises)."""
        return float(forecast_margin([np.fromiter((r for _, r in self.rises), float, len(self.rises))],
                                     quantile, min_count)[0])

    def step_margins(self, margins: np.ndarray, leads: np.ndarray) -> np.ndarray:
        """The margin of each step of a plan, from its lead (time since the forecast was made; leads
        past the last bucket take the last bucket's)."""
        b = (np.asarray(leads) // self.bucket).astype(int)
        return np.asarray(margins)[np.clip(b, 0, len(margins) - 1)]
