"""Reclaimable node resources for the next window (DESIGN.md, "Reclaimable resources").

reclaimable = allocatable - reserved - max over the window of sum of the online pods' forecast
quantile - margin x allocatable, floored at 0; then smoothed against what was last published:
changes inside the dead-band are dropped, increases are limited to `max_step_fraction` of
allocatable per step, decreases go through at once (online pods need the room now). Integer
millicpu and bytes throughout.

Per NUMA node (when the node's `tidewise.io/numa-nodes` annotation gives the count): each zone is
taken as an equal share of the node (allocatable, reserve and margin divided by the count: the
Node object says nothing finer), and its demand is the usage of the pods bound to it (Katalyst's
`katalyst.kubewharf.io/numa_bind_result` pod annotation) plus its share of the unbound pods' usage,
which the kernel spreads over every zone. A zone holding the busy NUMA-bound pods so gets less to
reclaim than an idle one: the split follows usage, not the zone count. Without the count, the plan
has no zones (`numa_layout` "unknown") and the node agent treats the node as one zone.
"""
from __future__ import annotations

import math
from typing import Mapping

import numpy as np

from autoscaler.settings import ReclaimSettings
from contracts.qos import NUMA_BIND_ANNOTATION
from contracts.reclaim import NumaReclaim, ReclaimPlan


def reclaimable(allocatable: int, reserved: int, demand_peak: int, margin: int) -> int:
    return max(0, int(allocatable) - int(reserved) - int(demand_peak) - int(margin))


def smooth(previous: int | None, new: int, deadband: int, max_step_up: int) -> tuple[int, str | None]:
    """Dead-band and step limit on one published number (see module docstring)."""
    if previous is None:
        # first publication: start from 0 and climb like any other increase would
        previous = 0
        if new <= max_step_up:
            return new, None
    if abs(new - previous) < deadband:
        return previous, f"inside the dead-band ({abs(new - previous)} < {deadband}): kept {previous}"
    if new > previous + max_step_up:
        return previous + max_step_up, f"increase limited to +{max_step_up} per step"
    return new, None


def numa_zone(annotations: Mapping[str, str] | None, numa_nodes: int) -> int | None:
    """The NUMA node a pod is bound to, from its annotation; None when unbound or not a zone of this node."""
    text = (annotations or {}).get(NUMA_BIND_ANNOTATION)
    try:
        zone = int(str(text).strip())
    except (TypeError, ValueError):
        return None
    return zone if 0 <= zone < numa_nodes else None


def _peak_millicpu(cores: np.ndarray) -> int:
    return int(math.ceil(round(float(np.max(cores, initial=0.0)) * 1000, 6)))


def _peak_bytes(values: np.ndarray) -> int:
    return int(math.ceil(float(np.max(values, initial=0.0))))


def proportional(total: int, weights: Mapping[int, int]) -> dict[int, int]:
    """`total` split in proportion to `weights`, exact (largest remainder); evenly when all are 0."""
    keys = sorted(weights)
    wsum = sum(max(0, weights[k]) for k in keys)
    if wsum == 0:
        return dict(zip(keys, split_numa(total, len(keys)).values()))
    parts = {k: total * max(0, weights[k]) // wsum for k in keys}
    rest = total - sum(parts.values())
    order = sorted(keys, key=lambda k: (-(total * max(0, weights[k]) % wsum), k))
    for k in order[:rest]:
        parts[k] += 1
    return parts


def zone_reclaimable(numa_nodes: int, allocatable_millicpu: int, allocatable_memory: int,
                     demand_cpu_cores: np.ndarray, demand_memory_bytes: np.ndarray,
                     bound_cpu: Mapping[int, np.ndarray], bound_memory: Mapping[int, np.ndarray],
                     settings: ReclaimSettings) -> dict[int, tuple[int, int, int, int]]:
    """Per zone: (reclaimable millicpu, reclaimable bytes, peak demand millicpu, peak demand bytes),
    before smoothing. `demand_*` is every online pod's usage, `bound_*` the part bound to each zone."""
    n = numa_nodes
    unbound_cpu = demand_cpu_cores - sum((np.asarray(v) for v in bound_cpu.values()), np.zeros_like(demand_cpu_cores))
    unbound_mem = demand_memory_bytes - sum((np.asarray(v) for v in bound_memory.values()),
                                            np.zeros_like(demand_memory_bytes))
    out = {}
    for z in range(n):
        cpu = bound_cpu.get(z, 0.0) + np.maximum(unbound_cpu, 0.0) / n
        mem = bound_memory.get(z, 0.0) + np.maximum(unbound_mem, 0.0) / n
        peak_cpu, peak_mem = _peak_millicpu(np.asarray(cpu)), _peak_bytes(np.asarray(mem))
        a_cpu, a_mem = allocatable_millicpu // n, allocatable_memory // n
        out[z] = (reclaimable(a_cpu, settings.reserved_millicpu // n, peak_cpu,
                              int(math.ceil(a_cpu * settings.margin_fraction))),
                  reclaimable(a_mem, settings.reserved_memory_bytes // n, peak_mem,
                              int(math.ceil(a_mem * settings.margin_fraction))),
                  peak_cpu, peak_mem)
    return out


def split_numa(total: int, numa_nodes: int) -> dict[int, int]:
    """Even split, exact: the remainder goes to the lowest NUMA ids, parts sum to `total`."""
    base, rest = divmod(total, numa_nodes)
    return {i: base + (1 if i < rest else 0) for i in range(numa_nodes)}


def plan_node(node: str, allocatable_millicpu: int, allocatable_memory: int, demand_cpu_cores: np.ndarray,
              demand_memory_bytes: np.ndarray, settings: ReclaimSettings, window_start: str, window_seconds: int,
              previous: ReclaimPlan | None = None, numa_nodes: int = 0,
              notes: list[str] | None = None, bound_cpu: Mapping[int, np.ndarray] | None = None,
              bound_memory: Mapping[int, np.ndarray] | None = None) -> ReclaimPlan:
    """One node's plan. `demand_*` are the summed forecasts of its online pods over the window;
    `bound_*` the part of them from pods bound to one NUMA node (zone -> summed forecast).

    With `numa_nodes` > 0 the node's raw amounts are the sum of its zones' (module docstring): a
    zone's peak cannot be lent to another zone's batch pods. The smoothed total is then split over
    the zones in proportion to their raw amounts, so the zones always sum to the total."""
    if not (np.all(np.isfinite(demand_cpu_cores)) and np.all(np.isfinite(demand_memory_bytes))):
        raise ValueError(f"node {node}: online demand forecast is not finite")
    peak_cpu, peak_mem = _peak_millicpu(demand_cpu_cores), _peak_bytes(demand_memory_bytes)
    margin_cpu = int(math.ceil(allocatable_millicpu * settings.margin_fraction))
    margin_mem = int(math.ceil(allocatable_memory * settings.margin_fraction))
    raw_cpu = reclaimable(allocatable_millicpu, settings.reserved_millicpu, peak_cpu, margin_cpu)
    raw_mem = reclaimable(allocatable_memory, settings.reserved_memory_bytes, peak_mem, margin_mem)
    zones: dict[int, tuple[int, int, int, int]] = {}
    if numa_nodes > 0:
        zones = zone_reclaimable(numa_nodes, allocatable_millicpu, allocatable_memory, demand_cpu_cores,
                                 demand_memory_bytes, bound_cpu or {}, bound_memory or {}, settings)
        raw_cpu = min(raw_cpu, sum(z[0] for z in zones.values()))
        raw_mem = min(raw_mem, sum(z[1] for z in zones.values()))
    reasons = list(notes or [])
    reasons.append(f"cpu: {allocatable_millicpu}m allocatable - {settings.reserved_millicpu}m reserved - "
                   f"{peak_cpu}m online q{settings.quantile:g} peak over {settings.window} - {margin_cpu}m margin "
                   f"= {raw_cpu}m")
    reasons.append(f"memory: {allocatable_memory} - {settings.reserved_memory_bytes} reserved - {peak_mem} online "
                   f"q{settings.quantile:g} peak - {margin_mem} margin = {raw_mem} bytes")
    cpu, why = smooth(previous.reclaimed_millicpu if previous else None, raw_cpu, settings.deadband_millicpu,
                      int(allocatable_millicpu * settings.max_step_fraction))
    if why:
        reasons.append(f"cpu {why}")
    mem, why = smooth(previous.reclaimed_memory_bytes if previous else None, raw_mem,
                      settings.deadband_memory_bytes, int(allocatable_memory * settings.max_step_fraction))
    if why:
        reasons.append(f"memory {why}")
    numa: dict[int, NumaReclaim] = {}
    if zones:
        cpus = proportional(cpu, {z: v[0] for z, v in zones.items()})
        mems = proportional(mem, {z: v[1] for z, v in zones.items()})
        numa = {z: NumaReclaim(cpus[z], mems[z]) for z in sorted(zones)}
        reasons.append("per NUMA node (equal zones; usage of bound pods on their zone, unbound spread): " + "; ".join(
            f"node{z}: {v[2]}m / {v[3]} bytes online peak -> {cpus[z]}m / {mems[z]} bytes" for z, v in zones.items()))
    else:
        reasons.append("NUMA layout unknown (no tidewise.io/numa-nodes annotation): one zone, the node total")
    return ReclaimPlan(node=node, window_start=window_start, window_seconds=window_seconds,
                       reclaimed_millicpu=cpu, reclaimed_memory_bytes=mem, shared_demand_millicpu=peak_cpu,
                       numa=numa, reasons=reasons)
