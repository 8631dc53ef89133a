"""Katalyst ServiceProfileDescriptors: for every workload that opts in, the SPD Tidewise wants,
created or merge-patched where Tidewise's parts differ (`routines/spd.py`)."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pandas as pd

from autoscaler.features.base import DECIDE, ForecastNeed
from autoscaler.model.cluster import ClusterState, Obj
from autoscaler.model.views import WorkloadKey
from autoscaler.output.objects import Change
from autoscaler.routines.context import RunContext, RunReport
from autoscaler.routines.spd import KIND, SpdProfiles, spd_changes
from autoscaler.settings import ServeSettings


@dataclass
class SpdSection:
    wanted: list[tuple[Obj, Obj | None]] = field(default_factory=list)  # (SPD wanted, SPD held)


class SpdFeature:
    name, phase, write_rank, report_rank = "spd", DECIDE, 3, 6

    def __init__(self, settings: ServeSettings) -> None:
        self.settings = settings
        self.profiles = SpdProfiles()  # each workload's profile, built once a day

    @property
    def enabled(self) -> bool:
        return self.settings.spd.enabled

    @property
    def kinds(self) -> tuple[str, ...]:
        return (KIND,) if self.enabled else ()

    def need(self, step: pd.Timedelta) -> ForecastNeed:
        return ForecastNeed()  # profiles are built from the history, not from forecasts

    def workloads(self, state: ClusterState) -> set[WorkloadKey]:
        return set()

    def run(self, rep: RunReport, ctx: RunContext) -> str:
        if not self.enabled:
            return ""
        section = rep.section(self.name, SpdSection)
        section.wanted = self.profiles.run(rep, ctx, self.settings.spd, self.settings.loop.history_window)
        return f"{len(section.wanted)} SPD"

    def changes(self, rep: RunReport, state: ClusterState, now_iso: str, before: dict[str, Any]) -> list[Change]:
        return spd_changes(rep.section(self.name, SpdSection, keep=False).wanted, before)

    def written(self, rep: RunReport) -> None:
        pass

    def report(self, rep: RunReport) -> dict[str, Any]:
        wanted = rep.section(self.name, SpdSection, keep=False).wanted
        return {"spd": sorted(f"{o['metadata']['namespace']}/{o['metadata']['name']}" for o, _ in wanted)}
