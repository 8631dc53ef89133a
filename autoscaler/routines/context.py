"""What one run of the serving loop carries from step to step, and what it reports.

`RunContext` is filled step by step (fetch sets the history and `now`, cluster the snapshot,
forecast the forecasts); a step reading a field an earlier step did not set is a bug, and freezes
the run like any other internal error. `RunReport` is what the run decided, wrote, held and skipped.
"""
from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, Protocol, TypeVar

import pandas as pd

from autoscaler.logic.decide_vpa import TidalRequests
from autoscaler.model.cluster import ClusterState
from autoscaler.model.decisions import HpaDecision, VpaDecision
from autoscaler.model.views import WorkloadKey, WorkloadSeries
from autoscaler.output.objects import Change
from autoscaler.output.sinks import DRY_RUN, NOT_FOUND, WRITTEN, WriteResult
from contracts.node_forecast import NodeForecast
from contracts.reclaim import ReclaimPlan
from predictor.durations import parse_duration  # the one (cached) reading; the routines import it from here
from predictor.pipeline.forecasting import ForecastRequest
from predictor.history import History
from predictor.types import Forecast

log = logging.getLogger(__name__)
Forecaster = Callable[[History, ForecastRequest], list[Forecast]]
OK, FROZEN, KILLED = "ok", "frozen", "killed"
# HPA key -> (target kind, target name, series read, predicted, final): exported by the metrics
HpaSeries = dict[str, tuple[str, str, list[str], int, int]]
S = TypeVar("S")


def iso(ts: pd.Timestamp) -> str:
    """ISO-8601 UTC to the second, as the API objects carry it."""
    return ts.tz_convert("UTC").strftime("%Y-%m-%dT%H:%M:%SZ") if ts.tzinfo else ts.strftime("%Y-%m-%dT%H:%M:%SZ")


class ClusterReader(Protocol):
    def read(self) -> ClusterState: ...


class RunMetrics(Protocol):
    """Where a run's outcome is exported (autoscaler.metrics.Metrics)."""

    def observe(self, rep: Any, forecasts: dict[str, Any], hpa_series: dict[str, Any],
                lead_steps: int = 0) -> None: ...


class Freeze(Exception):
    """Raised inside a step: stop the run, write nothing, keep the last good decisions."""


@dataclass
class StepTiming:
    name: str
    seconds: float
    ok: bool
    detail: str = ""


@dataclass
class RunReport:
    now: pd.Timestamp | None = None
    outcome: str = OK
    reason: str = ""
    steps: list[StepTiming] = field(default_factory=list)
    vpa: list[VpaDecision] = field(default_factory=list)
    hpa: list[HpaDecision] = field(default_factory=list)
    reclaim: list[ReclaimPlan] = field(default_factory=list)
    node_forecasts: dict[str, NodeForecast] = field(default_factory=dict)  # node -> its tidewise.io/node-forecast
    changes: list[Change] = field(default_factory=list)
    results: list[WriteResult] = field(default_factory=list)
    skipped: dict[str, str] = field(default_factory=dict)  # object or series -> why no decision
    held: dict[str, str] = field(default_factory=dict)  # change -> guardrail that held it back
    registry: str = "none"
    # objects whose written part changed outside Tidewise since the last write: decided and written again
    drifted: dict[str, str] = field(default_factory=dict)
    kill_deliberate: bool = False  # KILLED by an operator's explicit `stop`, not by an unreadable switch
    # feature name -> its typed report section (autoscaler/features/), present once its step ran
    sections: dict[str, object] = field(default_factory=dict)

    def section(self, name: str, kind: Callable[[], S], keep: bool = True) -> S:
        """The section `name`, made by `kind()` the first time a step asks for it (`keep` False: a
        reader's question, an empty one is not kept)."""
        if name not in self.sections:
            if not keep:
                return kind()
            self.sections[name] = kind()
        return self.sections[name]  # type: ignore[return-value]

    def count(self, outcome: str) -> int:
        return sum(1 for r in self.results if r.outcome == outcome)

    def failed_writes(self) -> list[WriteResult]:
        """Writes that did not land: failed, conflicting, throttled, forbidden. An object deleted
        between the read and the write (not-found) is not one: nothing is left to decide for."""
        return [r for r in self.results if r.outcome not in (WRITTEN, DRY_RUN, NOT_FOUND)]

    def problems(self) -> list[str]:
        """Why this run fell short (empty for a good one; `serve --once` exits 1 on any): a frozen
        run decided nothing, a kill switch that is not a deliberate `stop` is a fault, every write
        that did not land is named, and so is a `--registry` with no usable version."""
        out = []
        if self.outcome == FROZEN or (self.outcome == KILLED and not self.kill_deliberate):
            out.append(f"{self.outcome}: {self.reason}")
        out.extend(f"{r.key}: {r.outcome}{' (' + r.detail + ')' if r.detail else ''}" for r in self.failed_writes())
        # `--registry` given but no version loaded, now or before (the loop's registry step files the
        # refusal under "registry DIR"): the run forecast statelessly, not with the models asked for
        out.extend(f"{key}: no usable version ({why}); forecasts were stateless"
                   for key, why in self.skipped.items() if key.startswith("registry ") and self.registry == "none")
        return out

    def summary(self) -> str:
        if self.outcome != OK:
            return f"{self.outcome}: {self.reason}"
        by: dict[str, int] = {}
        for r in self.results:
            by[r.outcome] = by.get(r.outcome, 0) + 1
        return (f"{len(self.vpa)} VPA, {len(self.hpa)} HPA, {len(self.reclaim)} node decisions; "
                f"{len(self.changes)} changes ({', '.join(f'{k} {v}' for k, v in sorted(by.items())) or 'none written'}); "
                f"{len(self.skipped)} skipped, {len(self.held)} held by guardrails"
                + (f", {len(self.drifted)} changed outside Tidewise" if self.drifted else ""))


def decide_one(key: str, rep: RunReport, decide: Callable[[], object], keep: Callable[..., None]) -> None:
    """One object's decision, kept when made; one that cannot be decided is skipped with its reason."""
    try:
        d = decide()
        if d is not None:
            keep(d)
    except Exception as exc:  # noqa: BLE001 - one bad object is skipped
        rep.skipped[key] = f"{type(exc).__name__}: {exc}"
        log.warning("%s skipped: %s", key, exc)


class _Unset(Exception):
    pass


@dataclass
class RunContext:
    """One run's working state, step to step."""

    forecaster: Forecaster
    _history: History | None = None
    _now: pd.Timestamp | None = None
    _end: pd.Timestamp | None = None  # newest sample of the history
    _state: ClusterState | None = None
    _origin: pd.Timestamp | None = None  # the first forecast step of this run
    forecasts: dict[str, Forecast] = field(default_factory=dict)  # series -> forecast from the origin
    index: dict[WorkloadKey, WorkloadSeries] = field(default_factory=dict)
    refreshed: int = 0  # forecasts made this run (the others came from the cache)
    hpa_series: HpaSeries = field(default_factory=dict)
    before: dict[str, Any] = field(default_factory=dict)  # change -> the live object it was made against
    made: Mapping[str, Forecast] = field(default_factory=dict)  # the forecast cache: series -> forecast as made
    # what VPA / HPA decisions read (routines/decision_time.py); None: this run's day-ahead forecasts
    vpa_forecasts: Mapping[str, Forecast] | None = None
    vpa_tidal: TidalRequests | None = None  # the hour-peak model and day plans (routines/tidal.py); None: off
    hpa_forecasts: Mapping[str, Forecast] | None = None

    @staticmethod
    def _need(value: Any, what: str) -> Any:
        if value is None:
            raise _Unset(f"{what} read before the step that sets it")
        return value

    @property
    def history(self) -> History:
        return self._need(self._history, "history")  # type: ignore[no-any-return]

    @property
    def now(self) -> pd.Timestamp:
        return self._need(self._now, "now")  # type: ignore[no-any-return]

    @property
    def end(self) -> pd.Timestamp:
        return self._need(self._end, "end")  # type: ignore[no-any-return]

    @property
    def state(self) -> ClusterState:
        return self._need(self._state, "cluster state")  # type: ignore[no-any-return]

    @property
    def origin(self) -> pd.Timestamp:
        return self._need(self._origin, "origin")  # type: ignore[no-any-return]

    def fetched(self, history: History, now: pd.Timestamp, end: pd.Timestamp) -> None:
        self._history, self._now, self._end = history, now, end

    def read(self, state: ClusterState) -> None:
        self._state = state

    def forecast_from(self, origin: pd.Timestamp) -> None:
        self._origin = origin
