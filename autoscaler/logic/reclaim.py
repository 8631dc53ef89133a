"""Reclaimable node resources for the next window (DESIGN.md, "Reclaimable resources").

reclaimable = allocatable - reserved - max over the window of sum of the online pods' forecast
quantile - margin x allocatable, floored at 0; then smoothed against what was last published:
changes inside the dead-band are dropped, increases are limited to `max_step_fraction` of
allocatable per step, decreases go through at once (online pods need the room now). Integer
millicpu and bytes throughout.
"""
from __future__ import annotations

import math

import numpy as np

from autoscaler.settings import ReclaimSettings
from predictor.types import NumaReclaim, ReclaimPlan


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


def split_numa(total: int, numa_nodes: int) -> dict[int, int]:
    """Even split, exact: the remainder goes to the lowest NUMA ids, parts sum to `total`."""
    base, rest = divmod(total, numa_nodes)
    return {i: base + (1 if i < rest else 0) for i in range(numa_nodes)}


def plan_node(node: str, allocatable_millicpu: int, allocatable_memory: int, demand_cpu_cores: np.ndarray,
              demand_memory_bytes: np.ndarray, settings: ReclaimSettings, window_start: str, window_seconds: int,
              previous: ReclaimPlan | None = None, numa_nodes: int = 0,
              notes: list[str] | None = None) -> ReclaimPlan:
    """One node's plan. `demand_*` are the summed forecasts of its online pods over the window."""
    if not (np.all(np.isfinite(demand_cpu_cores)) and np.all(np.isfinite(demand_memory_bytes))):
        raise ValueError(f"node {node}: online demand forecast is not finite")
    peak_cpu = int(math.ceil(round(float(np.max(demand_cpu_cores, initial=0.0)) * 1000, 6)))
    peak_mem = int(math.ceil(float(np.max(demand_memory_bytes, initial=0.0))))
    margin_cpu = int(math.ceil(allocatable_millicpu * settings.margin_fraction))
    margin_mem = int(math.ceil(allocatable_memory * settings.margin_fraction))
    raw_cpu = reclaimable(allocatable_millicpu, settings.reserved_millicpu, peak_cpu, margin_cpu)
    raw_mem = reclaimable(allocatable_memory, settings.reserved_memory_bytes, peak_mem, margin_mem)
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
    if numa_nodes > 1:
        cpus, mems = split_numa(cpu, numa_nodes), split_numa(mem, numa_nodes)
        numa = {i: NumaReclaim(cpus[i], mems[i]) for i in range(numa_nodes)}
        reasons.append(f"split evenly over {numa_nodes} NUMA nodes (online pods are not NUMA-bound)")
    return ReclaimPlan(node=node, window_start=window_start, window_seconds=window_seconds,
                       reclaimed_millicpu=cpu, reclaimed_memory_bytes=mem, shared_demand_millicpu=peak_cpu,
                       numa=numa, reasons=reasons)
