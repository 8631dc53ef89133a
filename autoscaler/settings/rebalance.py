"""The `serve: rebalance:` section: moving pods off nodes whose forecast peak will be hot
(`autoscaler/logic/rebalance.py` plans with it; the rebalance study sweeps it)."""
from __future__ import annotations

from dataclasses import dataclass

from contracts.eviction_markers import check_rule


@dataclass
class RebalanceSettings:
    """The `serve: rebalance:` section (off by default: moving pods is a choice an operator makes)."""

    enabled: bool = False
    # how far ahead a node's peak is read: 2 h covers the next rise of a daily tide while a move
    # (eviction + scheduling + start-up, minutes) still lands well before it
    horizon: str = "2h"
    # forecast quantile of each pod's usage. 0.5: the sum of pods' medians is the node's median, where
    # summed q0.9s over-state the node's own q0.9, call cool nodes hot and leave no destination; on the
    # real traces (BENCHMARKS.md, "rebalance") q0.9 left 2-3x more hot node-minutes than q0.5
    quantile: float = 0.5
    # the first step of a pod's demand is at least its last observed usage: what the forecast missed
    # (an anomaly, a level shift) is still seen, as a reactive descheduler would see it
    with_current: bool = True
    high_cpu: float = 0.8  # fraction of allocatable: a forecast CPU peak above it makes the node hot
    high_memory: float = 0.9  # memory is not compressible: a later threshold, but a harder one
    target_cpu: float = 0.7  # pods are moved until the forecast peak is under this (hysteresis below high)
    target_memory: float = 0.8
    low_cpu: float = 0.6  # a cool node: forecast peak under these (Koordinator's low thresholds)
    low_memory: float = 0.7
    # how full a destination may get, its forecast peak with the pod: "target" (the level the hot node
    # is brought down to; Koordinator fills its idle nodes up to the high thresholds) or "low" (it must
    # stay a cool node). On the real traces "low" left 1.6x the hot node-minutes of "target": over a
    # 2 h horizon few nodes stay under 0.6, so hot nodes found nowhere to go
    fill_to: str = "target"
    max_per_run: int = 5  # evictions planned per run, all nodes together
    max_per_owner: int = 1  # pods of one workload per run: a Deployment never loses two replicas at once
    per_minute: int = 5  # evictions sent in any 60 s (the Evictor's sliding window)
    # pods with emptyDir/hostPath volumes lose that data when moved: "never" (kept), "memory" (an
    # emptyDir in memory, a cache, may go) or "always"
    evict_local_storage: str = "never"

    def check(self) -> None:
        """ValueError naming the field when the thresholds are out of order or out of (0, 1]."""
        for res in ("cpu", "memory"):
            low, target, high = (getattr(self, f"{k}_{res}") for k in ("low", "target", "high"))
            if not 0 < low <= target <= high <= 1:
                raise ValueError(f"rebalance thresholds for {res}: need 0 < low_{res} ({low}) <= target_{res} "
                                 f"({target}) <= high_{res} ({high}) <= 1")
        if self.fill_to not in ("low", "target"):
            raise ValueError(f"rebalance.fill_to {self.fill_to!r}: low or target")
        if not 0 < self.quantile < 1:
            raise ValueError(f"rebalance.quantile {self.quantile}: between 0 and 1")
        if self.max_per_run < 0 or self.max_per_owner < 0 or self.per_minute < 0:
            raise ValueError("rebalance.max_per_run, max_per_owner and per_minute must be >= 0")
        check_rule(self.evict_local_storage, "rebalance.evict_local_storage")
