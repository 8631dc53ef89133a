"""One VPA's decision from its workload's forecasts: pure, typed in and out.

Each controlled container resource gets `recommend_resource` (percentile -> margin -> floors ->
policy caps). The change guardrail is not applied here: `guardrails.limit_vpa_decision` runs after,
against what the cluster last showed, so a decision can be read before and after it.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Mapping

import numpy as np
import pandas as pd

from autoscaler.logic.vpa import container_policy, recommend_resource
from autoscaler.model.cluster import Obj, container_requests
from autoscaler.model.decisions import ContainerRecommendation, ResourceRecommendation, VpaDecision
from autoscaler.model.views import VpaView, WorkloadSeries
from autoscaler.settings import VpaSettings
from predictor.durations import parse_duration
from predictor.history import History
from predictor.types import Forecast


def steps_in(text: str, step: pd.Timedelta) -> int:
    """Forecast steps a duration setting spans (at least one)."""
    return max(1, int(math.ceil(parse_duration(text) / step)))


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


def _memory_peak(y: pd.Series, since: pd.Timestamp) -> float | None:
    recent = y.to_numpy()[y.index.searchsorted(since):]
    return float(np.nanmax(recent)) if np.isfinite(recent).any() else None


def decide_vpa(inp: VpaInputs, settings: VpaSettings) -> VpaDecision:
    """Targets and bounds per container resource, before the change guardrail; LookupError when
    no container has a usable forecast (missing, stale or non-finite series)."""
    window, bound = steps_in(settings.window, inp.step), steps_in(settings.bound_window, inp.step)
    peak_cut = inp.now - parse_duration(settings.memory_peak_window)
    containers = []
    for cname in container_requests(inp.workload) or inp.series.by_container:
        policy = container_policy(inp.vpa.obj, cname)
        if policy.mode == "Off":
            continue
        resources: dict[str, ResourceRecommendation] = {}
        for res in policy.controlled:
            sid = inp.series.by_container.get(cname, {}).get(res)
            if sid is None or sid not in inp.forecasts:
                continue
            fc = inp.forecasts[sid]
            peak = _memory_peak(inp.history.series[sid], peak_cut) if res == "memory" else None
            resources[res] = recommend_resource(fc, res, inp.replicas, settings, window, bound, policy,
                                                memory_peak=peak, model_label=f"{fc.model}@{fc.version}")
        if resources:
            containers.append(ContainerRecommendation(cname, resources))
    if not containers:
        raise LookupError("no container with a usable forecast (missing, stale or non-finite series)")
    kind, target = inp.vpa.target_ref()
    return VpaDecision(inp.vpa.namespace, inp.vpa.name, kind or "", target or "", inp.replicas, containers)
