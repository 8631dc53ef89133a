"""One node's forecast for the scheduler extender (`contracts/node_forecast.py`): pure, typed in and out.

The same per-pod demand the reclaim plan sums (`decide_node.workload_pod_demand`: the workload's
forecast quantile divided by its replicas; a pod without a forecast counts at its requests), but
over `reclaim.forecast_horizon` (24 h by default, so the daily tide is in it) instead of the
plan's one-hour window, and coarsened to `reclaim.forecast_step` (1 h) by taking each step's
highest value: 24 numbers a resource keep the annotation small (~1 KiB) and a scheduler that keeps
a pod for hours does not need 5-minute detail.
"""
from __future__ import annotations

import datetime as dt
import math
from typing import Callable, Sequence

import numpy as np

from autoscaler.logic.decide_node import Demand
from autoscaler.logic.reclaim import reclaimable
from autoscaler.model.views import NodeView, PodView
from autoscaler.settings import ReclaimSettings
from contracts.node_forecast import NodeForecast
from contracts.qos import QosLevel
from predictor.durations import parse_duration


def _coarse(values: np.ndarray, per_step: int, scale: float) -> tuple[int, ...]:
    """Highest value of each block of `per_step` fine steps, times `scale`, rounded up to an integer."""
    blocks = [values[i:i + per_step] for i in range(0, len(values), per_step)]
    return tuple(int(math.ceil(round(float(np.max(b)) * scale, 6))) for b in blocks if len(b))


def node_forecast(node: NodeView, pods: Sequence[PodView], demand_of: Callable[[PodView], Demand | None],
                  settings: ReclaimSettings, start: dt.datetime, fine_step_seconds: int, steps: int,
                  now: dt.datetime) -> NodeForecast:
    """The node's forecast from `start` over `steps` fine steps of `fine_step_seconds`; ValueError
    when the node's allocatable is unusable. `demand_of` returns per-pod (cores, bytes) arrays of
    `steps` values (shorter when the forecast is: the rest is filled with the pod's last value)."""
    a_cpu, a_mem = node.allocatable()
    cpu, mem = np.zeros(steps), np.zeros(steps)
    missing = 0
    for pod in pods:
        if pod.qos(settings.qos_annotation) == QosLevel.RECLAIMED.value:
            continue  # the borrowers: their room is what this forecast is about
        d = demand_of(pod)
        if d is None:
            missing += 1
            r_cpu, r_mem = pod.requests()
            d = (np.full(steps, r_cpu / 1000.0), np.full(steps, float(r_mem)))
        cpu += d[0][:steps]
        mem += d[1][:steps]
    coarse_seconds = int(pd_seconds(settings.forecast_step))
    per_step = max(1, coarse_seconds // fine_step_seconds)
    online_cpu = _coarse(cpu, per_step, 1000.0)
    online_mem = _coarse(mem, per_step, 1.0)
    margin_cpu, margin_mem = (int(math.ceil(a * settings.margin_fraction)) for a in (a_cpu, a_mem))
    return NodeForecast(
        node=node.name, generated=now, valid_until=now + dt.timedelta(seconds=pd_seconds(settings.forecast_valid)),
        start=start, step_seconds=per_step * fine_step_seconds, quantile=settings.quantile,
        allocatable_millicpu=a_cpu, allocatable_memory_bytes=a_mem,
        online_cpu_millicores=online_cpu, online_memory_bytes=online_mem,
        reclaimable_millicpu=tuple(reclaimable(a_cpu, settings.reserved_millicpu, c, margin_cpu) for c in online_cpu),
        reclaimable_memory_bytes=tuple(reclaimable(a_mem, settings.reserved_memory_bytes, m, margin_mem)
                                       for m in online_mem),
        pods_without_forecast=missing)


def pd_seconds(text: str) -> float:
    """A duration setting in seconds (the settings' own grammar: '1h', '30m', '1d')."""
    return float(parse_duration(text).total_seconds())
