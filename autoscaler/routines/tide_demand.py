"""Online demand on a tide pool over the next steps, in requests (what the scheduler packs):
forecast replicas x per-pod requests, per workload with pods on the pool.

Replicas: a workload under an HPA gets the replicas the predictive HPA's own rule asks for from
this run's forecasts (the quantile asked for: `tide.quantile`, or the median for the calibrated
margin; per-replica target x (1 + floor tolerance), bounded
by the user's minReplicas and maxReplicas), scaled by the share of its pods on the pool; one without
an HPA keeps the pods it has. A workload's pods still pending on no node count as on the pool
(they are demand a drain may have created). Requests: the VPA decision's targets when Tidewise
decided the workload this run, else the pods' own requests. Step 0 holds at least the requests on
the pool now, pending ones included.
A workload under an HPA without a usable forecast raises `NoForecast`: its pool makes no move.
"""
from __future__ import annotations

from typing import Sequence

import numpy as np

from autoscaler.logic.hpa import hpa_target, interpolate_quantile, parse_hpa, replicas_needed
from autoscaler.model.cluster import ClusterState, Obj, meta
from autoscaler.model.decisions import VpaDecision
from autoscaler.model.views import HpaView, PodView, WorkloadKey, WorkloadSeries, pod_template_requests
from autoscaler.settings import ServeSettings
from predictor.types import Forecast


class NoForecast(LookupError):
    """An online workload's replicas cannot be forecast: no move is made on its pool."""


def hpas_by_workload(state: ClusterState) -> dict[WorkloadKey, Obj]:
    out: dict[WorkloadKey, Obj] = {}
    for h in state.hpas:
        try:
            kind, name, _, _ = parse_hpa(h)
        except ValueError:
            continue  # a malformed HPA is reported by the recommend step
        out[(str(meta(h).get("namespace", "default")), kind, name)] = h
    return out


def vpa_requests(decisions: Sequence[VpaDecision]) -> dict[WorkloadKey, tuple[int, int]]:
    """workload -> (millicpu, bytes) per pod from this run's VPA targets (a resource the VPA does
    not control is absent from the decision and taken from the pods)."""
    out: dict[WorkloadKey, tuple[int, int]] = {}
    for d in decisions:
        cpu = sum(c.resources["cpu"].target for c in d.containers if "cpu" in c.resources)
        mem = sum(c.resources["memory"].target for c in d.containers if "memory" in c.resources)
        out[(d.namespace, d.target_kind, d.target_name)] = (cpu, mem)
    return out


def hpa_replicas(hpa: Obj, wl: Obj, series: WorkloadSeries | None, forecasts: dict[str, Forecast],
                 settings: ServeSettings, steps: int, quantile: float) -> np.ndarray:
    """Replicas per step the predictive HPA's rule asks for at forecast `quantile`, between the user's
    min and max."""
    s = settings.hpa
    kind, name, spec_min, max_replicas = parse_hpa(hpa)
    tgt = hpa_target(hpa, pod_template_requests(wl), s.default_utilization)
    sids = series.ids(tgt.resource) if series else []
    missing = [x for x in sids if x not in forecasts or len(forecasts[x].index) < steps]
    if not sids or missing:
        raise NoForecast(f"{kind}/{name}: no {tgt.resource} forecast covering {steps} steps "
                         f"({', '.join(missing) or 'no series'})")
    q = sum(interpolate_quantile(forecasts[x].values, forecasts[x].quantiles, quantile)[:steps]
            for x in sids)
    scale = 1000.0 if tgt.resource == "cpu" else 1.0  # series carry cores; targets are millicpu
    reps = replicas_needed(np.asarray(q) * scale, tgt.per_replica_units * (1 + s.floor_tolerance))
    user = HpaView(hpa).user_min_annotation()
    low = int(user) if user is not None and user.isdigit() else spec_min
    return np.clip(reps, max(1, low), max_replicas)


def pool_online_demand(pods: Sequence[Obj], state: ClusterState, index: dict[WorkloadKey, WorkloadSeries],
                       forecasts: dict[str, Forecast], vpa: Sequence[VpaDecision], settings: ServeSettings,
                       steps: int, quantile: float) -> tuple[np.ndarray, np.ndarray, list[str]]:
    """((steps, 2) millicpu and bytes the online `pods` of a pool will request at forecast `quantile`,
    (2,) what they and the pending ones request now, notes)."""
    by_wl: dict[WorkloadKey, list[PodView]] = {}
    demand = np.zeros((steps, 2))
    now = np.zeros(2)
    notes: list[str] = []
    for pod in pods:
        view = PodView(pod)
        now += view.requests()
        wl = state.workload_of_pod(pod)
        if wl is None:
            demand += view.requests()  # no controller to forecast: it stays as it is
        else:
            by_wl.setdefault(wl, []).append(view)
    for wl, views in by_wl.items():
        for pv in map(PodView, state.pods_of(*wl)):
            if not pv.node_name and pv.phase == "Pending":
                views.append(pv)
                now += views[-1].requests()
    hpas = hpas_by_workload(state)
    targets = vpa_requests(vpa)
    for wl, views in sorted(by_wl.items()):
        per_pod = np.mean([v.requests() for v in views], axis=0)
        if wl in targets:
            cpu, mem = targets[wl]
            per_pod = np.array([cpu or per_pod[0], mem or per_pod[1]], dtype=float)
        if wl in hpas:
            share = len(views) / max(1, state.replicas(*wl))
            reps = hpa_replicas(hpas[wl], state.workload(*wl) or {}, index.get(wl), forecasts, settings, steps,
                                quantile) * share
            notes.append(f"{'/'.join(wl)}: {len(views)} pod(s) here, forecast {reps.min():.1f}-{reps.max():.1f} "
                         f"x {per_pod[0]:.0f}m")
        else:
            reps = np.full(steps, float(len(views)))
        demand += reps[:, None] * per_pod[None, :]
    demand[0] = np.maximum(demand[0], now)  # the pods there now must fit now
    return demand, now, notes
