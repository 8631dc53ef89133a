"""Katalyst IHPAs in the serving loop: each one decided by the HPA decision of its template
(`decide_hpa`, through `IhpaView.as_hpa()`), and its status written.

What Tidewise writes to an IHPA is its status subresource only (never its spec):
- `desiredReplicas`: the predictive floor — the replicas the forecast needs a start-up time ahead,
  raised to the template's minReplicas and capped at its maxReplicas (what an HPA's minReplicas gets);
- `currentReplicas`: the workload's running pods;
- `currentMetrics`: the metric the floor sized by, as the latest sample shows it per pod.
Replicas change only through an HPA: Katalyst's IHPA controller creates one from the template (owned
by the IHPA). Serve raises that HPA's minReplicas like any HPA's while the IHPA's scaleStrategy is
Auto; in Preview (Katalyst's default) it leaves the HPA as the user set it (see `model/ihpa.py`).
"""
from __future__ import annotations

from typing import Any, Callable

import numpy as np

from autoscaler.logic.decide_hpa import HpaOutcome
from autoscaler.logic.hpa import parse_hpa
from autoscaler.model.cluster import ClusterState, Obj, meta
from autoscaler.model.ihpa import KIND, IhpaDecision, IhpaView
from autoscaler.model.views import HpaView, WorkloadKey, pod_template_requests
from autoscaler.output.objects import Change
from autoscaler.routines.context import RunContext, RunReport, decide_one
from contracts.quantity import format_units, usage_to_units
from predictor.types import SeriesKey

# the HPA decision (features/hpa.HpaDecider): (template as an HPA, workload, its key, stabiliser key, run) -> outcome
DecideHpa = Callable[[HpaView, Obj, WorkloadKey, str, RunContext], HpaOutcome]


def current_metrics(resource: str, series: list[str], ctx: RunContext, replicas: int,
                    request: int | None) -> list[dict[str, Any]]:
    """status.currentMetrics: the resource the floor sized by, per pod at the latest sample (and as a
    share of the pod's request when it has one); empty when a series has no recent sample."""
    last = [ctx.history.series[s].dropna() for s in series]
    if not last or any(y.empty for y in last):
        return []
    per_pod = usage_to_units(resource, max(0.0, float(np.sum([y.iloc[-1] for y in last]))) / max(1, replicas))
    current: dict[str, Any] = {"averageValue": format_units(resource, per_pod)}
    if request:
        current["averageUtilization"] = int(round(100 * per_pod / request))
    return [{"type": "Resource", "resource": {"name": resource, "current": current}}]


def decide_ihpa(decide: DecideHpa, view: IhpaView, ctx: RunContext) -> IhpaDecision:
    """One IHPA: MalformedHpa (its subclass MalformedIhpa) or LookupError when it cannot be served."""
    hpa = HpaView(view.as_hpa())
    kind, target, _, _ = parse_hpa(hpa.obj)
    wl = ctx.state.workload(view.namespace, kind, target)
    if wl is None:
        raise LookupError(f"spec.autoscaler.scaleTargetRef {kind}/{target} not found in namespace {view.namespace}")
    # its own stabiliser: the HPA Katalyst made from it may share its name and is decided on its own
    out = decide(hpa, wl, (view.namespace, kind, target), view.key, ctx)
    requests = pod_template_requests(wl)
    if view.time_bounds():
        # said, not silently ignored; the HPA an IHPA owns is decided within its own min/max as the cluster holds them
        out.decision.reason.steps.append("spec.timeBounds not applied here: the template's min/maxReplicas bound it")
    replicas = ctx.state.replicas(view.namespace, kind, target)
    resource = SeriesKey.parse(out.series[0]).resource
    return IhpaDecision(view.namespace, view.name, out.decision, replicas,
                        current_metrics(resource, out.series, ctx, replicas, requests.get(resource)),
                        view.scale_strategy())


def decide_ihpas(decide: DecideHpa, rep: RunReport, ctx: RunContext) -> list[IhpaDecision]:
    """Every IHPA of the snapshot; one that cannot be decided is skipped with its reason."""
    out: list[IhpaDecision] = []
    for o in ctx.state.others.get(KIND, []):
        view = IhpaView(o)
        decide_one(view.key, rep, lambda: decide_ihpa(decide, view, ctx), out.append)
    return out


def ihpa_change(ihpa: Obj, d: IhpaDecision) -> Change | None:
    """The IHPA with its new status; None when the status already says the same."""
    status: dict[str, Any] = {"desiredReplicas": d.hpa.min_replicas, "currentReplicas": d.current_replicas,
                              "currentMetrics": d.current_metrics}
    old = IhpaView(ihpa).status
    if all(old.get(k) == v for k, v in status.items()):
        return None
    m = meta(ihpa)
    return Change(KIND, ihpa.get("apiVersion", "autoscaling.katalyst.kubewharf.io/v1alpha2"), m.get("namespace"),
                  m["name"], dict(ihpa, status={**old, **status}), {"status": status}, subresource="status",
                  safe_direction=d.hpa.min_replicas >= int(old.get("desiredReplicas") or 0),
                  reasons={"reason": d.hpa.reason.to_dict(), "predicted": d.hpa.predicted, "scaleStrategy": d.strategy,
                           "timeline": {"start": d.hpa.timeline_start, "step_seconds": d.hpa.timeline_step_seconds,
                                        "replicas": d.hpa.timeline}})


def ihpa_changes(decided: list[IhpaDecision], state: ClusterState, before: dict[str, Any]) -> list[Change]:
    """The status change of every IHPA decided this run; `before` gets change -> the live object."""
    live = {IhpaView(o).key: o for o in state.others.get(KIND, [])}
    changes = []
    for d in decided:
        c = ihpa_change(live[d.key], d)
        if c is not None:
            before[c.key] = live[d.key]
            changes.append(c)
    return changes
