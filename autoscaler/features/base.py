"""What a serving feature is to the loop (issue 23): one object that declares the cluster kinds it
reads, what it needs of the forecast, its step, the changes it proposes and its report section.

The loop (`routines/loop.py`), the change step (`routines/changes.py`), serve's extra kinds and the
report iterate over the tuple `autoscaler.features.features()` builds; none of them names a feature.
A new feature is one module here and one line in that function.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

import pandas as pd

from autoscaler.model.cluster import ClusterState
from autoscaler.model.views import WorkloadKey
from autoscaler.output.objects import Change
from autoscaler.routines.context import RunContext, RunReport

# where a feature's step runs: DECIDE inside the loop's "recommend" step (decisions only, written by
# the write step through the change policy); ACT as a step of its own after the guardrails step (the
# kill switch is known) and before the write step
DECIDE, ACT = "decide", "act"


@dataclass(frozen=True)
class ForecastNeed:
    """What a feature's decisions read of this run's forecast."""

    horizon: pd.Timedelta = pd.Timedelta(0)  # how far ahead of the origin (the loop adds nothing)
    quantiles: tuple[float, ...] = ()
    every_pod: bool = False  # the series of every pod's workload (node-level features)


class Feature(Protocol):
    @property
    def name(self) -> str:
        """Its step's name (ACT) and its report section's key."""

    @property
    def kinds(self) -> tuple[str, ...]:
        """The optional cluster kinds it reads (model/cluster.py OPTIONAL_KINDS)."""

    @property
    def phase(self) -> str:
        """DECIDE or ACT."""

    # the place of its changes in the run's write list and of its blocks in serve's --report JSON
    # (the order both had before features were objects: outputs stay byte-identical)
    @property
    def write_rank(self) -> int: ...

    @property
    def report_rank(self) -> int: ...

    @property
    def enabled(self) -> bool: ...

    def need(self, step: pd.Timedelta) -> ForecastNeed: ...

    def workloads(self, state: ClusterState) -> set[WorkloadKey]:
        """The workloads whose series its decisions read (besides every pod's, see ForecastNeed)."""

    def run(self, rep: RunReport, ctx: RunContext) -> str:
        """Its step: decide (and for ACT features, act); returns the step's detail ("" for none)."""

    def changes(self, rep: RunReport, state: ClusterState, now_iso: str, before: dict[str, Any]) -> list[Change]:
        """The changes its decisions make to the objects as read; `before` gets change -> live object."""

    def written(self, rep: RunReport) -> None:
        """After the write step: what it keeps of the run's outcome for the next run."""

    def report(self, rep: RunReport) -> dict[str, Any]:
        """Its blocks of serve's --report JSON."""
