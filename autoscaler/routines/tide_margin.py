"""The tide step's margin over a pool's forecast: calibrated from the forecast's own errors (as the
tide simulator's default plans, `studies/simulation/tide/policies.py`) or the fixed stack.

Calibrated (`tide.margin: calibrated`, the default): per pool and resource one
`autoscaler.logic.tide_calibration.ErrorLedger`, in memory. Each run first scores the forecasts of
earlier runs against the requests measured now (the online pods on the pool, pending ones
included), then reads the margins, then records this run's median forecast (scored by later runs
only); this happens once per forecast origin (a step, 5 min), the runs in between (every minute)
read the same margins, which bounds the ledger to a step's errors per step. The need per step is the median forecast + the `error_quantile` of its errors at that hour
of lead (last `error_days`), floored by the requests now + their 0.999-quantile rise within a
hand-back, packed with `pack_headroom`; hand-backs wait out a `return_slack` shortfall while the
floor is clear of the online side. Until every lead hour holds `error_min` of errors (a restarted
serve holds none) the plan uses the fixed stack: the forecast's `quantile` x (1 + `headroom`).
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from autoscaler.logic.tide import nodes_needed
from autoscaler.settings import TideSettings
from autoscaler.logic.tide_calibration import ErrorLedger
from autoscaler.routines.context import parse_duration

HOUR = 3600.0  # seconds of lead per bucket: the error grows with the hour of lead
# seconds from a run deciding a hand-back to online pods landing (node patch, evictions, scheduling):
# the simulator's 3 minutes; the rise is read over this plus one run's step
HAND_BACK = 180.0
RISE_QUANTILE = 0.999  # a rise faster than a hand-back cannot be waited for: one run in 1000 (the simulator's)


@dataclass
class PoolNeed:
    """Nodes per step for the plan, and how they were reached."""

    needed: np.ndarray
    needed_now: int | None  # nodes the requests measured now (+ their usual rise) need; None: no hysteresis
    return_slack: int
    margin: str  # which margin, and its size: in every move's reason


class TideMargins:
    """The error ledgers of every pool this serve has planned, by pool name (one per resource)."""

    def __init__(self) -> None:
        self.ledgers: dict[str, list[ErrorLedger]] = {}
        self.origins: dict[str, float] = {}  # the forecast origin each pool's ledgers last recorded
        self.read: dict[str, tuple[list[np.ndarray], np.ndarray, list[int]]] = {}  # margins, rises, min counts

    def need(self, pool: str, now: float, origin: float, step: float, fixed: np.ndarray, median: np.ndarray | None,
             measured: np.ndarray, capacity: np.ndarray, t: TideSettings) -> PoolNeed:
        """`fixed`/`median`: (steps, 2) millicpu and bytes at the forecast's quantile / median from
        `origin` (None: fixed margin); `measured`: (2,) requested now; `now`, `origin`, `step`: seconds."""
        stack = f"fixed margin: forecast q{t.quantile:g} x {1 + t.headroom:g}"
        if median is None:
            return PoolNeed(nodes_needed(fixed, capacity, t.headroom), None, 0, stack)
        ledgers = self.ledgers.setdefault(pool, [
            ErrorLedger(HOUR, max(1, math.ceil(len(median) * step / HOUR)), t.error_days * 86400.0, step + HAND_BACK)
            for _ in range(2)])
        leads = step * np.arange(len(median))
        if self.origins.get(pool) != origin:  # a new forecast origin: score, read, record
            for r, ledger in enumerate(ledgers):
                ledger.observe(now, float(measured[r]))
            runs = max(1, int(parse_duration(t.error_min).total_seconds() // step))
            mins = [runs * int(np.sum((leads // HOUR).astype(int) == b)) for b in range(len(ledgers[0].errors))]
            self.read[pool] = ([ledger.margins(t.error_quantile, mins) for ledger in ledgers],
                               np.array([ledger.rise(RISE_QUANTILE, runs) for ledger in ledgers]), mins)
            for r, ledger in enumerate(ledgers):  # after the read: this forecast is scored by later runs only
                ledger.forecast(origin, step, median[:, r])
            self.origins[pool] = origin
        margins, rises, mins = self.read[pool]
        if any(np.isnan(m).any() for m in margins) or np.isnan(rises).any():
            have = ledgers[0].counts()
            return PoolNeed(nodes_needed(fixed, capacity, t.headroom), None, 0,
                            f"{stack} (calibration not ready: errors per lead hour {have} of {mins} needed, "
                            f"{t.error_min} each; serve keeps them in memory, a restart starts again)")
        per_step = np.stack([ledgers[r].step_margins(margins[r], leads) for r in range(2)], axis=1)
        floor = measured + np.maximum(rises, 0.0)
        need = np.maximum(median + per_step, floor[None, :])
        needed_now = int(nodes_needed(floor[None, :], capacity, t.pack_headroom)[0])
        why = (f"calibrated margin: median forecast + q{t.error_quantile:g} of its errors over {t.error_days:g}d, "
               f"{per_step[:, 0].min():+.0f} to {per_step[:, 0].max():+.0f} mCPU by lead hour, floor "
               f"{floor[0]:.0f} mCPU now (+{max(rises[0], 0.0):.0f} rise), packed x {1 + t.pack_headroom:g}")
        return PoolNeed(nodes_needed(need, capacity, t.pack_headroom), needed_now, t.return_slack, why)
