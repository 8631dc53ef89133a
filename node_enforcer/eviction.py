"""Eviction under memory pressure.

Triggers: free memory (`MemAvailable`) below a watermark, or memory PSI (`some avg10` of
/proc/pressure/memory, where the kernel has it) at or above a threshold. Victims: `reclaimed_cores`
pods first, then the others by priority (lowest first) and memory usage (largest first);
`system_cores` and `dedicated_cores` pods are never chosen. Enough victims are chosen to cover the
watermark deficit (at least one), within a rate limit; every eviction is logged with its reason and
goes through the Eviction API, dry-run by default.
"""
from __future__ import annotations

import logging
import os
import re
import time
from collections import deque
from dataclasses import dataclass
from typing import Callable, Mapping, Protocol, Sequence

from node_enforcer.pods import Pod
from node_enforcer.policy import CpuAllocation
from node_enforcer.qos import QosLevel

log = logging.getLogger(__name__)
MiB = 2**20
NEVER_EVICTED = (QosLevel.SYSTEM.value, QosLevel.DEDICATED.value)


@dataclass(frozen=True)
class EvictionSettings:
    min_available_ratio: float = 0.05  # evict when MemAvailable < 5% of MemTotal (the kubelet's hard default is 100Mi)
    min_available_bytes: int = 0  # and/or below this many bytes; the larger watermark wins
    psi_some_avg10: float = 30.0  # % of the last 10 s in which some task stalled on memory
    max_evictions: int = 1  # per `rate_window_seconds`: give the kernel and the pods time to settle
    rate_window_seconds: float = 60.0
    dry_run: bool = True  # evictions go to the API with dryRun=All unless asked otherwise


@dataclass(frozen=True)
class Pressure:
    mem_total_bytes: int
    mem_available_bytes: int
    psi_some_avg10: float | None  # None where the kernel has no PSI


@dataclass(frozen=True)
class Eviction:
    uid: str
    pod: str
    reason: str
    dry_run: bool
    result: str = "requested"  # requested | refused: ... | failed: ...


def read_pressure(proc_root: str = "/proc", psi_path: str | None = None) -> Pressure:
    """/proc/meminfo and memory PSI (`psi_path` may point at a cgroup's `memory.pressure`)."""
    with open(os.path.join(proc_root, "meminfo"), encoding="utf-8") as fh:
        info = {m.group(1): int(m.group(2)) * 1024 for m in re.finditer(r"^(\w+):\s+(\d+)", fh.read(), re.M)}
    psi = None
    path = psi_path or os.path.join(proc_root, "pressure/memory")
    try:
        with open(path, encoding="utf-8") as fh:
            m = re.search(r"^some\s.*?avg10=([0-9.]+)", fh.read(), re.M)
            psi = float(m.group(1)) if m else None
    except OSError:
        pass
    return Pressure(info.get("MemTotal", 0), info.get("MemAvailable", info.get("MemFree", 0)), psi)


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
    candidates = [pod for pod in pods if qos.get(pod.uid, QosLevel.SHARED.value) not in NEVER_EVICTED]
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


class RateLimiter:
    """At most `n` events per sliding `window` seconds (`clock` injectable)."""

    def __init__(self, n: int, window: float, clock: Callable[[], float] = time.monotonic) -> None:
        self.n, self.window, self.clock = n, window, clock
        self._events: deque[float] = deque()

    def allow(self) -> bool:
        now = self.clock()
        while self._events and now - self._events[0] >= self.window:
            self._events.popleft()
        if len(self._events) >= self.n:
            return False
        self._events.append(now)
        return True


class EvictionApi(Protocol):
    def evict(self, namespace: str, name: str, dry_run: bool = True) -> None: ...


class Evictor:
    """Chooses victims, applies the rate limit, calls the Eviction API (or only logs, without one)."""

    def __init__(self, settings: EvictionSettings, api: EvictionApi | None = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.s, self.api = settings, api
        self.limiter = RateLimiter(settings.max_evictions, settings.rate_window_seconds, clock)

    def run(self, p: Pressure, pods: Sequence[Pod], allocation: CpuAllocation,
            usage: Mapping[str, int]) -> list[Eviction]:
        from node_enforcer.kube import KubeError

        done = []
        for pod, reason in choose_victims(p, pods, allocation, usage, self.s):
            if not self.limiter.allow():
                log.warning("eviction of %s postponed by the rate limit (%d per %.0f s): %s", pod.key,
                            self.s.max_evictions, self.s.rate_window_seconds, reason, extra={"pod": pod.key})
                break
            result = "requested" if self.api is not None else "logged only (no Kubernetes API)"
            if self.api is not None:
                try:
                    self.api.evict(pod.namespace, pod.name, dry_run=self.s.dry_run)
                except KubeError as exc:
                    result = f"refused: {exc}"
            ev = Eviction(pod.uid, pod.key, reason, self.s.dry_run, result)
            log.warning("%sevict %s: %s -> %s", "dry-run: " if self.s.dry_run else "", pod.key, reason, result,
                        extra={"pod": pod.key, "reason": reason, "dry_run": self.s.dry_run})
            done.append(ev)
        return done
