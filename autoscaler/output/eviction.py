"""Moving pods off a node, the one way the serving side does it: through the Eviction API, so that
the API server enforces PodDisruptionBudgets; dry-run unless told otherwise; rate-limited; each
outcome with its reason. Rebalancing hot nodes and handing tide nodes back both go through here.

`movable(pod)` is the safety list: a pod that would not come back (no controller, a DaemonSet's,
a static/mirror pod), a system pod or a dedicated (whole-core/NUMA) pod (its level read by the one
fail-closed parser, `contracts.qos.parse_qos`) is never chosen; nor a pod the cluster's markers keep
(`contracts/eviction_markers.py`: `safe-to-evict: "false"`, any false `tidewise.io/evict`, local
storage unless `evict_local_storage` allows it)."""
from __future__ import annotations

import collections
import logging
import time
from dataclasses import dataclass
from typing import Any, Callable

from autoscaler.model.cluster import Obj
from autoscaler.model.views import PodView
from contracts.kube_errors import KubeError, NotFound, TooManyRequests
from contracts.eviction_markers import OPT_OUT, annotation_refusal, storage_refusal
from contracts.qos import QOS_ANNOTATION, QosLevel, qos_level

log = logging.getLogger(__name__)

SYSTEM_NAMESPACES = frozenset({"kube-system", "kube-public", "kube-node-lease"})
__all__ = ["OPT_OUT", "Evictor", "Move", "Outcome", "movable"]  # OPT_OUT: "false" (any false word) on a pod
MIRROR = "kubernetes.io/config.mirror"


def movable(pod: Obj, local_storage: str = "never") -> str | None:
    """None when `pod` may be moved, else why not (one short phrase, for the reason). The pods every
    node runs (system, static, DaemonSet, finished) are named before the markers, so that tide can
    tell them from the online pods that keep a node from being lent; `local_storage` is one of
    `contracts.eviction_markers.LOCAL_STORAGE_RULES`."""
    md = pod.get("metadata") or {}
    annotations = md.get("annotations") or {}
    view = PodView(pod)
    if md.get("namespace") in SYSTEM_NAMESPACES or view.priority_class.startswith("system-"):
        return "system pod"
    level = qos_level(annotations, QOS_ANNOTATION)
    if level in (QosLevel.SYSTEM, QosLevel.DEDICATED):
        return f"{level.value} pod"
    if MIRROR in annotations:
        return "static pod"
    owners = [o for o in md.get("ownerReferences") or [] if o.get("controller")]
    if not owners:
        return "no controller would recreate it"
    if owners[0].get("kind") == "DaemonSet":
        return "DaemonSet pod"
    if view.phase in ("Succeeded", "Failed"):
        return "already finished"
    return annotation_refusal(annotations) or storage_refusal(pod, local_storage)


@dataclass(frozen=True)
class Move:
    """One pod to move off `node`, and why."""

    namespace: str
    pod: str
    node: str
    reason: str


@dataclass(frozen=True)
class Outcome:
    """What became of a move: `evicted`, `dry-run`, `refused` (a disruption budget, or gone),
    `rate-limited` or `failed`; `detail` says why."""

    move: Move
    result: str
    detail: str = ""

    def as_dict(self) -> dict[str, str]:
        return {"namespace": self.move.namespace, "pod": self.move.pod, "node": self.move.node,
                "reason": self.move.reason, "result": self.result, "detail": self.detail}


class Evictor:
    """`Evictor(kube, dry_run=True, per_minute=5)`: at most `per_minute` evictions in any 60 s (a
    sliding window shared by every caller of this instance); in dry-run nothing is sent at all."""

    def __init__(self, kube: Any, *, dry_run: bool = True, per_minute: int = 5,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.kube = kube
        self.dry_run = dry_run
        self.per_minute = per_minute
        self.clock = clock
        self._sent: collections.deque[float] = collections.deque()

    def _slot(self) -> bool:
        now = self.clock()
        while self._sent and now - self._sent[0] >= 60.0:
            self._sent.popleft()
        if len(self._sent) >= self.per_minute:
            return False
        self._sent.append(now)
        return True

    def evict(self, move: Move) -> Outcome:
        if not self._slot():
            return Outcome(move, "rate-limited", f"limit of {self.per_minute} evictions a minute reached")
        if self.dry_run:
            return Outcome(move, "dry-run", "not sent (dry-run; pass --apply to evict)")
        try:
            self.kube.evict_pod(move.namespace, move.pod)
        except TooManyRequests as exc:  # the API server's answer when a disruption budget would break
            return Outcome(move, "refused", str(exc))
        except NotFound:
            return Outcome(move, "refused", "pod no longer exists")
        except KubeError as exc:
            log.warning("evict %s/%s failed: %s", move.namespace, move.pod, exc)
            return Outcome(move, "failed", str(exc))
        log.info("evicted %s/%s from %s: %s", move.namespace, move.pod, move.node, move.reason)
        return Outcome(move, "evicted", "")
