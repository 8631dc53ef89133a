"""The recommend step: gather each object's typed inputs from the run, call its pure decision
(`autoscaler/logic/decide_*`), apply the change guardrail to VPA decisions, and record what it
decided. One object that cannot be decided is logged and skipped, never the run.
"""
from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Callable, Mapping

import pandas as pd

from autoscaler.logic.choice_by_cost import CostLedger
from autoscaler.logic.decide_hpa import HpaInputs, decide_hpa
from autoscaler.logic.decide_node import Demand, NodeInputs, decide_node, workload_pod_demand
from autoscaler.logic.decide_vpa import VpaInputs, decide_vpa, steps_in
from autoscaler.logic.guardrails import limit_vpa_decision
from autoscaler.logic.hpa import Stabilizer, parse_hpa
from autoscaler.logic.node_forecast import node_forecast
from autoscaler.output.objects import forecast_fresh
from autoscaler.model.cluster import meta
from autoscaler.model.decisions import HpaDecision, VpaDecision
from autoscaler.model.ihpa import KIND as IHPA_KIND, previewing
from autoscaler.model.views import HpaView, NodeView, PodView, VpaView, WorkloadKey, last_oom_kills, pod_template_requests
from autoscaler.output.objects import published
from autoscaler.routines.context import RunContext, RunReport, iso, parse_duration
from autoscaler.routines.drift import WriteMemory
from autoscaler.routines.ihpa import decide_ihpas
from autoscaler.settings import ServeSettings
from contracts.reclaim import ReclaimPlan
from predictor.types import Forecast

log = logging.getLogger(__name__)


@dataclass
class Recommender:
    """Decides every VPA, HPA and node of one run; holds what decisions keep between runs."""

    settings: ServeSettings
    memory: WriteMemory
    made: Mapping[str, Forecast]  # the forecast cache: series -> forecast as it was made
    stabilizers: dict[str, Stabilizer]
    step: pd.Timedelta  # the loop's forecast step
    ledger: CostLedger = field(default_factory=CostLedger)  # VPA candidates' requests (choose_by_cost)
    # what VPA / HPA decisions read (routines/decision_time.py); None: this run's day-ahead forecasts
    vpa_forecasts: Mapping[str, Forecast] | None = None
    hpa_forecasts: Mapping[str, Forecast] | None = None

    def run(self, rep: RunReport, ctx: RunContext) -> str:
        for vpa in ctx.state.vpas:
            key = f"VerticalPodAutoscaler/{meta(vpa).get('namespace')}/{meta(vpa).get('name')}"
            self._one(key, rep, lambda: self._vpa(VpaView(vpa), ctx), rep.vpa.append)
        ihpas = ctx.state.others.get(IHPA_KIND, [])
        for hpa in ctx.state.hpas:
            key = f"HorizontalPodAutoscaler/{meta(hpa).get('namespace')}/{meta(hpa).get('name')}"
            held = previewing(hpa, ihpas) if self.settings.ihpa.respect_preview else None
            if held:
                rep.skipped[key] = held
                continue
            self._one(key, rep, lambda: self._hpa(HpaView(hpa), ctx), rep.hpa.append)
        if self.settings.ihpa.enabled:
            decide_ihpas(self, rep, ctx)
        if self.settings.reclaim.enabled:
            self._nodes(rep, ctx)
        return f"{len(rep.vpa)} VPA, {len(rep.hpa)} HPA, {len(rep.ihpa)} IHPA, {len(rep.reclaim)} nodes"

    @staticmethod
    def _one(key: str, rep: RunReport, decide: Callable[[], object], keep: Callable[..., None]) -> None:
        try:
            d = decide()
            if d is not None:
                keep(d)
        except Exception as exc:  # noqa: BLE001 - one bad object is skipped
            rep.skipped[key] = f"{type(exc).__name__}: {exc}"
            log.warning("%s skipped: %s", key, exc)

    def _vpa(self, vpa: VpaView, ctx: RunContext) -> VpaDecision | None:
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
        ooms = last_oom_kills(ctx.state.pods_of(vpa.namespace, kind or "", target or ""))
        forecasts = ctx.forecasts if self.vpa_forecasts is None else self.vpa_forecasts
        d = decide_vpa(VpaInputs(vpa, wl, replicas, series, forecasts, ctx.history, ctx.now,
                                 self.step, ooms, self.ledger), s)
        g = self.settings.guardrails
        published_now = self.memory.vpa_written.get(vpa.key) or vpa.published()
        return limit_vpa_decision(d, published_now, vpa.obj, g.max_decrease_ratio, g.max_increase_ratio)

    def _hpa(self, hpa: HpaView, ctx: RunContext) -> HpaDecision:
        kind, target, _, _ = parse_hpa(hpa.obj)
        wl = ctx.state.workload(hpa.namespace, kind, target)
        if wl is None:
            raise LookupError(f"scaleTargetRef {kind}/{target} not found in namespace {hpa.namespace}")
        stab = self.stabilizers.setdefault(f"{hpa.namespace}/{hpa.name}",
                                           Stabilizer(parse_duration(self.settings.hpa.stabilization)))
        # decision-time forecasts are made at this origin: they serve as the forecast "as made" too
        forecasts, made = (ctx.forecasts, self.made) if self.hpa_forecasts is None else \
            (self.hpa_forecasts, self.hpa_forecasts)
        out = decide_hpa(HpaInputs(hpa, pod_template_requests(wl), ctx.index.get((hpa.namespace, kind, target)),
                                   forecasts, made, ctx.history, ctx.origin, ctx.now,
                                   self.step),
                         self.settings.hpa, stab)
        d = out.decision
        ctx.hpa_series[f"{d.namespace}/{d.name}"] = (out.target_kind, out.target_name, out.series, d.predicted,
                                                     d.min_replicas)
        return d

    def _nodes(self, rep: RunReport, ctx: RunContext) -> None:
        s = self.settings.reclaim
        state = ctx.state
        steps = steps_in(s.window, self.step)
        now_iso = iso(ctx.now)
        pods_on = state.pods_on()
        per_wl: dict[tuple[WorkloadKey, int], Demand | None] = {}
        horizon = steps_in(s.forecast_horizon, self.step) if s.forecast_horizon else 0  # the node forecast's

        def demand_of(pod: PodView, n: int = steps) -> Demand | None:
            wl = state.workload_of_pod(pod.obj)
            if not wl:
                return None
            if (wl, n) not in per_wl:
                per_wl[wl, n] = workload_pod_demand(ctx.index.get(wl), ctx.forecasts, s.quantile, n,
                                                    state.replicas(*wl))
            return per_wl[wl, n]

        for node in state.nodes:
            view = NodeView(node)
            name = view.name
            try:
                prev = self.memory.reclaim_prev.get(name)
                if prev is None:
                    pc, pm = published(node, s)
                    if pc is not None and pm is not None:
                        prev = ReclaimPlan(name, now_iso, 0, pc, pm)
                pods = [PodView(p) for p in pods_on.get(name, [])]
                rep.reclaim.append(decide_node(NodeInputs(view, pods, demand_of, prev, now_iso,
                                                          int(parse_duration(s.window).total_seconds()), steps), s))
                # built only when due: a node whose annotation is fresh keeps it (its plan, if rewritten, goes alone)
                if horizon and not forecast_fresh(node, name, ctx.now.to_pydatetime(), s.forecast_refresh):
                    rep.node_forecasts[name] = node_forecast(
                        view, pods, lambda p: demand_of(p, horizon), s, ctx.origin.to_pydatetime(),
                        int(self.step.total_seconds()), horizon, ctx.now.to_pydatetime())
            except Exception as exc:  # noqa: BLE001
                rep.skipped[f"Node/{name}"] = f"{type(exc).__name__}: {exc}"
                log.warning("node %s skipped: %s", name, exc)
