"""One VPA's decision from its workload's forecasts: pure, typed in and out.

Each controlled container resource gets `recommend_resource` (percentile -> margin -> floors ->
policy caps). The change guardrail is not applied here: `guardrails.limit_vpa_decision` runs after,
against what the cluster last showed, so a decision can be read before and after it.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Mapping, Protocol

import numpy as np
import pandas as pd

from autoscaler.logic.choice_by_cost import CostLedger, candidates, choose_by_cost, describe_choice, serve_choice
from autoscaler.logic.regime import regime
from autoscaler.logic.vpa import ContainerPolicy, container_policy, recommend_resource
from autoscaler.model.cluster import Obj, container_requests
from contracts.quantity import to_units
from autoscaler.model.decisions import ContainerRecommendation, ResourceRecommendation, VpaDecision
from autoscaler.model.views import VpaView, WorkloadSeries
from autoscaler.settings import VpaSettings
from predictor.durations import parse_duration
from predictor.history import History
from predictor.timestamps import position
from predictor.types import Forecast


def steps_in(text: str, step: pd.Timedelta) -> int:
    """Forecast steps a duration setting spans (at least one)."""
    return max(1, int(math.ceil(parse_duration(text) / step)))


@dataclass(frozen=True)
class TidalRequest:
    """A raw request another recommender gave (a workload total): the hour-peak model at the series'
    budget level (in place) or the day plan's hour (restart), with its reason."""

    value: float
    label: str  # the reason's model
    quantile: float | None  # the reason's quantile (None: the settings')
    why: str  # the reason's first step


class TidalRequests(Protocol):
    """This run's tidal requests (`routines/tidal.py`): one per series and regime, or None and why not."""

    def request(self, sid: str, in_place: bool, budget: float) -> tuple[TidalRequest | None, str]: ...

    def for_life(self, sid: str, budget: float, life: pd.Timedelta) -> tuple[TidalRequest | None, str]: ...


@dataclass(frozen=True)
class VpaInputs:
    """What one VPA's decision reads besides its settings."""

    vpa: VpaView
    workload: Obj  # the targeted Deployment/StatefulSet (its containers)
    replicas: int
    series: WorkloadSeries
    forecasts: Mapping[str, Forecast]  # series -> forecast from this run's origin
    history: History  # for the memory peak of the last `memory_peak_window`
    now: pd.Timestamp
    step: pd.Timedelta
    ooms: Mapping[str, pd.Timestamp] = field(default_factory=dict)  # container -> its pods' last OOM kill
    ledger: CostLedger | None = None  # candidates' past requests, for settings.choose_by_cost (the loop's)
    # the violation budget of this VPA (logic/budget.py: its annotation or the config's) and why; None:
    # settings.violation_budget. Carried to each recommendation, where the hour-peak model reads it
    budget: float | None = None
    budget_why: str | None = None
    tidal: TidalRequests | None = None  # None: the forecast's window max serves (no hour-peak model)
    # the span a request kept for a pod's life must cover (updateMode Initial and Off: logic/pod_life.py)
    # and why; None: settings.pod_life
    life: pd.Timedelta | None = None
    life_why: str = ""


def _memory_at_oom(inp: VpaInputs, container: str, sid: str, since: pd.Timestamp) -> float | None:
    """Workload memory when `container` was last OOM-killed inside the memory window (None: no
    kill there): the larger of the usage sampled at the kill and the request of every replica,
    as the stock VPA takes the larger of the request and the observed peak."""
    at = inp.ooms.get(container)
    if at is None or at < since or at > inp.now:
        return None
    y = inp.history.series[sid]
    seen = y[(y.index <= at) & (y.index > at - 2 * inp.step)].dropna()
    request = (container_requests(inp.workload).get(container) or {}).get("memory")
    by_request = to_units("memory", request) * max(1, inp.replicas) if request else 0.0
    return max(float(seen.iloc[-1]) if len(seen) else 0.0, float(by_request)) or None


def _memory_peak(y: pd.Series, since: pd.Timestamp) -> float | None:
    recent = y.to_numpy()[position(y.index, since):]
    return float(np.nanmax(recent)) if np.isfinite(recent).any() else None


def _describe_tidal(rec: ResourceRecommendation, own: TidalRequest | None, why_not: str) -> None:
    """The reason of a tidal request (quantile its level, no margin), or why the forecast served."""
    if own is not None:
        rec.reason.quantile = rec.reason.quantile if own.quantile is None else own.quantile
        rec.reason.margin = 0.0
        rec.reason.steps.insert(0, own.why)
    elif why_not:
        rec.reason.steps.insert(0, why_not)


def _life(inp: VpaInputs, settings: VpaSettings, fc: Forecast) -> tuple[int, str, str]:
    """Forecast steps a request kept for a pod's life covers, the reason's window, and why: the pod's
    expected life, as far as the forecast reaches."""
    life = inp.life if inp.life is not None else parse_duration(settings.pod_life, what="serve.vpa.pod_life")
    why = inp.life_why or f"a pod's expected life {settings.pod_life} (vpa.pod_life)"
    wanted = max(1, int(math.ceil(life / inp.step)))
    steps = min(wanted, len(fc.index))
    label = f"{int(steps * inp.step.total_seconds() // 60)}min" if steps < 12 else \
        f"{steps * inp.step.total_seconds() / 3600:g}h"
    if steps < wanted:
        why += f"; the forecast reaches {label}"
    return steps, label, why


def _decide_resource(inp: VpaInputs, settings: VpaSettings, cname: str, res: str, sid: str,
                     policy: ContainerPolicy, windows: tuple[int, int], peak_cut: pd.Timestamp
                     ) -> ResourceRecommendation:
    """One container resource's recommendation in its regime (`logic/regime.py`), with its reason."""
    fc = inp.forecasts[sid]
    how = regime(inp.vpa, inp.workload, cname, res)
    window, safe = windows
    peak = _memory_peak(inp.history.series[sid], peak_cut) if res == "memory" else None
    oom = _memory_at_oom(inp, cname, sid, peak_cut) if res == "memory" else None
    label = f"{fc.model}@{fc.version}"
    budget = settings.violation_budget if inp.budget is None else inp.budget
    cand, why, window_label, life_why = None, None, None, ""
    if how.for_life:  # kept for a pod's life: the plan's highest point over it, not the coming hour
        window, window_label, life_why = _life(inp, settings, fc)
        life = window * inp.step
        own, not_own = inp.tidal.for_life(sid, budget, life) if inp.tidal else (None, "")
    else:
        if settings.choose_by_cost and inp.ledger is not None:
            y = inp.history.series[sid]
            found = candidates(fc, window, y[y.index < inp.now], inp.now, settings, label,
                               inp.ledger.needed(sid, inp.now))
            cand, why = serve_choice(choose_by_cost(inp.ledger, sid, found, y, inp.now, settings), found)
        own, not_own = inp.tidal.request(sid, how.in_place, budget) if inp.tidal and not cand else (None, "")
    raw = cand.value if cand else own.value if own else None
    margin = settings.in_place_memory_margin if how.in_place and res == "memory" else 0.0
    rec = recommend_resource(fc, res, inp.replicas, settings, window, safe, policy, memory_peak=peak,
                             model_label=own.label if own else label, oom_memory=oom, raw_total=raw,
                             peak_margin=margin, window_label=window_label)
    if why:
        describe_choice(rec, cand, why)
    _describe_tidal(rec, own, not_own)
    rec.regime, rec.after_oom = how.name, oom is not None
    rec.budget = budget
    rec.reason.steps.append(inp.budget_why or f"violation budget {rec.budget:g}")
    rec.reason.steps.append(how.describe(settings.max_changes_per_day) + (f"; {life_why}" if life_why else ""))
    return rec


def decide_vpa(inp: VpaInputs, settings: VpaSettings) -> VpaDecision:
    """Targets and bounds per container resource, before the change guardrail; LookupError when
    no container has a usable forecast (missing, stale or non-finite series)."""
    windows = steps_in(settings.window, inp.step), steps_in(settings.safe_window, inp.step)
    peak_cut = inp.now - parse_duration(settings.memory_peak_window)
    containers = []
    for cname in container_requests(inp.workload) or inp.series.by_container:
        policy = container_policy(inp.vpa.obj, cname)
        if policy.mode == "Off":
            continue
        resources: dict[str, ResourceRecommendation] = {}
        for res in policy.controlled:
            sid = inp.series.by_container.get(cname, {}).get(res)
            if sid is not None and sid in inp.forecasts:
                resources[res] = _decide_resource(inp, settings, cname, res, sid, policy, windows, peak_cut)
        if resources:
            containers.append(ContainerRecommendation(cname, resources))
    if not containers:
        raise LookupError("no container with a usable forecast (missing, stale or non-finite series)")
    kind, target = inp.vpa.target_ref()
    return VpaDecision(inp.vpa.namespace, inp.vpa.name, kind or "", target or "", inp.replicas, containers)
