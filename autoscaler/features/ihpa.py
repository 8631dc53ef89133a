"""Katalyst IHPAs: each one decided by the HPA decider passed in (its template as an HPA) and its
status written (`routines/ihpa.py`)."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pandas as pd

from autoscaler.features.base import DECIDE, ForecastNeed
from autoscaler.model.cluster import ClusterState
from autoscaler.model.ihpa import KIND, IhpaDecision, IhpaView
from autoscaler.model.views import WorkloadKey
from autoscaler.output.objects import Change
from autoscaler.routines.context import RunContext, RunReport
from autoscaler.routines.ihpa import DecideHpa, decide_ihpas, ihpa_changes
from autoscaler.settings import ServeSettings


@dataclass
class IhpaSection:
    decisions: list[IhpaDecision] = field(default_factory=list)


class IhpaFeature:
    name, phase, write_rank, report_rank = "ihpa", DECIDE, 2, 5

    def __init__(self, settings: ServeSettings, decide: DecideHpa) -> None:
        self.settings, self.decide = settings, decide

    @property
    def enabled(self) -> bool:
        return self.settings.ihpa.enabled

    @property
    def kinds(self) -> tuple[str, ...]:
        return (KIND,) if self.enabled else ()

    def need(self, step: pd.Timedelta) -> ForecastNeed:
        return ForecastNeed()  # the HPA decider's (features/hpa.py)

    def workloads(self, state: ClusterState) -> set[WorkloadKey]:
        if not self.enabled:
            return set()
        keys = {IhpaView(o).workload_key() for o in state.others.get(KIND, [])}
        return {k for k in keys if k is not None}  # a malformed one is reported by the recommend step

    def run(self, rep: RunReport, ctx: RunContext) -> str:
        if not self.enabled:
            return "0 IHPA"
        section = rep.section(self.name, IhpaSection)
        section.decisions = decide_ihpas(self.decide, rep, ctx)
        return f"{len(section.decisions)} IHPA"

    def changes(self, rep: RunReport, state: ClusterState, now_iso: str, before: dict[str, Any]) -> list[Change]:
        return ihpa_changes(rep.section(self.name, IhpaSection, keep=False).decisions, state, before)

    def written(self, rep: RunReport) -> None:
        pass

    def report(self, rep: RunReport) -> dict[str, Any]:
        decided = rep.section(self.name, IhpaSection, keep=False).decisions
        return {"ihpa": {d.key: {"desiredReplicas": d.hpa.min_replicas, "scaleStrategy": d.strategy,
                                 "reason": d.hpa.reason.summary()} for d in decided}}
