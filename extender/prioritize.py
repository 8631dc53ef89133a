"""The prioritize verb: score each node 0..10 by the room its FORECAST leaves over the pod's
expected lifetime, with the reason. Pure: the pod's needs, a node, the time in; a score out.

The forecast is the node's `tidewise.io/node-forecast` annotation (contracts/node_forecast.py):
hourly steps of the online pods' demand and of what the reclaim formula would lend, for a day.
Over the steps the pod's lifetime spans (pod.py: 1 h for batch, 24 h for the rest by default):

- a batch (`reclaimed_cores`) pod: the *lowest* reclaimable amount, less its request, is its
  spare; a node where it falls below the request at any step scores 0 (the batch pod would be
  squeezed or evicted there), else 1 + 9 x the spare as a fraction of the node's allocatable.
- any other pod: the *highest* online demand plus its request must stay under allocatable; a node
  where it does not scores 0, else 1 + 9 x the room left as a fraction of allocatable.

CPU and memory are scored alike and the lower one counts (the scarcer resource decides). A node
whose forecast is missing, malformed or older than its `valid_until` scores 5, neutral: it neither
wins nor loses on numbers nobody should trust, and the reason says so.
"""
from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from typing import Any, Mapping, Sequence

from extender.annotations import AnnotationCache
from extender.pod import PodNeeds
from contracts.node_forecast import FORECAST_ANNOTATION, ForecastRefused, NodeForecast, forecast_from_annotation

MAX_PRIORITY = 10  # k8s.io/kube-scheduler/extender/v1 MaxExtenderPriority
NEUTRAL = MAX_PRIORITY // 2


@dataclass(frozen=True)
class Score:
    score: int
    reason: str


def _hours(seconds: float) -> str:
    return f"{seconds / 3600:.3g}h"


def _at(f: NodeForecast, index: int, now: dt.datetime) -> str:
    """When step `index` starts, relative to now ("now" for the current step)."""
    ahead = (f.start + dt.timedelta(seconds=index * f.step_seconds) - now).total_seconds()
    return "now" if ahead <= 0 else f"in {_hours(ahead)}"


def _worst(values: Sequence[int], where: slice, lowest: bool) -> tuple[int, int]:
    """(value, index) of the lowest (or highest) value in `where` (not empty)."""
    part = values[where]
    v = min(part) if lowest else max(part)
    return v, where.indices(len(values))[0] + part.index(v)


def _resource(f: NodeForecast, pod: PodNeeds, where: slice, now: dt.datetime, cpu: bool) -> tuple[float, str]:
    """(room as a fraction of allocatable, negative when the pod does not fit; its reason) for one resource."""
    alloc = f.allocatable_millicpu if cpu else f.allocatable_memory_bytes
    unit = (lambda v: f"{v}m") if cpu else (lambda v: f"{v / 2**30:.1f}Gi")
    label = "cpu" if cpu else "memory"
    if pod.is_reclaimed:
        request = pod.reclaimed_millicpu if cpu else pod.reclaimed_memory_bytes
        low, i = _worst(f.reclaimable_millicpu if cpu else f.reclaimable_memory_bytes, where, lowest=True)
        room = low - request
        text = f"reclaimable {label} lowest {unit(low)} {_at(f, i, now)} vs request {unit(request)}"
    else:
        request = pod.cpu_millicpu if cpu else pod.memory_bytes
        high, i = _worst(f.online_cpu_millicores if cpu else f.online_memory_bytes, where, lowest=False)
        room = alloc - high - request
        text = f"online {label} peak {unit(high)} {_at(f, i, now)} + request {unit(request)} of {unit(alloc)}"
    return (room / alloc if alloc > 0 else -1.0), text


def score_forecast(pod: PodNeeds, f: NodeForecast, now: dt.datetime) -> Score:
    """The node's score from a checked forecast (module docstring)."""
    covered = f.covered_seconds(now)
    if covered <= 0:
        return Score(NEUTRAL, f"neutral: the forecast ended before now ({FORECAST_ANNOTATION} not refreshed)")
    where = f.steps_over(now, pod.lifetime_seconds)
    cpu, cpu_text = _resource(f, pod, where, now, cpu=True)
    mem, mem_text = _resource(f, pod, where, now, cpu=False)
    span = f"over {_hours(min(covered, pod.lifetime_seconds))} ({pod.lifetime_note})"
    if covered < pod.lifetime_seconds:
        span += f"; the forecast covers only {_hours(covered)} of it"
    worst = min(cpu, mem)
    if worst < 0:
        lacking = cpu_text if cpu < 0 else mem_text
        what = "will not last" if pod.is_reclaimed else "leaves no room"
        return Score(0, f"0: {what}: {lacking} {span}")
    score = 1 + round((MAX_PRIORITY - 1) * min(1.0, worst))
    return Score(score, f"{score}: {cpu_text}; {mem_text}; {span}")


def score_node(pod: PodNeeds, node: Mapping[str, Any], now: dt.datetime, cache: AnnotationCache | None = None) -> Score:
    """The node's score and reason; never raises for a bad forecast (neutral, with the reason).
    `cache` remembers parsed forecasts between calls."""
    name = str((node.get("metadata") or {}).get("name") or "")
    text = ((node.get("metadata") or {}).get("annotations") or {}).get(FORECAST_ANNOTATION)
    try:
        f = cache.forecast(name, text, now) if cache is not None else forecast_from_annotation(text, name, now)
    except ForecastRefused as exc:
        return Score(NEUTRAL, f"neutral: {exc}")
    return score_forecast(pod, f, now)
