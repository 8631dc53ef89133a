"""Predictive HPA floors: each HPA's minReplicas raised to what the forecast needs a start-up time
ahead (`logic/decide_hpa.py`). The decider, with its stabilisers, is shared with the IHPA feature."""
from __future__ import annotations

from typing import Any

import pandas as pd

from autoscaler.features.base import DECIDE, ForecastNeed
from autoscaler.logic.decide_hpa import HpaInputs, HpaOutcome, decide_hpa
from autoscaler.logic.hpa import Stabilizer, parse_hpa
from autoscaler.model.cluster import ClusterState, Obj, meta
from autoscaler.model.decisions import HpaDecision
from autoscaler.model.ihpa import KIND as IHPA_KIND, previewing
from autoscaler.model.views import HpaView, WorkloadKey, pod_template_requests
from autoscaler.output.objects import Change, hpa_change
from autoscaler.routines.context import RunContext, RunReport, decide_one, parse_duration
from autoscaler.settings import ServeSettings


class HpaDecider:
    """One HPA's (or IHPA template's) floor; keeps each one's stabiliser between runs."""

    def __init__(self, settings: ServeSettings, step: pd.Timedelta) -> None:
        self.settings, self.step = settings, step
        self.stabilizers: dict[str, Stabilizer] = {}

    def __call__(self, hpa: HpaView, wl: Obj, target: WorkloadKey, stabilizer: str, ctx: RunContext) -> HpaOutcome:
        stab = self.stabilizers.setdefault(stabilizer, Stabilizer(parse_duration(self.settings.hpa.stabilization)))
        # decision-time forecasts are made at this origin: they serve as the forecast "as made" too
        forecasts, made = (ctx.forecasts, ctx.made) if ctx.hpa_forecasts is None else \
            (ctx.hpa_forecasts, ctx.hpa_forecasts)
        return decide_hpa(HpaInputs(hpa, pod_template_requests(wl), ctx.index.get(target), forecasts, made,
                                    ctx.history, ctx.origin, ctx.now, self.step), self.settings.hpa, stab)


class HpaFeature:
    name, kinds, phase, write_rank, report_rank = "hpa", (), DECIDE, 1, 1

    def __init__(self, settings: ServeSettings, decider: HpaDecider) -> None:
        self.settings, self.decider = settings, decider

    @property
    def enabled(self) -> bool:
        return True

    def need(self, step: pd.Timedelta) -> ForecastNeed:
        s = self.settings.hpa
        # 0.5: the HPA floor's level ratio (and short-term band) compare observations with the median
        return ForecastNeed(parse_duration(s.startup) + parse_duration(s.look_ahead) + 2 * step, (0.5, s.quantile))

    def workloads(self, state: ClusterState) -> set[WorkloadKey]:
        keys = {HpaView(h).workload_key() for h in state.hpas}
        return {k for k in keys if k is not None}  # a malformed one is reported by the recommend step

    def run(self, rep: RunReport, ctx: RunContext) -> str:
        ihpas = ctx.state.others.get(IHPA_KIND, [])
        for hpa in ctx.state.hpas:
            key = f"HorizontalPodAutoscaler/{meta(hpa).get('namespace')}/{meta(hpa).get('name')}"
            held = previewing(hpa, ihpas) if self.settings.ihpa.respect_preview else None
            if held:
                rep.skipped[key] = held
                continue
            decide_one(key, rep, lambda: self._decide(HpaView(hpa), ctx), rep.hpa.append)
        return f"{len(rep.hpa)} HPA"

    def _decide(self, hpa: HpaView, ctx: RunContext) -> HpaDecision:
        kind, target, _, _ = parse_hpa(hpa.obj)
        wl = ctx.state.workload(hpa.namespace, kind, target)
        if wl is None:
            raise LookupError(f"scaleTargetRef {kind}/{target} not found in namespace {hpa.namespace}")
        out = self.decider(hpa, wl, (hpa.namespace, kind, target), f"{hpa.namespace}/{hpa.name}", ctx)
        d = out.decision
        ctx.hpa_series[f"{d.namespace}/{d.name}"] = (out.target_kind, out.target_name, out.series, d.predicted,
                                                     d.min_replicas)
        return d

    def changes(self, rep: RunReport, state: ClusterState, now_iso: str, before: dict[str, Any]) -> list[Change]:
        hpas = {f"{meta(h).get('namespace', 'default')}/{meta(h)['name']}": h for h in state.hpas}
        changes = []
        for h in rep.hpa:
            c = hpa_change(hpas[f"{h.namespace}/{h.name}"], h)
            if c is not None:
                before[c.key] = hpas[f"{h.namespace}/{h.name}"]
                changes.append(c)
        return changes

    def written(self, rep: RunReport) -> None:
        pass

    def report(self, rep: RunReport) -> dict[str, Any]:
        return {"hpa": {d.key: {"minReplicas": d.min_replicas, "predicted": d.predicted, "reason": d.reason.summary()}
                        for d in rep.hpa}}
