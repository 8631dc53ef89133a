"""Katalyst's QoS vocabulary and its one reading: the levels, the pod annotations that carry them,
the extended resources reclaimed (batch) pods request, and `parse_qos`, which every component
(serve, its tide and rebalance steps, `movable()`, the scheduler extender, the node agent and its
checkpoint) uses to read a pod's level and enhancements. Standard library only.

Reading rules (docs/katalyst-objects.md, "How the QoS annotations are read"):
- `katalyst.kubewharf.io/qos_level` is read with surrounding whitespace stripped and in any case:
  `"dedicated_cores "` and `"System_Cores\\n"` are those levels, everywhere. Absent: `shared_cores`.
- `cpu_enhancement` / `memory_enhancement` hold JSON objects (at most `MAX_ENHANCEMENT_CHARS`) with
  `numa_binding`, `numa_exclusive` (booleans or "true"/"false"), `cpuset_pool` (a short pool name)
  and `oom_priority` (an integer in [-1000, 1000], higher = killed later).
- Fail closed, the same way in every component, never giving more CPU, memory or eviction
  protection than the declared level: a level that is not one of the four (unknown, garbled, not a
  string) reads as `shared_cores` (never dedicated cores, no more protection than shared, counted as
  online demand); a malformed enhancement drops every enhancement and reads the pod as the lesser
  of its level and `shared_cores`: a `reclaimed_cores` pod stays reclaimed (capped, evictable, in
  the reclaimed root), a `dedicated_cores` or `system_cores` one is shared. Either way
  `QosSpec.problem` says what was wrong.
"""
from __future__ import annotations

import enum
import json
import logging
import re
from dataclasses import dataclass
from typing import Any, Mapping, Sequence

log = logging.getLogger(__name__)


class QosLevel(str, enum.Enum):
    """`katalyst.kubewharf.io/qos_level` values; a `str` enum, so `QosLevel.SHARED == "shared_cores"`."""

    SYSTEM = "system_cores"
    DEDICATED = "dedicated_cores"
    SHARED = "shared_cores"
    RECLAIMED = "reclaimed_cores"


DEFAULT_LEVEL = QosLevel.SHARED  # what Katalyst assumes for a pod without the annotation

QOS_ANNOTATION = "katalyst.kubewharf.io/qos_level"
CPU_ENHANCEMENT = "katalyst.kubewharf.io/cpu_enhancement"
MEMORY_ENHANCEMENT = "katalyst.kubewharf.io/memory_enhancement"
ENHANCEMENT_KEYS = ("numa_binding", "numa_exclusive", "cpuset_pool", "oom_priority")
NUMA_BIND_ANNOTATION = "katalyst.kubewharf.io/numa_bind_result"  # pod -> the NUMA node it is bound to

# the extended resources serve publishes on each Node (and CNR) and reclaimed pods request
RECLAIMED_MILLICPU = "resource.katalyst.kubewharf.io/reclaimed_millicpu"
RECLAIMED_MEMORY = "resource.katalyst.kubewharf.io/reclaimed_memory"

OOM_PRIORITY_RANGE = (-1000, 1000)  # mapped onto oom_score_adj's own range
# Katalyst's enhancements are a few dozen bytes; 1 KiB leaves room for all four keys many times over
# and bounds what json parses per pod (a 256 KiB annotation is refused unread)
MAX_ENHANCEMENT_CHARS = 1024
_POOL_NAME = re.compile(r"^[a-z0-9]([a-z0-9_-]{0,30}[a-z0-9])?$")


@dataclass(frozen=True)
class QosSpec:
    """A pod's QoS as every component treats it (already fail-closed when `problem` is set)."""

    level: QosLevel = QosLevel.SHARED
    numa_binding: bool = False
    numa_exclusive: bool = False
    cpuset_pool: str | None = None
    oom_priority: int | None = None
    problem: str | None = None  # what was malformed and how it was read, when something was


def shown(value: object, limit: int = 60) -> str:
    """`repr(value)`, cut to `limit` characters with the full length named (for messages and logs)."""
    text = repr(value)
    return text if len(text) <= limit else f"{text[:limit]}... ({len(str(value))} chars)"


def _level(annotations: Mapping[str, Any], key: str) -> tuple[QosLevel, str | None]:
    if key not in annotations:
        return DEFAULT_LEVEL, None
    value = annotations[key]
    if isinstance(value, str):
        try:
            return QosLevel(value.strip().lower()), None
        except ValueError:
            pass
    return QosLevel.SHARED, (f"{key}={shown(value)} is not one of {[q.value for q in QosLevel]}; "
                             "read as shared_cores")


def json_object_annotation(raw: object, annotation: str, known: Sequence[str],
                           max_chars: int = MAX_ENHANCEMENT_CHARS) -> dict[str, Any]:
    """An annotation holding a JSON object with only `known` keys, parsed; ValueError naming the
    annotation and what is wrong (the QoS enhancements and the agent's I/O limits)."""
    if not isinstance(raw, str):
        raise ValueError(f"{annotation} must be a string holding a JSON object, not {type(raw).__name__}")
    if len(raw) > max_chars:
        raise ValueError(f"{annotation} is {len(raw)} characters long; at most {max_chars}")
    try:
        data = json.loads(raw)
    except (ValueError, RecursionError) as exc:
        raise ValueError(f"{annotation} is not JSON ({exc})") from None
    if not isinstance(data, dict):
        raise ValueError(f"{annotation} must be a JSON object, not {type(data).__name__}")
    unknown = sorted(set(data) - set(known))
    if unknown:
        raise ValueError(f"{annotation} has unknown key(s) {shown(unknown)}; known: {list(known)}")
    return data


def _bool(key: str, value: object) -> bool:
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.strip().lower() in ("true", "false"):
        return value.strip().lower() == "true"
    raise ValueError(f"{key} must be true or false, not {shown(value)}")


def _oom(value: object) -> int:
    if isinstance(value, str) and re.fullmatch(r"-?\d{1,5}", value.strip()):
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"oom_priority must be an integer, not {shown(value)}")
    lo, hi = OOM_PRIORITY_RANGE
    if not lo <= value <= hi:
        raise ValueError(f"oom_priority {shown(value)} is outside [{lo}, {hi}]")
    return value


def _enhancements(annotations: Mapping[str, Any], annotation: str) -> dict[str, Any]:
    if annotation not in annotations:
        return {}
    out: dict[str, Any] = {}
    for key, value in json_object_annotation(annotations[annotation], annotation, ENHANCEMENT_KEYS).items():
        if key in ("numa_binding", "numa_exclusive"):
            out[key] = _bool(key, value)
        elif key == "cpuset_pool":
            if not isinstance(value, str) or not _POOL_NAME.match(value):
                raise ValueError(f"cpuset_pool must be a short lower-case name, not {shown(value)}")
            out[key] = value
        else:
            out[key] = _oom(value)
    return out


def _spec(level: QosLevel, annotations: Mapping[str, Any]) -> QosSpec:
    """The enhancements on a known level; ValueError when any is malformed or does not apply."""
    enh = _enhancements(annotations, CPU_ENHANCEMENT)
    mem = _enhancements(annotations, MEMORY_ENHANCEMENT)
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


_PLAIN = {q.value: QosSpec(level=q) for q in QosLevel}  # immutable: the common case without enhancements


def parse_qos(annotations: object, key: str = QOS_ANNOTATION) -> QosSpec:
    """A pod's annotations -> its `QosSpec`, fail-closed (module docstring); never raises."""
    if annotations is None:
        return _PLAIN[DEFAULT_LEVEL.value]
    if type(annotations) is not dict and not isinstance(annotations, Mapping):  # the dict check is the cheap one
        return QosSpec(problem=f"annotations are a {type(annotations).__name__}, not a mapping; read as shared_cores")
    if CPU_ENHANCEMENT not in annotations and MEMORY_ENHANCEMENT not in annotations:  # serve reads 50,000 a run
        value = annotations.get(key, DEFAULT_LEVEL.value)
        if isinstance(value, str) and value in _PLAIN:
            return _PLAIN[value]
    level, problem = _level(annotations, key)
    if problem is not None:
        has_enh = CPU_ENHANCEMENT in annotations or MEMORY_ENHANCEMENT in annotations
        return QosSpec(problem=problem + ("; enhancements ignored" if has_enh else ""))
    try:
        return _spec(level, annotations)
    except Exception as exc:  # noqa: BLE001 - any annotation shape at all must not stop a component
        why = str(exc) or type(exc).__name__
        lesser = QosLevel.RECLAIMED if level is QosLevel.RECLAIMED else QosLevel.SHARED
        return QosSpec(level=lesser, problem=f"{why}; enhancements ignored, {level.value} read as {lesser.value}")


def qos_level(annotations: Mapping[str, Any] | None, key: str = QOS_ANNOTATION) -> QosLevel:
    """The level every component treats the pod as (see `parse_qos`)."""
    return parse_qos(annotations, key).level


def is_reclaimed(annotations: Mapping[str, Any] | None, key: str = QOS_ANNOTATION) -> bool:
    """True for a `reclaimed_cores` pod (batch work running on what online pods leave)."""
    return qos_level(annotations, key) is QosLevel.RECLAIMED


class QosReporter:
    """Logs each pod's malformed QoS annotations once (per pod and problem), not on every pass or
    run; remembers at most `limit` pods (then starts again: a log line repeated, never memory grown)."""

    def __init__(self, limit: int = 100_000, logger: logging.Logger | None = None) -> None:
        self.limit = limit
        self.log = logger or log
        self._seen: set[tuple[str, str]] = set()

    def report(self, pod: str, spec: QosSpec) -> bool:
        """Log `spec.problem` for `pod` ("namespace/name" or uid) unless already logged; True when logged."""
        if spec.problem is None or (pod, spec.problem) in self._seen:
            return False
        if len(self._seen) >= self.limit:
            self._seen.clear()
        self._seen.add((pod, spec.problem))
        self.log.warning("pod %s: malformed QoS annotation, treated as %s: %s", pod, spec.level.value, spec.problem,
                         extra={"pod": pod, "qos": spec.level.value})
        return True
