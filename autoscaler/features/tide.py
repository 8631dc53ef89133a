"""Tidal node pools (issue 17): Katalyst TideNodePools' tide nodes lent to batch while the forecast
leaves them idle and handed back a lead time ahead (`routines/tide.py`). Writes only with loop.apply."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pandas as pd

from autoscaler.features.base import ACT, ForecastNeed
from autoscaler.model.cluster import ClusterState
from autoscaler.model.views import WorkloadKey
from autoscaler.output.eviction import Evictor
from autoscaler.output.sinks import Sink
from autoscaler.output.objects import Change
from autoscaler.routines.change_policy import ChangePolicy
from autoscaler.routines.context import RunContext, RunReport, parse_duration
from autoscaler.routines.tide import TideStep
from autoscaler.settings import ServeSettings


@dataclass
class TideSection:
    pools: list[dict[str, Any]] = field(default_factory=list)  # per TideNodePool: plan, moves, patches


class TideFeature:
    # ACT, before rebalance: hand-backs are first to the Evictor's limit
    name, phase, write_rank, report_rank = "tide", ACT, 5, 4

    def __init__(self, settings: ServeSettings, policy: ChangePolicy, sink: Sink | None, evictor: Evictor | None) -> None:
        self.settings = settings
        self.tide = TideStep(settings, sink, evictor, policy)

    @property
    def enabled(self) -> bool:
        return self.settings.tide.enabled

    @property
    def kinds(self) -> tuple[str, ...]:
        return ("TideNodePool", "PodDisruptionBudget") if self.enabled else ()

    def need(self, step: pd.Timedelta) -> ForecastNeed:
        t = self.settings.tide
        if not t.enabled:
            return ForecastNeed()
        # nodes needed over lead + min_dwell (routines/tide.py)
        return ForecastNeed(parse_duration(t.lead) + parse_duration(t.min_dwell) + step, (t.quantile,), every_pod=True)

    def workloads(self, state: ClusterState) -> set[WorkloadKey]:
        return set()

    def run(self, rep: RunReport, ctx: RunContext) -> str:
        return self.tide(rep, ctx, rep.section(self.name, TideSection).pools)

    def changes(self, rep: RunReport, state: ClusterState, now_iso: str, before: dict[str, Any]) -> list[Change]:
        return []  # its node patches, evictions and pool status go out in its own step

    def written(self, rep: RunReport) -> None:
        pass

    def report(self, rep: RunReport) -> dict[str, Any]:
        section = rep.sections.get(self.name)
        return {"tide": section.pools if isinstance(section, TideSection) else []}
