"""Rebalancing (`serve --rebalance`, `tidewise rebalance`): pods moved off nodes whose forecast peak
will be hot, each through the one Evictor (`routines/rebalance.py`). Evicts only with --apply."""
from __future__ import annotations

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
from autoscaler.routines.rebalance import PDB_KIND, Rebalancer, RebalanceResult
from autoscaler.settings import ServeSettings


class RebalanceFeature:
    # ACT: after the guardrails step (the kill switch), before write (decisions.json lists the moves)
    name, phase, write_rank, report_rank = "rebalance", ACT, 6, 3

    def __init__(self, settings: ServeSettings, policy: ChangePolicy, step: pd.Timedelta, sink: Sink | None,
                 evictor: Evictor | None) -> None:
        self.settings = settings
        self.rebalancer = Rebalancer(settings.rebalance, step, evictor, sink, policy=policy)

    @property
    def enabled(self) -> bool:
        return self.settings.rebalance.enabled

    @property
    def kinds(self) -> tuple[str, ...]:
        return (PDB_KIND,) if self.enabled else ()  # budgets are checked before an eviction is asked for

    def need(self, step: pd.Timedelta) -> ForecastNeed:
        s = self.settings.rebalance
        return ForecastNeed(parse_duration(s.horizon), (s.quantile,), every_pod=True) if s.enabled else ForecastNeed()

    def workloads(self, state: ClusterState) -> set[WorkloadKey]:
        return set()

    def run(self, rep: RunReport, ctx: RunContext) -> str:
        detail, result = self.rebalancer.run(rep, ctx)
        if result is not None:
            rep.sections[self.name] = result  # RebalanceResult: the plan and what became of each move
        return detail

    def changes(self, rep: RunReport, state: ClusterState, now_iso: str, before: dict[str, Any]) -> list[Change]:
        return []  # its evictions go out in its own step

    def written(self, rep: RunReport) -> None:
        pass

    def report(self, rep: RunReport) -> dict[str, Any]:
        result = rep.sections.get(self.name)
        return {"rebalance": result.as_dict() if isinstance(result, RebalanceResult) else None}
