"""One node's reclaimable resources from the forecasts of the pods on it: typed in, typed out.

A pod's demand is its workload's forecast (quantile `reclaim.quantile`, summed over containers)
divided by the workload's replicas; a pod without a usable forecast counts at its requests
(conservative). Reclaimed-cores pods are the borrowers and are not counted. `plan_node` turns the
summed demand into the plan.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Mapping, Sequence

import numpy as np

from autoscaler.logic.reclaim import numa_zone, plan_node
from autoscaler.logic.vpa import quantile_column
from autoscaler.model.views import NodeView, PodView, WorkloadSeries
from autoscaler.settings import ReclaimSettings
from contracts.qos import QosLevel
from contracts.reclaim import ReclaimPlan
from predictor.types import Forecast

Demand = tuple[np.ndarray, np.ndarray]  # (cores, bytes) per forecast step


def workload_pod_demand(series: WorkloadSeries | None, forecasts: Mapping[str, Forecast], quantile: float,
                        steps: int, replicas: int) -> Demand | None:
    """One pod's share of its workload's forecast over `steps`; None when a series it has lacks a
    forecast (the pod is then counted at its requests)."""
    if series is None:
        return None
    cpu = np.zeros(steps)
    mem = np.zeros(steps)
    ok = True
    for res_map in series.by_container.values():
        for res, arr in (("cpu", cpu), ("memory", mem)):
            sid = res_map.get(res)
            if sid is None:
                continue
            if sid not in forecasts:
                ok = False
                continue
            col = quantile_column(forecasts[sid], quantile)[:steps]
            arr[: len(col)] += col
    return (cpu / replicas, mem / replicas) if ok else None


@dataclass(frozen=True)
class NodeInputs:
    """What one node's plan reads besides its settings."""

    node: NodeView
    pods: Sequence[PodView]  # running or pending on it
    demand_of: Callable[[PodView], Demand | None]  # a pod's forecast demand (see workload_pod_demand)
    previous: ReclaimPlan | None  # the plan it advertises now (smoothing starts from it)
    window_start: str  # ISO-8601 UTC
    window_seconds: int
    steps: int  # forecast steps in the window


def decide_node(inp: NodeInputs, settings: ReclaimSettings) -> ReclaimPlan:
    """The node's plan; ValueError when its allocatable resources or the demand are unusable."""
    steps = inp.steps
    a_cpu, a_mem = inp.node.allocatable()
    cpu = np.zeros(steps)
    mem = np.zeros(steps)
    notes: list[str] = []
    numa = inp.node.numa_nodes(settings.numa_annotation)
    bound_cpu: dict[int, np.ndarray] = {}  # NUMA node -> usage of the pods bound to it
    bound_mem: dict[int, np.ndarray] = {}
    for pod in inp.pods:
        if pod.qos(settings.qos_annotation) == QosLevel.RECLAIMED.value:
            continue
        d = inp.demand_of(pod)
        if d is None:
            r_cpu, r_mem = pod.requests()
            d = (np.full(steps, r_cpu / 1000.0), np.full(steps, float(r_mem)))
            notes.append(f"pod {pod.label}: no forecast, counted at its requests")
        cpu += d[0]
        mem += d[1]
        zone = numa_zone(pod.annotations, numa)
        if zone is not None:
            bound_cpu[zone] = bound_cpu.get(zone, np.zeros(steps)) + d[0]
            bound_mem[zone] = bound_mem.get(zone, np.zeros(steps)) + d[1]
    return plan_node(inp.node.name, a_cpu, a_mem, cpu, mem, settings, inp.window_start, inp.window_seconds,
                     inp.previous, numa, notes[:20], bound_cpu, bound_mem)
