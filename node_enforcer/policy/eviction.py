"""Eviction under memory pressure, the decision (pure): whether to evict and whom.

Triggers: free memory (`MemAvailable`) below a watermark, or memory PSI (`some avg10` of
/proc/pressure/memory, where the kernel has it) at or above a threshold. Victims: `reclaimed_cores`
pods first, then the others by priority (lowest first) and memory usage (largest first);
`system_cores` and `dedicated_cores` pods are never chosen. Enough victims are chosen to cover the
watermark deficit (at least one); `enforce.evictor` applies the rate limit and calls the API.
Memory PSI alone (free memory above the watermark) evicts batch only: the stalls are the cost of
reclaim, which removing a `reclaimed_cores` pod relieves, and not a reason to stop an online pod.

The cluster's markers (`contracts/eviction_markers.py`: `safe-to-evict: "false"`, a false
`tidewise.io/evict`) keep a `shared_cores` pod from being chosen, as they keep it from serve's
moves. They do not protect a `reclaimed_cores` pod: batch runs on borrowed resources, and evicting
it under memory pressure is the safety that lets it borrow (a marker cannot buy more protection
than its level gives, as a malformed annotation cannot). Local storage is not a marker here: the
kubelet's own pressure eviction, the alternative, loses it too. Each pod's level is the one the
allocation resolved (`contracts.qos.parse_qos`, fail-closed).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping, Sequence

from contracts.eviction_markers import annotation_refusal
from contracts.qos import QosLevel
from contracts.quantity import MIB as MiB
from node_enforcer.model.pod import Pod
from node_enforcer.model.pressure import Pressure
from node_enforcer.policy.allocation import CpuAllocation

NEVER_EVICTED = (QosLevel.SYSTEM.value, QosLevel.DEDICATED.value)


@dataclass(frozen=True)
class EvictionSettings:
    min_available_ratio: float = 0.05  # evict when MemAvailable < 5% of MemTotal (the kubelet's hard default is 100Mi)
    min_available_bytes: int = 0  # and/or below this many bytes; the larger watermark wins
    psi_some_avg10: float = 30.0  # % of the last 10 s in which some task stalled on memory
    max_evictions: int = 1  # per `rate_window_seconds`: give the kernel and the pods time to settle
    rate_window_seconds: float = 60.0
    dry_run: bool = True  # evictions go to the API with dryRun=All unless asked otherwise


def triggers(p: Pressure, s: EvictionSettings) -> tuple[list[str], int]:
    """(reasons, bytes to free) for this pressure reading; no reasons = no eviction."""
    watermark = max(int(p.mem_total_bytes * s.min_available_ratio), s.min_available_bytes)
    reasons, deficit = [], 0
    if p.mem_available_bytes < watermark:
        deficit = watermark - p.mem_available_bytes
        reasons.append(f"MemAvailable {p.mem_available_bytes // MiB} MiB < watermark {watermark // MiB} MiB")
    if p.psi_some_avg10 is not None and p.psi_some_avg10 >= s.psi_some_avg10:
        reasons.append(f"memory PSI some avg10 {p.psi_some_avg10:.1f}% >= {s.psi_some_avg10:.1f}%")
    return reasons, deficit


def choose_victims(p: Pressure, pods: Sequence[Pod], allocation: CpuAllocation, usage: Mapping[str, int],
                   s: EvictionSettings) -> list[tuple[Pod, str]]:
    """Pure: which pods to evict now and why (before the rate limit)."""
    reasons, deficit = triggers(p, s)
    if not reasons:
        return []
    qos = {a.uid: a.qos for a in allocation.pods}
    candidates = [pod for pod in pods if qos.get(pod.uid, QosLevel.SHARED.value) not in NEVER_EVICTED
                  and (deficit > 0 or qos.get(pod.uid) == QosLevel.RECLAIMED.value)
                  and (qos.get(pod.uid) == QosLevel.RECLAIMED.value or annotation_refusal(pod.annotations) is None)]
    candidates.sort(key=lambda pod: (qos.get(pod.uid) != QosLevel.RECLAIMED.value, pod.priority,
                                     -usage.get(pod.uid, 0), pod.key))
    out, freed = [], 0
    for pod in candidates:
        used = usage.get(pod.uid, 0)
        out.append((pod, f"{'; '.join(reasons)}; {qos.get(pod.uid)} priority {pod.priority}, "
                         f"using {used // MiB} MiB"))
        freed += used
        if freed >= deficit:
            break
    return out
