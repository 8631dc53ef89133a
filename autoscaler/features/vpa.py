"""VPA recommendations: each VPA naming this recommender decided (`logic/decide_vpa.py`), limited
by the change policy, and its status written (and, opted in, a Katalyst ResourceRecommend)."""
from __future__ import annotations

import logging
from typing import Any

import pandas as pd

from autoscaler.features.base import DECIDE, ForecastNeed
from autoscaler.logic.choice_by_cost import CostLedger
from autoscaler.logic.decide_vpa import VpaInputs, decide_vpa
from autoscaler.model.cluster import ClusterState, meta
from autoscaler.model.decisions import VpaDecision
from autoscaler.model.views import VpaView, WorkloadKey, last_oom_kills
from autoscaler.output.objects import Change, resource_recommend_change, vpa_change
from autoscaler.routines.change_policy import ChangePolicy
from autoscaler.routines.context import RunContext, RunReport, decide_one, parse_duration
from autoscaler.routines.drift import vpa_targets
from autoscaler.settings import ServeSettings

log = logging.getLogger(__name__)


class VpaFeature:
    name, kinds, phase, write_rank, report_rank = "vpa", (), DECIDE, 0, 0

    def __init__(self, settings: ServeSettings, policy: ChangePolicy, step: pd.Timedelta) -> None:
        self.settings, self.policy, self.step = settings, policy, step
        self.ledger = CostLedger()  # candidates' past requests (vpa.choose_by_cost), kept between runs

    @property
    def enabled(self) -> bool:
        return True

    def need(self, step: pd.Timedelta) -> ForecastNeed:
        s = self.settings.vpa
        longest = max(parse_duration(s.safe_window), parse_duration(s.window))
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
        for vpa in ctx.state.vpas:
            key = f"VerticalPodAutoscaler/{meta(vpa).get('namespace')}/{meta(vpa).get('name')}"
            decide_one(key, rep, lambda: self._decide(VpaView(vpa), ctx), rep.vpa.append)
        return f"{len(rep.vpa)} VPA"

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
        ooms = last_oom_kills(ctx.state.pods_of(vpa.namespace, kind or "", target or ""))
        forecasts = ctx.forecasts if ctx.vpa_forecasts is None else ctx.vpa_forecasts
        d = decide_vpa(VpaInputs(vpa, wl, replicas, series, forecasts, ctx.history, ctx.now,
                                 self.step, ooms, self.ledger), s)
        return self.policy.limit(d, vpa)

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
                c.safe_direction = all(t >= (prev.get(k) or 0) for k, t in new.items())
                changes.append(c)
                if self.settings.vpa.write_resource_recommend:
                    changes.append(resource_recommend_change(vpa, d, self.settings.vpa.recommender_name, now_iso))
        return changes

    def written(self, rep: RunReport) -> None:
        pass

    def report(self, rep: RunReport) -> dict[str, Any]:
        return {"vpa": {d.key: d.reasons() for d in rep.vpa}}
