"""The cluster as the API server says it is, kept by watches instead of lists (long-running serve).

One `contracts.informer.Informer` per kind the loop reads: the first `read()` lists each kind, then a
daemon thread per kind follows its watch, so a later run reads the cache and a quiet cluster costs
six idle connections, not six full lists a minute. A kind whose cache cannot be trusted (not listed,
or its watch failing for longer than `stale_after`) raises `StaleCache`, which freezes the run like
any failed source. A missing CRD means none of that kind, as with `ApiCluster`; it is probed again each run.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

from autoscaler.kube import Kube
from autoscaler.input.cluster import CRD_KINDS, missing_crd
from autoscaler.model.cluster import KINDS, ClusterState
from contracts.informer import Backoff, Informer
from contracts.kube_errors import NotFound


@dataclass
class WatchedCluster:
    """`read()` has `ApiCluster`'s contract; `stop()` ends the watches (at shutdown, in tests)."""

    kube: Kube
    stale_after: float = 120.0  # two missed 60 s runs: then the run freezes instead of deciding on old data
    backoff: Callable[[], Backoff] = Backoff  # one per informer; tests shorten it
    informers: dict[str, Informer] = field(default_factory=dict)
    extra_kinds: tuple[str, ...] = ()  # from `OPTIONAL_KINDS`, as with `ApiCluster`

    def read(self) -> ClusterState:
        objects: list[dict[str, Any]] = []
        for kind in KINDS + self.extra_kinds:
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
            if kind not in CRD_KINDS:
                raise
            missing_crd(kind)
            return None
        self.informers[kind] = informer.start()
        return informer

    def stop(self) -> None:
        for informer in self.informers.values():
            informer.stop()
