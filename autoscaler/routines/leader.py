"""One active replica at a time through a `coordination.k8s.io/v1` Lease (client-go's rules).

A replica acts while it holds the lease; it renews every run (the run interval must stay below
`lease_duration_seconds`). Another replica takes over only when `renewTime + leaseDurationSeconds`
has passed. Every write is a PUT carrying the resourceVersion read, so two replicas racing for an
expired lease get one 200 and one 409 — never two leaders.
"""
from __future__ import annotations

import datetime as dt
import logging
import time
from typing import Any, Callable

from autoscaler.kube import Kube
from autoscaler.model.views import ObjectView
from contracts.kube_errors import Conflict, KubeError, NotFound

log = logging.getLogger(__name__)


def _micro(t: float) -> str:
    return dt.datetime.fromtimestamp(t, dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def _parse(text: Any) -> float | None:
    if not text:
        return None
    try:
        return dt.datetime.fromisoformat(str(text).replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None


class LeaderElector:
    def __init__(self, kube: Kube, namespace: str, name: str, identity: str, duration_seconds: int = 15,
                 clock: Callable[[], float] = time.time):
        self.kube = kube
        self.namespace = namespace
        self.name = name
        self.identity = identity
        self.duration = duration_seconds
        self.clock = clock
        self.leading = False

    def _body(self, now: float, acquired: float, transitions: int, rv: str | None) -> dict[str, Any]:
        md: dict[str, Any] = {"name": self.name, "namespace": self.namespace}
        if rv:
            md["resourceVersion"] = rv
        return {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease", "metadata": md,
                "spec": {"holderIdentity": self.identity, "leaseDurationSeconds": self.duration,
                         "acquireTime": _micro(acquired), "renewTime": _micro(now), "leaseTransitions": transitions}}

    def try_acquire(self) -> bool:
        """True when this replica holds the lease after the call (acquired or renewed)."""
        now = self.clock()
        try:
            try:
                lease = self.kube.get_lease(self.namespace, self.name)
            except NotFound:
                self.kube.create_lease(self.namespace, self._body(now, now, 0, None))
                return self._set(True, "created the lease")
            spec = ObjectView(lease).spec
            rv = (lease.get("metadata") or {}).get("resourceVersion")
            holder = spec.get("holderIdentity")
            renewed = _parse(spec.get("renewTime")) or 0.0
            duration = int(spec.get("leaseDurationSeconds") or self.duration)
            transitions = int(spec.get("leaseTransitions") or 0)
            if holder == self.identity:
                acquired = _parse(spec.get("acquireTime")) or now
                self.kube.replace_lease(self.namespace, self.name, self._body(now, acquired, transitions, rv))
                return self._set(True, "renewed")
            if holder and renewed + duration > now:
                return self._set(False, f"held by {holder} until {_micro(renewed + duration)}")
            self.kube.replace_lease(self.namespace, self.name, self._body(now, now, transitions + 1, rv))
            return self._set(True, f"took over from {holder or 'nobody'}")
        except Conflict:
            return self._set(False, "lost the race for the lease")
        except KubeError as exc:
            log.error("lease %s/%s: %s", self.namespace, self.name, exc)
            return self._set(False, str(exc))

    def _set(self, leading: bool, why: str) -> bool:
        if leading != self.leading:
            log.warning("leader election: %s (%s)", "leading" if leading else "standing by", why)
        self.leading = leading
        return leading
