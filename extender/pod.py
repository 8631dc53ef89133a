"""What the extender needs to know about the pod being scheduled, read once per call from its spec
and annotations: QoS level, reclaimed requests, NUMA binding and expected lifetime.

A pod's `tidewise.io/expected-duration` annotation (e.g. `2h`, `30m`, `3d`) says how long it will
run; without it a batch (`reclaimed_cores`) pod is taken to run 1 h (a typical batch task: long
enough that the next hours matter, short enough that tomorrow's peak does not) and any other pod
24 h (a service stays through the whole daily tide). A value that does not parse falls back to
the default and says so in every node's reason.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Mapping

from contracts.durations import duration_seconds
from contracts.qos import RECLAIMED_MEMORY, RECLAIMED_MILLICPU, QosLevel, parse_qos
from contracts.annotations import DURATION_ANNOTATION
from contracts.quantity import parse_cpu_millis, parse_memory_bytes, parse_quantity

DEFAULT_SECONDS = {"batch": 3600.0, "online": 86400.0}  # module docstring: 1 h batch, 24 h online


def _requests(spec: Mapping[str, Any], resource: str, parse: Any) -> int:
    """The pod's effective request of one resource: the sum over containers, or the largest init
    container's when larger (as the scheduler counts it); limits stand in for a missing request,
    as Kubernetes defaults them (extended resources may only be set as limits)."""
    def of(c: Mapping[str, Any]) -> int:
        res = c.get("resources") or {}
        value = (res.get("requests") or {}).get(resource, (res.get("limits") or {}).get(resource))
        return 0 if value is None else int(parse(value))

    total = sum(of(c) for c in spec.get("containers") or [] if isinstance(c, dict))
    init = max((of(c) for c in spec.get("initContainers") or [] if isinstance(c, dict)), default=0)
    return max(total, init)


def _count(value: Any) -> int:
    """An extended-resource quantity as an integer count (reclaimed_millicpu is millicpu, memory bytes)."""
    q = parse_quantity(value)
    if q < 0:
        raise ValueError(f"quantity {value!r} is negative")
    return int(math.ceil(q))


@dataclass(frozen=True)
class PodNeeds:
    """The pod as the filter and the scorer see it."""

    name: str  # namespace/name
    level: str  # Katalyst QoS level as every component reads it (contracts.qos.parse_qos; fail-closed)
    reclaimed_millicpu: int
    reclaimed_memory_bytes: int
    cpu_millicpu: int  # plain cpu/memory requests: what a NUMA-bound pod needs from one zone
    memory_bytes: int
    numa_binding: bool
    numa_exclusive: bool
    lifetime_seconds: float
    lifetime_note: str  # where the lifetime came from, for the reasons

    @property
    def is_reclaimed(self) -> bool:
        return self.level == QosLevel.RECLAIMED.value

    @property
    def needs_whole_numa(self) -> bool:
        """A dedicated pod bound to one NUMA node (Katalyst `numa_binding`)."""
        return self.level == QosLevel.DEDICATED.value and self.numa_binding

    @property
    def kind(self) -> str:
        return "batch" if self.is_reclaimed else "online"


def _lifetime(annotations: Mapping[str, str], kind: str) -> tuple[float, str]:
    text = annotations.get(DURATION_ANNOTATION)
    default = DEFAULT_SECONDS[kind]
    if text is None:
        return default, f"{kind} default {default / 3600:g}h"
    try:
        return duration_seconds(text), f"{DURATION_ANNOTATION}={text}"
    except Exception:  # noqa: BLE001 - a bad annotation falls back, it does not fail the call
        return default, f"{DURATION_ANNOTATION}={text!r} does not parse, {kind} default {default / 3600:g}h"


def pod_needs(pod: Mapping[str, Any]) -> PodNeeds:
    """The pod's needs; ValueError (naming the field) when a request does not parse: the caller
    answers 400, since no node can be judged for a pod whose requests are unreadable."""
    md = pod.get("metadata") or {}
    spec = pod.get("spec") or {}
    if not isinstance(md, dict) or not isinstance(spec, dict):
        raise ValueError("Pod.metadata and Pod.spec must be objects")
    raw = md.get("annotations")
    raw = raw if isinstance(raw, dict) else {}
    annotations = {str(k): str(v) for k, v in raw.items()}
    # the node agent's own reading (an unknown level: shared; a malformed enhancement: none, the level kept)
    qos = parse_qos(raw)
    level = qos.level.value
    kind = "batch" if qos.level is QosLevel.RECLAIMED else "online"
    lifetime, note = _lifetime(annotations, kind)
    try:
        return PodNeeds(
            name=f"{md.get('namespace', 'default')}/{md.get('name') or md.get('generateName') or '?'}", level=level,
            reclaimed_millicpu=_requests(spec, RECLAIMED_MILLICPU, _count),
            reclaimed_memory_bytes=_requests(spec, RECLAIMED_MEMORY, _count),
            cpu_millicpu=_requests(spec, "cpu", parse_cpu_millis),
            memory_bytes=_requests(spec, "memory", parse_memory_bytes),
            numa_binding=qos.numa_binding, numa_exclusive=qos.numa_exclusive,
            lifetime_seconds=lifetime, lifetime_note=note)
    except (ValueError, TypeError, AttributeError) as exc:
        raise ValueError(f"Pod {md.get('namespace')}/{md.get('name')}: a resource request does not parse: {exc}") \
            from None
