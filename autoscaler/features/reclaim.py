"""Reclaimable node resources: each node's plan of what batch pods may borrow (`logic/decide_node.py`),
the node forecast the scheduler extender reads, and the Node status (and Katalyst CNR) written."""
from __future__ import annotations

import logging
from typing import Any

import pandas as pd

from autoscaler.features.base import DECIDE, ForecastNeed
from autoscaler.logic.decide_node import Demand, NodeInputs, decide_node, workload_pod_demand
from autoscaler.logic.decide_vpa import steps_in
from autoscaler.logic.node_forecast import node_forecast
from autoscaler.model.cluster import ClusterState, meta
from autoscaler.model.views import NodeView, PodView, WorkloadKey
from autoscaler.output.objects import Change, cnr_change, forecast_fresh, node_change, published
from autoscaler.output.sinks import DRY_RUN, WRITTEN
from autoscaler.routines.drift import WriteMemory
from autoscaler.routines.context import RunContext, RunReport, iso, parse_duration
from autoscaler.settings import ServeSettings
from contracts.reclaim import ReclaimPlan

log = logging.getLogger(__name__)


class ReclaimFeature:
    name, kinds, phase, write_rank, report_rank = "reclaim", (), DECIDE, 4, 2

    def __init__(self, settings: ServeSettings, memory: WriteMemory, step: pd.Timedelta) -> None:
        self.settings, self.memory, self.step = settings, memory, step

    @property
    def enabled(self) -> bool:
        return self.settings.reclaim.enabled

    def need(self, step: pd.Timedelta) -> ForecastNeed:
        s = self.settings.reclaim
        # the node forecast the scheduler extender reads (tidewise.io/node-forecast)
        horizon = parse_duration(s.forecast_horizon) if s.enabled and s.forecast_horizon else step
        return ForecastNeed(max(parse_duration(s.window), horizon), (s.quantile,), every_pod=s.enabled)

    def workloads(self, state: ClusterState) -> set[WorkloadKey]:
        return set()

    def run(self, rep: RunReport, ctx: RunContext) -> str:
        if self.enabled:
            self._nodes(rep, ctx)
        return f"{len(rep.reclaim)} nodes"

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

    def changes(self, rep: RunReport, state: ClusterState, now_iso: str, before: dict[str, Any]) -> list[Change]:
        s = self.settings.reclaim
        nodes = {meta(n)["name"]: n for n in state.nodes}
        changes = []
        for p in rep.reclaim:
            if s.write_node_status:
                c = node_change(nodes[p.node], p, s, rep.node_forecasts.get(p.node))
                if c is not None:
                    before[c.key] = nodes[p.node]
                    changes.append(c)
            if s.write_cnr:
                changes.append(cnr_change(p, s, now_iso))
        return changes

    def written(self, rep: RunReport) -> None:
        """What a node advertises now: the plan when it was written (or would have been, in a dry
        run) or already held that value; a write that failed or was held keeps the older value."""
        outcome = {r.key: r.outcome for r in rep.results}
        pending = {c.name for c in rep.changes if c.kind == "Node"} | \
            {k.split("/", 1)[1] for k in rep.held if k.startswith("Node/")}
        for p in rep.reclaim:
            if p.node not in pending or outcome.get(f"Node/{p.node}") in (WRITTEN, DRY_RUN):
                self.memory.reclaim_prev[p.node] = p

    def report(self, rep: RunReport) -> dict[str, Any]:
        return {"nodes": {p.node: {"reclaimed_millicpu": p.reclaimed_millicpu,
                                   "reclaimed_memory_bytes": p.reclaimed_memory_bytes, "reasons": p.reasons}
                          for p in rep.reclaim}}
