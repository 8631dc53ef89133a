"""What the loop last wrote, and whether the cluster still shows it.

The loop remembers each write (a fingerprint of the patch, the VPA targets, the node plan) so that
it neither rewrites an unchanged decision nor measures the change guardrail from a lagging read.
That memory holds only while the cluster shows the object as the write left it: an object whose
written part was cleared or edited since (a VPA status wiped, an HPA floor lowered by hand, a node's
extended resources reset) is forgotten, decided again from the cluster as it is, and rewritten.
"""
from __future__ import annotations

import json
import logging
from dataclasses import dataclass, field
from typing import Any

from autoscaler.model.cluster import ClusterState, Obj, meta
from autoscaler.model.decisions import VpaDecision
from autoscaler.model.ihpa import IhpaView
from autoscaler.model.spd import SpdView
from autoscaler.model.views import HpaView, NodeView, VpaView
from autoscaler.output.objects import Change
from autoscaler.settings import ReclaimSettings
from contracts.reclaim import ReclaimPlan

log = logging.getLogger(__name__)

# the part of each kind that the loop writes and compares with each cluster read (other kinds are
# not read back: CNRs and ResourceRecommends rely on the fingerprint memory alone)
OBSERVED = {"VerticalPodAutoscaler": "status.recommendation", "HorizontalPodAutoscaler": "spec.minReplicas",
            "Node": "status.allocatable reclaimed resources",
            "ServiceProfileDescriptor": "Tidewise's targetRef, extended indicator and aggMetrics",
            "IntelligentHorizontalPodAutoscaler": "status.desiredReplicas"}
KATALYST_OBSERVED = ("ServiceProfileDescriptor", "IntelligentHorizontalPodAutoscaler")  # in ClusterState.others


def observed_part(kind: str, obj: Obj, reclaim: ReclaimSettings) -> Any:
    """What the cluster shows of the part of `obj` the loop writes (compared by equality)."""
    if kind == "VerticalPodAutoscaler":
        return VpaView(obj).container_recommendations()
    if kind == "HorizontalPodAutoscaler":
        return HpaView(obj).written_min_replicas()
    if kind == "ServiceProfileDescriptor":
        return SpdView(obj).owned_part()
    if kind == "IntelligentHorizontalPodAutoscaler":
        return IhpaView(obj).desired_replicas()
    alloc = NodeView(obj).allocatable_written()
    return [alloc.get(reclaim.millicpu_name), alloc.get(reclaim.memory_name)]


def fingerprint(c: Change) -> str:
    """The patch without its timestamps: equal fingerprints write the same decision."""
    def strip(o: Any) -> Any:
        if isinstance(o, dict):
            return {k: strip(v) for k, v in o.items() if k not in ("lastTransitionTime", "lastRecommendationTime")}
        if isinstance(o, list):
            return [strip(x) for x in o]
        return o

    return json.dumps(strip(c.patch), sort_keys=True, default=str)


def vpa_targets(d: VpaDecision) -> dict[tuple[str, str], int]:
    """(container, resource) -> target of a decision."""
    return {(cr.container, r): v.target for cr in d.containers for r, v in cr.resources.items()}


@dataclass
class WriteMemory:
    """The loop's memory of its writes, kept between runs."""

    # VPA -> (container, resource) -> target this loop last wrote (fresher than a cluster read)
    vpa_written: dict[str, dict[tuple[str, str], int]] = field(default_factory=dict)
    last_written: dict[str, str] = field(default_factory=dict)  # object -> fingerprint of the last patch written
    # object -> the part of it this loop writes, as the cluster should show it until someone else changes it
    observed: dict[str, Any] = field(default_factory=dict)
    reclaim_prev: dict[str, ReclaimPlan] = field(default_factory=dict)  # node -> the plan it advertises

    def already_written(self, c: Change) -> bool:
        """What this loop last wrote already says the same (offline state, or a lagging cache)."""
        return self.last_written.get(c.key) == fingerprint(c)

    def remember(self, c: Change, shown: Obj | None, decision: VpaDecision | None, reclaim: ReclaimSettings) -> None:
        """`c` was written (or would have been, in a dry run); `shown` is the object as the next
        cluster read should show it."""
        self.last_written[c.key] = fingerprint(c)
        if c.kind in OBSERVED and shown is not None:
            self.observed[c.key] = observed_part(c.kind, shown, reclaim)
        if decision is not None:
            self.vpa_written[c.key] = vpa_targets(decision)

    def forget_changed_outside(self, state: ClusterState, reclaim: ReclaimSettings) -> dict[str, str]:
        """Forget every object whose written part the cluster no longer shows (or that is gone);
        returns object -> what it shows now, for those changed outside Tidewise."""
        drifted: dict[str, str] = {}
        if not self.observed:
            return drifted
        live: dict[str, Obj] = {}
        for kind, objs in (("VerticalPodAutoscaler", state.vpas), ("HorizontalPodAutoscaler", state.hpas),
                           ("Node", state.nodes), *((k, state.others.get(k, [])) for k in KATALYST_OBSERVED)):
            for o in objs:
                m = meta(o)
                key = f"{kind}/{m['namespace']}/{m.get('name')}" if m.get("namespace") else f"{kind}/{m.get('name')}"
                if key in self.observed:
                    live[key] = o
        for key, expected in list(self.observed.items()):
            kind = key.split("/", 1)[0]
            obj = live.get(key)
            seen = observed_part(kind, obj, reclaim) if obj is not None else None
            if obj is not None and seen == expected:
                continue
            self._forget(key, kind)
            if obj is not None:
                what = OBSERVED[kind]
                drifted[key] = f"{what} is {json.dumps(seen, default=str)[:200]}, not what Tidewise last wrote"
                log.warning("%s: %s changed outside Tidewise since the last write; deciding it again from the cluster",
                            key, what)
        return drifted

    def _forget(self, key: str, kind: str) -> None:
        del self.observed[key]
        self.last_written.pop(key, None)
        self.vpa_written.pop(key, None)
        if kind == "Node":
            self.reclaim_prev.pop(key.split("/", 1)[1], None)
