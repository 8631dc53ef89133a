"""Katalyst QoS levels and enhancements from pod annotations.

`katalyst.kubewharf.io/qos_level` picks the level (`shared_cores` when absent);
`katalyst.kubewharf.io/cpu_enhancement` and `.../memory_enhancement` hold JSON objects with
`numa_binding`, `numa_exclusive` (booleans, or the strings "true"/"false" as Katalyst writes them),
`cpuset_pool` (a pool name) and `oom_priority` (an integer, higher = killed later).

A malformed annotation never crashes the agent: the pod is treated as `shared_cores` without
enhancements, and the problem is carried in the plan (`collect.qos.QosResolver` logs it once per pod).
"""
from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any, Protocol, Sequence

from contracts.qos import CPU_ENHANCEMENT, ENHANCEMENT_KEYS, MEMORY_ENHANCEMENT, QOS_ANNOTATION, QosLevel
from node_enforcer.model.pod import Pod


OOM_PRIORITY_RANGE = (-1000, 1000)  # mapped onto oom_score_adj's own range
_POOL_NAME = re.compile(r"^[a-z0-9]([a-z0-9_-]{0,30}[a-z0-9])?$")


@dataclass(frozen=True)
class QosSpec:
    level: QosLevel = QosLevel.SHARED
    numa_binding: bool = False
    numa_exclusive: bool = False
    cpuset_pool: str | None = None
    oom_priority: int | None = None
    problem: str | None = None  # why the annotations were ignored, when they were


def _bool(key: str, value: Any) -> bool:
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.lower() in ("true", "false"):
        return value.lower() == "true"
    raise ValueError(f"{key} must be true or false, not {value!r}")


def json_object_annotation(raw: str, annotation: str, known: Sequence[str]) -> dict[str, Any]:
    """An annotation holding a JSON object with only `known` keys, parsed; ValueError naming the
    annotation and what is wrong (shared by the QoS enhancements and the I/O limits)."""
    try:
        data = json.loads(raw)
    except (ValueError, RecursionError) as exc:
        raise ValueError(f"{annotation} is not JSON ({exc})") from None
    if not isinstance(data, dict):
        raise ValueError(f"{annotation} must be a JSON object, not {type(data).__name__}")
    unknown = sorted(set(data) - set(known))
    if unknown:
        raise ValueError(f"{annotation} has unknown key(s) {unknown}; known: {list(known)}")
    return data


def _enhancements(raw: str | None, annotation: str) -> dict[str, Any]:
    if raw is None:
        return {}
    data = json_object_annotation(raw, annotation, ENHANCEMENT_KEYS)
    out: dict[str, Any] = {}
    for key, value in data.items():
        if key in ("numa_binding", "numa_exclusive"):
            out[key] = _bool(key, value)
        elif key == "cpuset_pool":
            if not isinstance(value, str) or not _POOL_NAME.match(value):
                raise ValueError(f"cpuset_pool must be a short lower-case name, not {value!r}")
            out[key] = value
        elif key == "oom_priority":
            if isinstance(value, str) and re.fullmatch(r"-?\d{1,5}", value.strip()):
                value = int(value)
            if isinstance(value, bool) or not isinstance(value, int):
                raise ValueError(f"oom_priority must be an integer, not {value!r}")
            lo, hi = OOM_PRIORITY_RANGE
            if not lo <= value <= hi:
                raise ValueError(f"oom_priority {value} is outside [{lo}, {hi}]")
            out[key] = value
    return out


def parse_qos(annotations: dict[str, str] | Any) -> QosSpec:
    """Annotations -> QosSpec; never raises (a problem makes a `shared_cores` spec naming it)."""
    try:
        raw_level = annotations.get(QOS_ANNOTATION)
        if raw_level is None:
            level = QosLevel.SHARED
        else:
            try:
                level = QosLevel(str(raw_level).strip())
            except ValueError:
                raise ValueError(f"{QOS_ANNOTATION}={raw_level!r} is not one of "
                                 f"{[q.value for q in QosLevel]}") from None
        enh = _enhancements(annotations.get(CPU_ENHANCEMENT), CPU_ENHANCEMENT)
        mem = _enhancements(annotations.get(MEMORY_ENHANCEMENT), MEMORY_ENHANCEMENT)
        for key in set(enh) & set(mem):
            if enh[key] != mem[key]:
                raise ValueError(f"{key} differs between cpu_enhancement ({enh[key]!r}) and "
                                 f"memory_enhancement ({mem[key]!r})")
        enh.update(mem)
        binding, exclusive = enh.get("numa_binding", False), enh.get("numa_exclusive", False)
        if exclusive and not binding:
            raise ValueError("numa_exclusive needs numa_binding")
        if (binding or exclusive) and level not in (QosLevel.DEDICATED, QosLevel.SHARED):
            raise ValueError(f"numa_binding applies to dedicated_cores and shared_cores, not {level.value}")
        if exclusive and level is not QosLevel.DEDICATED:
            raise ValueError("numa_exclusive applies to dedicated_cores only")
        if "cpuset_pool" in enh and level is not QosLevel.SHARED:
            raise ValueError(f"cpuset_pool applies to shared_cores only, not {level.value}")
        return QosSpec(level=level, numa_binding=binding, numa_exclusive=exclusive,
                       cpuset_pool=enh.get("cpuset_pool"), oom_priority=enh.get("oom_priority"))
    except Exception as exc:  # noqa: BLE001 — any annotation shape at all must not stop the agent
        return QosSpec(problem=str(exc) or type(exc).__name__)


class QosSource(Protocol):
    """What reads a pod's QoS spec: `parse_qos` of its annotations, or `collect.qos.QosResolver`,
    which also logs each malformed annotation once."""

    def resolve(self, pod: Pod) -> QosSpec: ...
