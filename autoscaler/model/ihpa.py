"""Katalyst's IntelligentHorizontalPodAutoscaler (autoscaling.katalyst.kubewharf.io/v1alpha2) as the
HPA decision reads it, and what serve decided for one.

An IHPA carries an HPA template (`spec.autoscaler`: scaleTargetRef, min/maxReplicas, metrics,
behavior), a predictive algorithm (`spec.algorithmConfig`) and a `scaleStrategy` (Preview, the
default, or Auto). Tidewise is the predictive algorithm: `as_hpa()` turns the template into the
autoscaling/v2 HPA dict that `HpaView` and `decide_hpa` already read, so one decision serves both
kinds. A metric given as a `customMetric` (Katalyst's resource-portrait metric, `identify` cpu or
memory and `value` per replica) becomes a Resource metric with that AverageValue.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from autoscaler.model.cluster import Obj, meta
from autoscaler.model.decisions import HpaDecision
from autoscaler.model.views import MalformedHpa, ObjectView, WorkloadKey

KIND = "IntelligentHorizontalPodAutoscaler"
AUTO = "Auto"  # Katalyst's scaleStrategy that changes replicas; anything else (Preview, unset) only reports


class MalformedIhpa(MalformedHpa):
    """An IHPA whose template cannot be read as an HPA."""


def _metric(m: Any, i: int) -> dict[str, Any] | None:
    """One spec.autoscaler.metrics[] entry as an autoscaling/v2 MetricSpec (None: nothing to size by)."""
    if not isinstance(m, dict):
        raise MalformedIhpa(f"spec.autoscaler.metrics[{i}] is not an object")
    if isinstance(m.get("metric"), dict):  # "Metric is preferred": Katalyst ignores customMetric then
        return dict(m["metric"])
    custom = m.get("customMetric")
    if isinstance(custom, dict):
        name, value = custom.get("identify"), custom.get("value")
        if name not in ("cpu", "memory"):
            return None  # a portrait of another metric: not one Tidewise forecasts
        return {"type": "Resource", "resource": {"name": name, "target": {"type": "AverageValue",
                                                                        "averageValue": value}}}
    raise MalformedIhpa(f"spec.autoscaler.metrics[{i}] has neither metric nor customMetric")


@dataclass(frozen=True)
class IhpaView(ObjectView):
    """An IHPA, read through its HPA template."""

    @property
    def key(self) -> str:
        return f"{KIND}/{self.namespace}/{self.name}"

    def template(self) -> dict[str, Any]:
        spec = self.obj.get("spec")
        tpl = spec.get("autoscaler") if isinstance(spec, dict) else None
        if not isinstance(tpl, dict):
            raise MalformedIhpa("spec.autoscaler (the HPA template) is missing")
        return tpl

    def scale_strategy(self) -> str:
        spec = self.obj.get("spec")
        return str((spec.get("scaleStrategy") if isinstance(spec, dict) else None) or "Preview")

    def time_bounds(self) -> object:
        """spec.timeBounds as written (None when absent)."""
        return self.spec.get("timeBounds")

    def desired_replicas(self) -> object:
        """status.desiredReplicas as written (None when absent)."""
        return self.status.get("desiredReplicas")

    def workload_key(self) -> WorkloadKey | None:
        """The workload the template scales (None: no usable scaleTargetRef; the decision says why)."""
        try:
            ref = self.template().get("scaleTargetRef")
        except MalformedIhpa:
            return None
        return (self.namespace, ref.get("kind", ""), ref.get("name", "")) if isinstance(ref, dict) else None

    def as_hpa(self) -> Obj:
        """The template as an autoscaling/v2 HorizontalPodAutoscaler dict (same namespace and name)."""
        tpl = self.template()
        spec: dict[str, Any] = {k: tpl[k] for k in ("scaleTargetRef", "minReplicas", "maxReplicas") if k in tpl}
        metrics = [x for i, m in enumerate(tpl.get("metrics") or []) if (x := _metric(m, i)) is not None]
        if tpl.get("metrics") and not metrics:
            raise MalformedIhpa("spec.autoscaler.metrics names no cpu or memory metric to size replicas by")
        if metrics:
            spec["metrics"] = metrics
        m = meta(self.obj)
        # no annotations: the user's floor is the template's minReplicas (Tidewise never writes the IHPA spec)
        return {"apiVersion": "autoscaling/v2", "kind": "HorizontalPodAutoscaler",
                "metadata": {"name": m.get("name"), "namespace": m.get("namespace", "default")}, "spec": spec}


def owner_ihpa(hpa: Obj) -> str | None:
    """Name of the IHPA that owns this HPA (Katalyst's controller creates one per IHPA), if any."""
    for ref in meta(hpa).get("ownerReferences") or []:
        if isinstance(ref, dict) and ref.get("kind") == KIND and ref.get("name"):
            return str(ref["name"])
    return None


def previewing(hpa: Obj, ihpas: list[Obj]) -> str | None:
    """Why this HPA's floor must stay as its user set it: it belongs to an IHPA that is not in Auto
    mode (Preview promises not to change replicas); None when it may be raised."""
    owner = owner_ihpa(hpa)
    if owner is None:
        return None
    ns = meta(hpa).get("namespace", "default")
    for o in ihpas:
        view = IhpaView(o)
        if view.name == owner and view.namespace == ns and view.scale_strategy() != AUTO:
            return f"owned by {KIND} {ns}/{owner} in scaleStrategy {view.scale_strategy()}: replicas are not changed"
    return None


@dataclass
class IhpaDecision:
    """What serve decided for one IHPA: the HPA decision of its template, and what its status shows."""

    namespace: str
    name: str
    hpa: HpaDecision
    current_replicas: int
    current_metrics: list[dict[str, Any]] = field(default_factory=list)  # status.currentMetrics
    strategy: str = "Preview"

    @property
    def key(self) -> str:
        return f"{KIND}/{self.namespace}/{self.name}"
