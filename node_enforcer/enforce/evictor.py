"""Evictions, the action: the rate limit, then the Eviction API (dry-run by default), each
eviction logged with its reason. Whom to evict is `policy.eviction.choose_victims`'s decision.
Only pods on the agent's own node are evicted: a victim whose `spec.nodeName` is another node's
(or unset, as a pods file may leave it) is refused before any call, with that reason.
"""
from __future__ import annotations

import logging
import time
from collections import deque
from dataclasses import dataclass
from typing import Callable, Mapping, Protocol, Sequence

from contracts.kube_errors import KubeError
from node_enforcer.model.pod import Pod
from node_enforcer.model.pressure import Pressure
from node_enforcer.policy.allocation import CpuAllocation
from node_enforcer.policy.eviction import EvictionSettings, choose_victims

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Eviction:
    uid: str
    pod: str
    reason: str
    dry_run: bool
    result: str = "requested"  # requested | refused: ... | failed: ...


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
    def evict(self, namespace: str, name: str, dry_run: bool = True, node: str | None = None,
              uid: str | None = None) -> None: ...


class Evictor:
    """Chooses victims, applies the rate limit, calls the Eviction API (or only logs, without one) for
    pods on `node`, the agent's own (required with an API: an evictor that knows no node evicts nothing)."""

    def __init__(self, settings: EvictionSettings, api: EvictionApi | None = None,
                 clock: Callable[[], float] = time.monotonic, node: str | None = None) -> None:
        if api is not None and not node:
            raise ValueError("an Evictor with a Kubernetes API needs the agent's own node (node=)")
        self.s, self.api, self.node = settings, api, node
        self.limiter = RateLimiter(settings.max_evictions, settings.rate_window_seconds, clock)

    def run(self, p: Pressure, pods: Sequence[Pod], allocation: CpuAllocation,
            usage: Mapping[str, int]) -> list[Eviction]:
        done = []
        for pod, reason in choose_victims(p, pods, allocation, usage, self.s):
            if not self.limiter.allow():
                log.warning("eviction of %s postponed by the rate limit (%d per %.0f s): %s", pod.key,
                            self.s.max_evictions, self.s.rate_window_seconds, reason, extra={"pod": pod.key})
                break
            result = "requested" if self.api is not None else "logged only (no Kubernetes API)"
            if self.api is not None and pod.node_name != self.node:
                result = (f"refused: the pod is {'on node ' + repr(pod.node_name) if pod.node_name else 'on no node'}, "
                          f"not this agent's node {self.node!r}")
            elif self.api is not None:
                try:
                    self.api.evict(pod.namespace, pod.name, dry_run=self.s.dry_run, node=pod.node_name, uid=pod.uid)
                except KubeError as exc:
                    result = f"refused: {exc}"
            ev = Eviction(pod.uid, pod.key, reason, self.s.dry_run, result)
            log.warning("%sevict %s: %s -> %s", "dry-run: " if self.s.dry_run else "", pod.key, reason, result,
                        extra={"pod": pod.key, "reason": reason, "dry_run": self.s.dry_run})
            done.append(ev)
        return done
