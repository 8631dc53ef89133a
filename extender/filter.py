"""The filter verb: which candidate nodes cannot take the pod, and why. Pure: objects in, verdicts out.

Two checks, each only for the pods it concerns (every other pod passes every node untouched):

- **Reclaimed resources.** A pod requesting `reclaimed_millicpu`/`reclaimed_memory` (or any
  `reclaimed_cores` pod) needs the node's reclaim plan (`tidewise.io/reclaim-plan`, written by
  serve) to be valid now: a missing, malformed or expired plan lends nothing (fail closed, as the
  node agent does). What it lends is the plan's amount, capped by what the Node advertises in
  `status.allocatable` when it does (the two differ for a moment after a write). The request must
  fit in it. Accounting for the reclaimed pods already on the node is the scheduler's own
  `NodeResourcesFit` on those extended resources (the extender is told the candidate nodes, not
  their pods; `ignoredByScheduler: false` in deploy/scheduler-extender.yaml keeps it on).
- **A whole NUMA node.** A `dedicated_cores` pod with `numa_binding` needs one NUMA node of the
  topology its node agent reports (the CustomNodeResource `status.topologyZone`): with
  `numa_exclusive` a zone with no dedicated allocation at all, else a zone whose unallocated cores
  (and memory, when reported) hold its requests. A node without a CNR, or whose CNR has no
  per-NUMA cpu, is filtered out (fail closed: binding there would be a guess).

Verdicts are `Verdict(ok, reason, resolvable)`: `resolvable` False for what preempting pods cannot
fix (no plan, no topology), which the scheduler's `FailedAndUnresolvableNodes` is for.
"""
from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from typing import Any, Mapping

from extender.annotations import AnnotationCache
from extender.pod import PodNeeds
from contracts.errors import InputError
from contracts.qos import RECLAIMED_MEMORY, RECLAIMED_MILLICPU
from contracts.quantity import GIB, parse_cpu_millis, parse_memory_bytes, parse_quantity
from contracts.reclaim import PLAN_ANNOTATION, ReclaimPlan, plan_from_annotation, utc


@dataclass(frozen=True)
class Verdict:
    ok: bool
    reason: str
    resolvable: bool = True  # False: no preemption would make the node fit


def _annotations(node: Mapping[str, Any]) -> Mapping[str, str]:
    return (node.get("metadata") or {}).get("annotations") or {}


def _advertised(node: Mapping[str, Any], resource: str) -> int | None:
    value = ((node.get("status") or {}).get("allocatable") or {}).get(resource)
    try:
        return None if value is None else int(parse_quantity(value))
    except ValueError:
        return 0  # an unreadable advertisement lends nothing


def _mcpu(m: int) -> str:
    return f"{m}m"


def _gib(b: int) -> str:
    return f"{b / GIB:.2f}Gi"


def _until(plan: ReclaimPlan) -> str:
    end = utc(plan.window_start) + dt.timedelta(seconds=plan.window_seconds)
    return end.strftime("%H:%M:%SZ")


def reclaim_verdict(pod: PodNeeds, node: Mapping[str, Any], name: str, now: dt.datetime,
                    cache: AnnotationCache | None = None) -> Verdict:
    """Whether the node's reclaimable resources hold the pod's reclaimed requests (module docstring);
    `cache` remembers parsed plans between calls."""
    text = _annotations(node).get(PLAN_ANNOTATION)
    try:
        plan = cache.plan(name, text, now) if cache is not None else plan_from_annotation(text, name, now)
    except InputError as exc:
        return Verdict(False, f"no usable reclaim plan, lends nothing: {exc}", resolvable=False)
    cpu, mem = plan.reclaimed_millicpu, plan.reclaimed_memory_bytes
    adv_cpu, adv_mem = _advertised(node, RECLAIMED_MILLICPU), _advertised(node, RECLAIMED_MEMORY)
    cpu = cpu if adv_cpu is None else min(cpu, adv_cpu)
    mem = mem if adv_mem is None else min(mem, adv_mem)
    short = []
    if pod.reclaimed_millicpu > cpu:
        short.append(f"reclaimed_millicpu {_mcpu(pod.reclaimed_millicpu)} > reclaimable {_mcpu(cpu)}")
    if pod.reclaimed_memory_bytes > mem:
        short.append(f"reclaimed_memory {_gib(pod.reclaimed_memory_bytes)} > reclaimable {_gib(mem)}")
    if short:
        return Verdict(False, "does not fit: " + "; ".join(short) + f" (plan valid until {_until(plan)})")
    return Verdict(True, f"fits reclaimable {_mcpu(cpu)} / {_gib(mem)}")


@dataclass(frozen=True)
class Zone:
    """One NUMA node of a CNR: what it has and what dedicated pods hold."""

    name: str
    cpu_millicpu: int
    memory_bytes: int | None
    allocated_millicpu: int
    allocated_memory_bytes: int
    consumers: int


def _zone(z: Mapping[str, Any]) -> Zone:
    res = z.get("resources") or {}
    alloc = res.get("allocatable") or res.get("capacity") or {}
    if "cpu" not in alloc:
        raise ValueError(f"NUMA zone {z.get('name')!r} reports no cpu")
    held_cpu = held_mem = 0
    allocations = [a for a in z.get("allocations") or [] if isinstance(a, dict)]
    for a in allocations:
        req = a.get("requests") or {}
        held_cpu += parse_cpu_millis(req.get("cpu", 0))
        held_mem += parse_memory_bytes(req.get("memory", 0))
    mem = alloc.get("memory")
    return Zone(str(z.get("name")), parse_cpu_millis(alloc["cpu"]), None if mem is None else parse_memory_bytes(mem),
                held_cpu, held_mem, len(allocations))


def numa_zones(cnr: Mapping[str, Any]) -> list[Zone]:
    """The NUMA zones of a CNR (under its sockets, or at the top level); ValueError when it has none."""
    zones = []
    for top in (cnr.get("status") or {}).get("topologyZone") or []:
        if not isinstance(top, dict):
            continue
        children = [top] if top.get("type") == "Numa" else top.get("children") or []
        zones += [_zone(c) for c in children if isinstance(c, dict) and c.get("type") == "Numa"]
    if not zones:
        raise ValueError("status.topologyZone has no NUMA zone")
    return zones


def _zone_fits(pod: PodNeeds, z: Zone) -> str | None:
    """Why the zone cannot take the pod, or None."""
    if pod.numa_exclusive:
        return f"NUMA {z.name} holds {z.consumers} dedicated pod(s)" if z.consumers else \
            (None if pod.cpu_millicpu <= z.cpu_millicpu else f"NUMA {z.name} has {_mcpu(z.cpu_millicpu)}")
    free_cpu = z.cpu_millicpu - z.allocated_millicpu
    if pod.cpu_millicpu > free_cpu:
        return f"NUMA {z.name} has {_mcpu(free_cpu)} free"
    if z.memory_bytes is not None and pod.memory_bytes > z.memory_bytes - z.allocated_memory_bytes:
        return f"NUMA {z.name} has {_gib(z.memory_bytes - z.allocated_memory_bytes)} memory free"
    return None


def numa_verdict(pod: PodNeeds, cnr: Mapping[str, Any] | None, name: str,
                 memo: dict[tuple[str, str], list[Zone] | str] | None = None) -> Verdict:
    """Whether one NUMA node of the node's reported topology can take the pod (module docstring);
    `memo` keeps each CNR's zones by resourceVersion between calls."""
    if cnr is None:
        return Verdict(False, f"no CustomNodeResource {name}: NUMA topology unknown (is the node agent running "
                              "with --report-topology?)", resolvable=False)
    version = str((cnr.get("metadata") or {}).get("resourceVersion") or "")
    zones = memo.get((name, version)) if memo is not None and version else None
    if zones is None:
        try:
            zones = numa_zones(cnr)
        except (ValueError, TypeError, AttributeError) as exc:
            zones = f"CustomNodeResource {name}: {exc}: NUMA topology unknown"
        if memo is not None and version:
            if len(memo) > 20_000:
                memo.clear()  # many generations of a large fleet's CNRs: start again rather than grow
            memo[name, version] = zones
    if isinstance(zones, str):
        return Verdict(False, zones, resolvable=False)
    why = [w for w in (_zone_fits(pod, z) for z in zones) if w]
    if len(why) == len(zones):
        want = "a whole NUMA node" if pod.numa_exclusive else f"{_mcpu(pod.cpu_millicpu)} on one NUMA node"
        return Verdict(False, f"needs {want}: " + "; ".join(why))
    free = next(z.name for z in zones if _zone_fits(pod, z) is None)
    return Verdict(True, f"NUMA {free} can take it")


def filter_node(pod: PodNeeds, node: Mapping[str, Any], cnr: Mapping[str, Any] | None, cnr_error: str | None,
                now: dt.datetime, cache: AnnotationCache | None = None) -> Verdict:
    """The node's verdict for the pod: every check that concerns the pod, the first refusal wins.
    `cnr_error` is set when the topology cache is unavailable (then NUMA-bound pods fail closed)."""
    name = str((node.get("metadata") or {}).get("name") or "")
    reasons = []
    if pod.is_reclaimed or pod.reclaimed_millicpu or pod.reclaimed_memory_bytes:
        v = reclaim_verdict(pod, node, name, now, cache)
        if not v.ok:
            return v
        reasons.append(v.reason)
    if pod.needs_whole_numa:
        if cnr_error is not None:
            return Verdict(False, f"topology cache unavailable ({cnr_error})", resolvable=False)
        v = numa_verdict(pod, cnr, name, cache.zones if cache is not None else None)
        if not v.ok:
            return v
        reasons.append(v.reason)
    return Verdict(True, "; ".join(reasons) or f"{pod.level} pod: no reclaimed or NUMA need")
