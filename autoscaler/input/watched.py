"""The cluster as the API server says it is, kept by watches instead of lists (long-running serve).

One `contracts.informer.Informer` per kind the loop reads: the first `read()` lists each kind, then a
daemon thread per kind follows its watch, so a later run reads the cache and a quiet cluster costs
six idle connections, not six full lists a minute. A kind whose cache cannot be trusted (not listed,
or its watch failing for longer than `stale_after`) raises `StaleCache`, which freezes the run like
any failed source. A missing VPA CRD means no VPAs, as with `ApiCluster`; it is probed again each run.
"""
from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any, Callable

from autoscaler.kube import Kube
from autoscaler.model.cluster import ClusterState
from contracts.informer import Backoff, Informer
from contracts.kube_errors import NotFound

log = logging.getLogger(__name__)

KINDS = ("VerticalPodAutoscaler", "HorizontalPodAutoscaler", "Deployment", "StatefulSet", "Pod", "Node")


@dataclass
class WatchedCluster:
    """`read()` has `ApiCluster`'s contract; `stop()` ends the watches (at shutdown, in tests)."""

    kube: Kube
    stale_after: float = 120.0  # two missed 60 s runs: then the run freezes instead of deciding on old data
    backoff: Callable[[], Backoff] = Backoff  # one per informer; tests shorten it
    informers: dict[str, Informer] = field(default_factory=dict)

    def read(self) -> ClusterState:
        objects: list[dict[str, Any]] = []
        for kind in KINDS:
            informer = self.informers.get(kind) or self._start(kind)
            if informer is not None:
                objects += informer.items()
        return ClusterState.from_objects(objects)

    def _start(self, kind: str) -> Informer | None:
        list_fn, watch_fn = self.kube.watched(kind)
        informer = Informer(kind, list_fn, watch_fn, backoff=self.backoff(), stale_after=self.stale_after)
        try:
            informer.prime()
        except NotFound:
            if kind != "VerticalPodAutoscaler":
                raise
            log.warning("the VerticalPodAutoscaler CRD is not installed: no VPA recommendations this run")
            return None
        self.informers[kind] = informer.start()
        return informer

    def stop(self) -> None:
        for informer in self.informers.values():
            informer.stop()
