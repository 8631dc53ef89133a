"""Katalyst's QoS vocabulary: the levels, the pod annotations that carry them, and the extended
resources reclaimed (batch) pods request.

Serve reads a pod's level to leave `reclaimed_cores` pods out of the online demand; the node agent
reads it (with the enhancements) to place the pod in a CPU pool. Both read the same names from here.
"""
from __future__ import annotations

import enum
from typing import Mapping


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


def raw_level(annotations: Mapping[str, str] | None, key: str = QOS_ANNOTATION) -> str:
    """The level as written on the pod (unvalidated), `shared_cores` when absent."""
    return str((annotations or {}).get(key, DEFAULT_LEVEL.value))


def is_reclaimed(annotations: Mapping[str, str] | None, key: str = QOS_ANNOTATION) -> bool:
    """True for a `reclaimed_cores` pod (batch work running on what online pods leave)."""
    return raw_level(annotations, key) == QosLevel.RECLAIMED.value
