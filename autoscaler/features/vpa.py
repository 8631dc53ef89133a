"""VPA recommendations: each VPA naming this recommender decided (`logic/decide_vpa.py`), limited
by the change policy, and its status written (and, opted in, a Katalyst ResourceRecommend).

Each decision carries the VPA's violation budget (`logic/budget.py`) and the achieved rate of the
last 24 h against the request in force (/metrics). When the CPU request changes and a selected HPA
scales the workload on CPU utilisation, its target is rewritten with it to keep the scale point
(`logic/vpa_hpa.py`), both or neither (`routines/changes.py`), or the CPU request is held. A VPA whose
updateMode is Initial or Off gets a request meant for a pod's whole life (`logic/regime.py`), over the
life its workload's pods are seen to live (`logic/pod_life.py`)."""
from __future__ import annotations

import logging
from functools import partial
from typing import Any

import pandas as pd

from autoscaler.features.base import DECIDE, ForecastNeed
from autoscaler.logic.budget import budget_for, violation_rate
from autoscaler.logic.choice_by_cost import CostLedger
from autoscaler.logic.decide_vpa import VpaInputs, decide_vpa
from autoscaler.logic.pod_life import PodLives
from autoscaler.logic.regime import OFF
from autoscaler.logic.vpa import pod_peaks_range
from autoscaler.model.cluster import ClusterState, meta
from autoscaler.model.decisions import VpaDecision
from autoscaler.logic.vpa_hpa import plan_scale_point
from autoscaler.model.views import (HpaView, PodView, VpaView, WorkloadKey, WorkloadSeries, last_oom_kills,
                                   requests_in_force)
from autoscaler.output.objects import Change, hpa_target_change, resource_recommend_change, vpa_change, vpa_undo
from autoscaler.routines.change_policy import ChangePolicy
from autoscaler.routines.context import RunContext, RunReport, decide_one, parse_duration
from autoscaler.routines.drift import vpa_targets
from autoscaler.settings import ServeSettings

log = logging.getLogger(__name__)
FROM = {"pods": "the pods' own requests", "template": "the pod template's requests"}  # requests_in_force's source


class VpaFeature:
    name, kinds, phase, write_rank, report_rank = "vpa", (), DECIDE, 0, 0

    def __init__(self, settings: ServeSettings, policy: ChangePolicy, step: pd.Timedelta) -> None:
        self.settings, self.policy, self.step = settings, policy, step
        self.ledger = CostLedger()  # candidates' past requests (vpa.choose_by_cost), kept between runs
        self.lives = PodLives()  # how long each workload's pods live (updateMode Initial), kept between runs
        self.pod_life = parse_duration(settings.vpa.pod_life, what="serve.vpa.pod_life")
        self.pairs: dict[str, Change] = {}  # this run: VPA key -> the HPA change written with it
        self.cpu_hpas: dict[WorkloadKey, tuple[HpaView, int]] = {}
        window = settings.guardrails.peaks_window
        self.peaks_window = parse_duration(window, what="serve.guardrails.peaks_window") if window else None

    @property
    def enabled(self) -> bool:
        return True

    def need(self, step: pd.Timedelta) -> ForecastNeed:
        s = self.settings.vpa
        # a request kept for a pod's life (updateMode Initial, Off) covers vpa.pod_life ahead
        longest = max(parse_duration(s.safe_window), parse_duration(s.window), self.pod_life)
        return ForecastNeed(longest, (s.quantile, s.lower_quantile))

    def workloads(self, state: ClusterState) -> set[WorkloadKey]:
        """The workloads of the VPAs this recommender serves."""
        need: set[WorkloadKey] = set()
        for v in state.vpas:
            view = VpaView(v)
            key = view.workload_key() if self.settings.vpa.recommender_name in view.recommenders() else None
            if key is not None:
                need.add(key)
        return need

    def run(self, rep: RunReport, ctx: RunContext) -> str:
        self.pairs = {}
        # workload -> the first HPA scaling it on CPU utilisation and that metric's index: one pass a run
        self.cpu_hpas = {}
        for h in map(HpaView, ctx.state.hpas):
            wk, i = h.workload_key(), h.cpu_utilization_metric()
            if wk is not None and i is not None:
                self.cpu_hpas.setdefault(wk, (h, i))
        self._observe_pods(ctx)
        for vpa in ctx.state.vpas:
            key = f"VerticalPodAutoscaler/{meta(vpa).get('namespace')}/{meta(vpa).get('name')}"
            decide_one(key, rep, lambda: self._decide(VpaView(vpa), ctx), rep.vpa.append)
        return f"{len(rep.vpa)} VPA"

    def _observe_pods(self, ctx: RunContext) -> None:
        """Each served workload's pods this run, for how long its pods live (`logic/pod_life.py`)."""
        keys = self.workloads(ctx.state)
        for key in keys:
            started = [PodView(p).started for p in ctx.state.pods_of(*key)]
            self.lives.observe(key, dict(s for s in started if s is not None), ctx.now)
        self.lives.keep(keys)

    def _decide(self, vpa: VpaView, ctx: RunContext) -> VpaDecision | None:
        s = self.settings.vpa
        names = vpa.recommenders()
        if s.recommender_name not in names:
            log.debug("VPA %s/%s is served by %s, not %s", vpa.namespace, vpa.name, names or ["default"],
                      s.recommender_name)
            return None
        kind, target = vpa.target_ref()
        wl = ctx.state.workload(vpa.namespace, kind or "", target or "")
        if wl is None:
            raise LookupError(f"targetRef {kind}/{target} not found in namespace {vpa.namespace}")
        series = ctx.index.get((vpa.namespace, kind or "", target or ""))
        if series is None:
            raise LookupError(f"no history for {vpa.namespace}/{kind}/{target}")
        replicas = ctx.state.replicas(vpa.namespace, kind or "", target or "")
        pods = ctx.state.pods_of(vpa.namespace, kind or "", target or "")
        forecasts = ctx.forecasts if ctx.vpa_forecasts is None else ctx.vpa_forecasts
        budget, why = budget_for(vpa.budget_annotation(), s.violation_budget)
        life, life_why = self.lives.expected((vpa.namespace, kind or "", target or ""), self.pod_life, ctx.now)
        d = decide_vpa(VpaInputs(vpa, wl, replicas, series, forecasts, ctx.history, ctx.now, self.step,
                                 last_oom_kills(pods), self.ledger, budget, why, ctx.vpa_tidal, life, life_why), s)
        peaks = partial(self._peaks, series, replicas, ctx) if self.peaks_window is not None else None
        d = self.policy.limit(d, vpa, ctx.now, peaks)
        in_force, source = requests_in_force(wl, pods)
        for c in d.containers:
            for res, rec in c.resources.items():
                sid = series.by_container[c.container][res]
                rec.violation_rate = violation_rate(ctx.history.series[sid], replicas,
                                                    in_force.get((c.container, res)), res, ctx.now)
                rec.reason.steps.append(f"achieved violation rate over the last 24 h "
                                        f"{'unknown' if rec.violation_rate is None else f'{rec.violation_rate:.3f}'}"
                                        f" against {FROM[source]}")
        self._pair_hpa(d, vpa, ctx, in_force)
        return d

    def _peaks(self, series: WorkloadSeries, replicas: int, ctx: RunContext, container: str,
               res: str) -> tuple[int, int] | None:
        """The workload's own hourly peaks per pod over `guardrails.peaks_window`, which the change
        guardrail lets a target move within (None: the series unknown)."""
        y = ctx.history.series.get(series.by_container.get(container, {}).get(res, ""))
        if y is None or self.peaks_window is None:
            return None
        return pod_peaks_range(y, ctx.now, self.peaks_window, replicas, res)

    def _pair_hpa(self, d: VpaDecision, vpa: VpaView, ctx: RunContext, in_force: dict[tuple[str, str], int]) -> None:
        """Keeps the scale point of an HPA scaling the workload on CPU utilisation when the CPU
        request changes: its new target in `self.pairs`, or the CPU request held (issue 24 item 5)."""
        found = self.cpu_hpas.get((vpa.namespace, d.target_kind, d.target_name))
        cpu = {c.container: c.resources["cpu"] for c in d.containers if "cpu" in c.resources}
        if found is None or not cpu:
            return
        if all(rec.regime == OFF for rec in cpu.values()):
            for rec in cpu.values():  # nothing is applied, so the HPA's scale point does not move
                rec.reason.steps.append(f"HPA {found[0].name} scales on CPU utilisation: left as it is, since "
                                        f"updateMode Off applies no request")
            return
        hpa, index = found
        published = self.policy.published(vpa)
        before = {name: published.get((name, r), v) for (name, r), v in in_force.items() if r == "cpu"}
        new = {**before, **{name: rec.target for name, rec in cpu.items()}}
        if sum(new.values()) == sum(before.values()):
            return
        why_not = self.policy.why_not("HorizontalPodAutoscaler", hpa.obj)
        if why_not is not None:
            for rec in cpu.values():
                rec.reason.steps.append(f"HPA {hpa.name} scales on CPU utilisation but may not be written "
                                        f"({why_not}): its scale point moves with the request")
            return
        current = hpa.metrics()[index]["resource"]["target"]["averageUtilization"]
        plan = plan_scale_point(hpa.name, current, hpa.scale_anchor(), sum(before.values()), sum(new.values()),
                                self.settings.vpa.hpa_target_bounds)
        for name, rec in cpu.items():
            rec.reason.steps.append(plan.why)
            if plan.target_pct is None and name in before:
                rec.target = before[name]
                rec.lower, rec.upper = min(rec.lower, rec.target), max(rec.upper, rec.target)
        if plan.target_pct is not None and plan.target_pct != current:
            change, back = hpa_target_change(hpa.obj, index, plan.target_pct, plan.user_pct, plan.anchor, plan.why)
            change.undo = back
            self.pairs[d.key] = change

    def changes(self, rep: RunReport, state: ClusterState, now_iso: str, before: dict[str, Any]) -> list[Change]:
        vpas = {f"{meta(v).get('namespace', 'default')}/{meta(v)['name']}": v for v in state.vpas}
        changes: list[Change] = []
        for d in rep.vpa:
            vpa = vpas[f"{d.namespace}/{d.name}"]
            prev = self.policy.published(VpaView(vpa))
            new = vpa_targets(d)
            if self.policy.within_dead_band(new, prev):
                continue
            c = vpa_change(vpa, d, now_iso)
            if c is not None:
                before[c.key] = vpa
                c.companion = self.pairs.get(d.key)
                c.undo = vpa_undo(vpa) if c.companion is not None else None
                c.safe_direction = all(t >= (prev.get(k) or 0) for k, t in new.items())
                changes.append(c)
                if self.settings.vpa.write_resource_recommend:
                    changes.append(resource_recommend_change(vpa, d, self.settings.vpa.recommender_name, now_iso))
        return changes

    def written(self, rep: RunReport) -> None:
        pass

    def report(self, rep: RunReport) -> dict[str, Any]:
        return {"vpa": {d.key: d.reasons() for d in rep.vpa}}
