"""Decisions -> Kubernetes objects and patches, as the published schemas describe them.

Each `Change` carries both forms: `obj`, the whole object as it is after the write (what the file
sink writes for GitOps review and what the tests validate), and `patch`, the body the API sink
sends (a merge patch, to the status subresource where the kind has one).
"""
from __future__ import annotations

import copy
import datetime as dt
import json
from dataclasses import dataclass, field
from typing import Any

from autoscaler.model.cluster import Obj, meta
from autoscaler.model.decisions import HpaDecision, VpaDecision
from autoscaler.model.views import ANNOTATION_USER_MIN
from autoscaler.settings import ReclaimSettings
from contracts.annotations import HPA_ANCHOR_ANNOTATION, HPA_USER_TARGET_ANNOTATION
from contracts.annotations import REASON_ANNOTATION as ANNOTATION_REASON
from contracts.node_forecast import FORECAST_ANNOTATION, FORECAST_SCHEMA, NodeForecast, forecast_annotation
from contracts.quantity import format_units
from predictor.durations import parse_duration
# the node agent reads the plan annotation of its own Node: name, schema and document are shared
from contracts.reclaim import PLAN_ANNOTATION, PLAN_SCHEMA, ReclaimPlan, plan_document

__all__ = ["ANNOTATION_REASON", "ANNOTATION_USER_MIN", "PLAN_ANNOTATION", "PLAN_SCHEMA", "Change", "cnr_change",
           "hpa_change", "hpa_target_change", "node_change", "vpa_undo", "plan_document", "published", "resource_recommend_change", "vpa_change"]

CONDITION_REASON = "TidewiseForecast"
MAX_MESSAGE = 1000  # condition messages stay readable in `kubectl describe`


@dataclass
class Change:
    kind: str
    api_version: str
    namespace: str | None
    name: str
    obj: Obj
    patch: dict[str, Any]
    subresource: str | None = None  # "status" when written through the status subresource
    safe_direction: bool = False  # a change that must never wait for a cool-down
    reasons: dict[str, Any] = field(default_factory=dict)
    create: bool = False  # the object does not exist yet: created (then its status patched), not patched
    # written right after this one, both or neither (a VPA's CPU request and its HPA's target utilisation):
    # when the companion fails, `undo` (the patch restoring this object) is written and both failed
    companion: "Change | None" = None
    undo: "Change | None" = None

    @property
    def key(self) -> str:
        return f"{self.kind}/{self.namespace}/{self.name}" if self.namespace else f"{self.kind}/{self.name}"


def _recommendation(decision: VpaDecision, field_names: tuple[str, str, str, str]) -> list[dict[str, Any]]:
    target, lower, upper, uncapped = field_names
    out = []
    for c in decision.containers:
        rec: dict[str, Any] = {"containerName": c.container}
        for name, attr in ((target, "target"), (lower, "lower"), (upper, "upper"), (uncapped, "uncapped")):
            if name:
                rec[name] = {r: format_units(r, getattr(v, attr)) for r, v in sorted(c.resources.items())}
        out.append(rec)
    return out


def _message(decision: VpaDecision) -> str:
    parts = [f"{c}/{r}: {why}" for c, rs in decision.reasons().items() for r, why in rs.items()]
    return ("; ".join(parts) or "no controlled resource")[:MAX_MESSAGE]


def vpa_change(vpa: Obj, decision: VpaDecision, now_iso: str) -> Change | None:
    """The VPA with its new status.recommendation; None when that recommendation is unchanged."""
    recs = _recommendation(decision, ("target", "lowerBound", "upperBound", "uncappedTarget"))
    status = {
        "recommendation": {"containerRecommendations": recs},
        "conditions": [{
            "type": "RecommendationProvided", "status": "True", "lastTransitionTime": now_iso,
            "reason": CONDITION_REASON, "message": _message(decision),
        }],
    }
    current = ((vpa.get("status") or {}).get("recommendation") or {}).get("containerRecommendations")
    if current == recs:
        return None
    obj = dict(vpa, status=status)  # shallow: only status is replaced, the rest is shared read-only
    m = meta(vpa)
    return Change("VerticalPodAutoscaler", vpa.get("apiVersion", "autoscaling.k8s.io/v1"), m.get("namespace"),
                  m["name"], obj, {"status": status}, subresource="status",
                  reasons={"containers": decision.reasons(), "replicas": decision.replicas})


def resource_recommend_change(vpa: Obj, decision: VpaDecision, recommender: str, now_iso: str) -> Change:
    """The same recommendation as a Katalyst ResourceRecommend (recommendation.katalyst.kubewharf.io)."""
    m = meta(vpa)
    ref = (vpa.get("spec") or {}).get("targetRef") or {}
    spec = {
        "targetRef": {"apiVersion": ref.get("apiVersion", "apps/v1"), "kind": ref.get("kind"), "name": ref.get("name")},
        "resourcePolicy": {
            "algorithmPolicy": {"recommender": recommender, "algorithm": "forecast"},
            "containerPolicies": [{"containerName": c.container,
                                   "controlledResourcesPolicies": [{"resourceName": r} for r in sorted(c.resources)]}
                                  for c in decision.containers],
        },
    }
    recs = [{"containerName": r["containerName"], "requests": {"target": r["target"]}}
            for r in _recommendation(decision, ("target", "", "", ""))]
    status = {
        "recommendResources": {"containerRecommendations": recs},
        "lastRecommendationTime": now_iso,
        # required by the CRD; Tidewise derives the spec from the VPA and never edits it: generation 1
        "observedGeneration": 1,
        "conditions": [{"type": "RecommendationProvided", "status": "True", "lastTransitionTime": now_iso,
                        "reason": CONDITION_REASON, "message": _message(decision)}],
    }
    obj: Obj = {"apiVersion": "recommendation.katalyst.kubewharf.io/v1alpha1", "kind": "ResourceRecommend",
           "metadata": {"name": m["name"], "namespace": m.get("namespace")}, "spec": spec, "status": status}
    return Change("ResourceRecommend", obj["apiVersion"], m.get("namespace"), m["name"], obj, {"status": status},
                  subresource="status", reasons={"containers": decision.reasons()})


def hpa_change(hpa: Obj, decision: HpaDecision) -> Change | None:
    """The HPA with the new minReplicas (the user's own floor kept in an annotation); None if unchanged."""
    spec = hpa.get("spec") or {}
    if spec.get("minReplicas", 1) == decision.min_replicas:
        return None
    m = meta(hpa)
    annotations = {ANNOTATION_USER_MIN: str(decision.user_min_replicas),
                   ANNOTATION_REASON: decision.reason.summary()[:MAX_MESSAGE]}
    md = dict(hpa.get("metadata") or {})
    md["annotations"] = {**(md.get("annotations") or {}), **annotations}
    obj = dict(hpa, metadata=md, spec=dict(spec, minReplicas=decision.min_replicas))
    patch: dict[str, Any] = {"metadata": {"annotations": annotations}, "spec": {"minReplicas": decision.min_replicas}}
    if m.get("resourceVersion"):
        # optimistic concurrency: a concurrent edit (say, of maxReplicas) makes this a 409, not a lost update
        patch["metadata"]["resourceVersion"] = m["resourceVersion"]
    safe = decision.min_replicas > int(spec.get("minReplicas", 1))
    return Change("HorizontalPodAutoscaler", hpa.get("apiVersion", "autoscaling/v2"), m.get("namespace"), m["name"],
                  obj, patch, safe_direction=safe,
                  reasons={"reason": decision.reason.to_dict(), "predicted": decision.predicted,
                           "timeline": {"start": decision.timeline_start, "step_seconds": decision.timeline_step_seconds,
                                        "replicas": decision.timeline}})


def vpa_undo(vpa: Obj) -> Change:
    """The status patch that puts the VPA's recommendation and conditions back as read (a merge
    patch: null removes what was not there)."""
    status = vpa.get("status") or {}
    m = meta(vpa)
    patch = {"status": {"recommendation": status.get("recommendation"), "conditions": status.get("conditions")}}
    return Change("VerticalPodAutoscaler", vpa.get("apiVersion", "autoscaling.k8s.io/v1"), m.get("namespace"),
                  m["name"], vpa, patch, subresource="status", reasons={"undo": "restored as read"})


def hpa_target_change(hpa: Obj, index: int, target_pct: int, user_pct: int, anchor_millicpu: int,
                      reason: str) -> tuple[Change, Change]:
    """(the HPA with spec.metrics[index]'s averageUtilization set to `target_pct`, the user's target and
    the scale point's request kept in annotations; the patch putting it back as read). spec.metrics is a
    list: a merge patch replaces it whole, so the patch carries every metric, and the resourceVersion
    (a concurrent edit is a 409, never a lost update)."""
    spec = hpa.get("spec") or {}
    metrics = copy.deepcopy(spec.get("metrics") or [])
    metrics[index]["resource"]["target"]["averageUtilization"] = int(target_pct)
    m = meta(hpa)
    # the reason stays in the VPA's condition: the HPA's reason annotation is its minReplicas floor's
    annotations = {HPA_USER_TARGET_ANNOTATION: str(user_pct), HPA_ANCHOR_ANNOTATION: str(anchor_millicpu)}
    md = dict(hpa.get("metadata") or {})
    old_annotations = md.get("annotations") or {}
    md["annotations"] = {**old_annotations, **annotations}
    obj = dict(hpa, metadata=md, spec=dict(spec, metrics=metrics))
    patch: dict[str, Any] = {"metadata": {"annotations": annotations}, "spec": {"metrics": metrics}}
    back: dict[str, Any] = {"metadata": {"annotations": {k: old_annotations.get(k) for k in annotations}},
                            "spec": {"metrics": spec.get("metrics")}}
    if m.get("resourceVersion"):
        patch["metadata"]["resourceVersion"] = m["resourceVersion"]
    api = hpa.get("apiVersion", "autoscaling/v2")
    change = Change("HorizontalPodAutoscaler", api, m.get("namespace"), m["name"], obj, patch,
                    reasons={"scale_point": {"target_utilization": target_pct, "why": reason}})
    return change, Change("HorizontalPodAutoscaler", api, m.get("namespace"), m["name"], hpa, back,
                          reasons={"undo": "restored as read"})


def published(node: Obj, settings: ReclaimSettings) -> tuple[int | None, int | None]:
    """The reclaimable (millicpu, bytes) a node currently advertises, if any."""
    alloc = (node.get("status") or {}).get("allocatable") or {}
    cpu, mem = alloc.get(settings.millicpu_name), alloc.get(settings.memory_name)
    try:
        return (int(cpu) if cpu is not None else None, int(mem) if mem is not None else None)
    except (TypeError, ValueError):
        return None, None


def _plan_current(node: Obj, doc: dict[str, Any], window_seconds: int) -> bool:
    """True when the node already carries a plan with the same numbers that stays valid for more
    than half a window: republishing only then keeps the agent's plan fresh without a node write
    per node per run (1 h window: one write per node every 30 min while nothing changes)."""
    text = ((node.get("metadata") or {}).get("annotations") or {}).get(PLAN_ANNOTATION)
    old: Any = None
    try:
        old = json.loads(text) if text else None
        left = (dt.datetime.fromisoformat(str(old["valid_until"]).replace("Z", "+00:00")) -
                dt.datetime.fromisoformat(doc["generated_at"].replace("Z", "+00:00"))).total_seconds()
    except (ValueError, TypeError, KeyError, AttributeError):
        return False
    same = all(old.get(k) == doc[k] for k in doc if k not in ("generated_at", "valid_until"))
    return same and left > window_seconds / 2


def node_change(node: Obj, plan: ReclaimPlan, settings: ReclaimSettings,
                forecast: NodeForecast | None = None) -> Change | None:
    """The node with the reclaimed extended resources in its status (capacity = allocatable: they
    are not requestable by anyone but reclaimed pods), the plan for its node agent in the
    `tidewise.io/reclaim-plan` annotation and the scheduler extender's `tidewise.io/node-forecast`;
    None when none needs a write. The API sink sends the status and the annotations as two merge
    patches (annotations are metadata, which nodes/status does not take)."""
    values = {settings.millicpu_name: str(plan.reclaimed_millicpu), settings.memory_name: str(plan.reclaimed_memory_bytes)}
    status = node.get("status") or {}
    doc = plan_document(plan)
    status_same = all((status.get("allocatable") or {}).get(k) == v for k, v in values.items())
    plan_same = _plan_current(node, doc, plan.window_seconds)
    forecast_same = forecast is None or forecast_current(node, forecast, settings.forecast_refresh)
    if status_same and plan_same and forecast_same:
        return None
    obj = dict(node)
    patch: dict[str, Any] = {}
    if not (plan_same and forecast_same):
        annotations = {} if plan_same else {PLAN_ANNOTATION: json.dumps(doc, sort_keys=True, separators=(",", ":"))}
        if forecast is not None:  # with the plan when that is written anyway: one node write, not two
            annotations[FORECAST_ANNOTATION] = forecast_annotation(forecast)
        md = dict(node.get("metadata") or {})
        md["annotations"] = {**(md.get("annotations") or {}), **annotations}
        obj["metadata"] = md
        patch["metadata"] = {"annotations": annotations}
    if not status_same:
        obj["status"] = dict(status, capacity={**(status.get("capacity") or {}), **values},
                             allocatable={**(status.get("allocatable") or {}), **values})
        patch["status"] = {"capacity": dict(values), "allocatable": dict(values)}
    current = published(node, settings)
    safe = current[0] is not None and plan.reclaimed_millicpu <= current[0] and \
        (current[1] is None or plan.reclaimed_memory_bytes <= current[1])
    return Change("Node", "v1", None, meta(node)["name"], obj, patch,
                  subresource="status" if "status" in patch else None,
                  safe_direction=safe, reasons={"plan": plan.to_dict()})


def forecast_current(node: Obj, forecast: NodeForecast, refresh: str) -> bool:
    """True when the node's forecast annotation is this schema's and less than `refresh` older than
    `forecast` (30 min: a node write per node every 30 min, not every run, for numbers that move slowly)."""
    return forecast_fresh(node, forecast.node, forecast.generated, refresh)


def forecast_fresh(node: Obj, name: str, at: dt.datetime, refresh: str) -> bool:
    """True when `node` carries a forecast annotation of this schema for `name` less than `refresh`
    older than `at`: then none needs making this run (the loop skips building it)."""
    text = ((node.get("metadata") or {}).get("annotations") or {}).get(FORECAST_ANNOTATION)
    try:
        old = json.loads(text) if text else {}
        age = at - dt.datetime.fromisoformat(str(old["generated"]).replace("Z", "+00:00"))
        fresh = old["schema"] == FORECAST_SCHEMA and old["node"] == name
    except (ValueError, TypeError, KeyError, AttributeError):
        return False
    return fresh and dt.timedelta(0) <= age < parse_duration(refresh)


def cnr_change(plan: ReclaimPlan, settings: ReclaimSettings, now_iso: str) -> Change:
    """The same numbers as a Katalyst CustomNodeResource status, per NUMA node when known."""
    def res(cpu: int, mem: int) -> dict[str, dict[str, str]]:
        v = {settings.millicpu_name: str(cpu), settings.memory_name: str(mem)}
        return {"allocatable": dict(v), "capacity": dict(v)}

    status: dict[str, Any] = {"resources": res(plan.reclaimed_millicpu, plan.reclaimed_memory_bytes)}
    if plan.numa:
        status["topologyZone"] = [{"type": "Socket", "name": "0", "children": [
            {"type": "Numa", "name": str(i), "resources": res(n.millicpu, n.memory_bytes)}
            for i, n in sorted(plan.numa.items())]}]
    # topologyPolicy belongs to Katalyst's agent: the patch leaves it alone; the whole object shows
    # the CRD's default so that it validates as a file
    obj: Obj = {"apiVersion": "node.katalyst.kubewharf.io/v1alpha1", "kind": "CustomNodeResource",
           "metadata": {"name": plan.node, "annotations": {ANNOTATION_REASON: json.dumps(plan.reasons)[:MAX_MESSAGE]}},
           "status": {"topologyPolicy": "none", **status}}
    return Change("CustomNodeResource", obj["apiVersion"], None, plan.node, obj, {"status": status},
                  subresource="status", reasons={"plan": plan.to_dict(), "at": now_iso})
