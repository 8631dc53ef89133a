"""The rebalance step of the serving loop (`serve --rebalance`, `tidewise rebalance`): from this
run's forecasts and cluster snapshot, the pods to move off nodes whose forecast peak will be hot
(`autoscaler/logic/rebalance.py` decides), then each move through the one `Evictor` (dry-run
unless `--apply`; rate-limited; the API server enforces disruption budgets).

The step never freezes the run: a failure here is recorded in `skipped["rebalance"]` and the other
decisions are still written. It moves nothing when the kill switch stopped the run.
"""
from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any, Mapping

import numpy as np
import pandas as pd

from autoscaler.logic.decide_node import workload_pod_demand
from autoscaler.logic.decide_vpa import steps_in
from autoscaler.logic.rebalance import Candidate, NodeLoad, RebalancePlan, plan_rebalance
from autoscaler.model.cluster import ClusterState, Obj, meta
from autoscaler.model.views import NodeView, PdbView, PodView, WorkloadSeries
from autoscaler.output.eviction import Evictor, Move, Outcome, movable
from autoscaler.output.sinks import Sink, note_reason
from autoscaler.routines.change_policy import ChangePolicy, not_selected
from autoscaler.routines.context import RunContext, RunReport
from autoscaler.settings import RebalanceSettings
from contracts.qos import QOS_ANNOTATION
from contracts.selector import has_labels
from predictor.history import History

log = logging.getLogger(__name__)

PDB_KIND = "PodDisruptionBudget"


@dataclass
class RebalanceResult:
    """What one run planned and what became of each move (in plan order)."""

    plan: RebalancePlan
    outcomes: list[Outcome] = field(default_factory=list)
    note: str = ""

    def as_dict(self) -> dict[str, Any]:
        return {"hot": self.plan.hot, "moves": [o.as_dict() | {"destination": m.destination}
                                                for o, m in zip(self.outcomes, self.plan.moves)],
                "kept": self.plan.kept, "note": self.note}


def _selects(selector: Any, labels: Mapping[str, str]) -> bool | None:
    """Whether a label selector picks these labels; None when it has expressions we do not judge."""
    if not isinstance(selector, dict) or selector.get("matchExpressions"):
        return None
    want = selector.get("matchLabels") or {}
    return bool(want) and has_labels(want, labels)


def budgets_of(state: ClusterState) -> tuple[dict[str, int], list[tuple[str, str, Any]]]:
    """Disruption budgets: "ns/name" -> disruptions still allowed (status.disruptionsAllowed; a
    budget without status counts as allowing none: its controller has not judged it yet), and
    (namespace, "ns/name", selector) for matching pods."""
    allowed: dict[str, int] = {}
    selectors = []
    for pdb in state.others.get(PDB_KIND, []):
        m = meta(pdb)
        key = f"{m.get('namespace')}/{m.get('name')}"
        view = PdbView(pdb)
        allowed[key] = view.disruptions_allowed()
        selectors.append((str(m.get("namespace")), key, view.selector()))
    return allowed, selectors


def _budget(pod: Obj, allowed: Mapping[str, int], selectors: list[tuple[str, str, Any]]) -> str | None:
    """The tightest budget that covers the pod (a selector we cannot judge is left to the server)."""
    m = meta(pod)
    hits = [key for ns, key, sel in selectors
            if ns == m.get("namespace") and _selects(sel, m.get("labels") or {})]
    return min(hits, key=lambda k: (allowed.get(k, 0), k)) if hits else None


def current_pod_usage(series: WorkloadSeries | None, history: History, replicas: int) -> tuple[float, float]:
    """(cores, bytes): one pod's share of its workload's last observed usage (0 where unseen)."""
    total = {"cpu": 0.0, "memory": 0.0}
    for res_map in (series.by_container.values() if series is not None else ()):
        for res, sid in res_map.items():
            y = history.series.get(sid)
            last = float(y.iloc[-1]) if y is not None and len(y) else float("nan")
            if res in total and np.isfinite(last):
                total[res] += last
    return total["cpu"] / max(1, replicas), total["memory"] / max(1, replicas)


def _owner(pod: Obj, state: ClusterState) -> str:
    wl = state.workload_of_pod(pod)
    if wl:
        return f"{wl[0]}/{wl[1]}/{wl[2]}"
    refs = [o for o in meta(pod).get("ownerReferences") or [] if isinstance(o, dict) and o.get("controller")]
    return f"{meta(pod).get('namespace')}/{refs[0].get('kind')}/{refs[0].get('name')}" if refs else ""


def node_loads(ctx: RunContext, settings: RebalanceSettings, steps: int, rep: RunReport) -> list[NodeLoad]:
    """Every readable node with its pods' forecast usage; a node without allocatable is skipped."""
    state = ctx.state
    allowed, selectors = budgets_of(state)
    pods_on = state.pods_on()
    out = []
    for node in state.nodes:
        view = NodeView(node)
        try:
            cpu_m, mem = view.allocatable()
        except ValueError as exc:
            rep.skipped[f"Node/{view.name} (rebalance)"] = str(exc)
            continue
        pods = [_candidate(p, ctx, settings, steps, allowed, selectors) for p in pods_on.get(view.name, [])]
        out.append(NodeLoad(view.name, cpu_m / 1000.0, float(mem), pods, view.accepts_pods()))
    return out


def _candidate(pod: Obj, ctx: RunContext, s: RebalanceSettings, steps: int, allowed: Mapping[str, int],
               selectors: list[tuple[str, str, Any]]) -> Candidate:
    state = ctx.state
    view = PodView(pod)
    wl = state.workload_of_pod(pod)
    demand = workload_pod_demand(ctx.index.get(wl), ctx.forecasts, s.quantile, steps, state.replicas(*wl)) \
        if wl else None
    note = ""
    if demand is None:
        r_cpu, r_mem = view.requests()
        demand = (np.full(steps, r_cpu / 1000.0), np.full(steps, float(r_mem)))
        note = "no forecast: counted at its requests"
    elif s.with_current and wl:
        now_cpu, now_mem = current_pod_usage(ctx.index.get(wl), ctx.history, state.replicas(*wl))
        if now_cpu > demand[0][0] or now_mem > demand[1][0]:
            note = "its last observed usage is above the forecast's first step, which it replaces"
        demand[0][0] = max(demand[0][0], now_cpu)
        demand[1][0] = max(demand[1][0], now_mem)
    return Candidate(view.namespace, view.name, _owner(pod, state), view.qos(QOS_ANNOTATION), demand[0], demand[1],
                     movable(pod, s.evict_local_storage), _budget(pod, allowed, selectors), note)


class Rebalancer:
    """The step; keeps the Evictor (its per-minute window spans runs)."""

    def __init__(self, settings: RebalanceSettings, step: pd.Timedelta, evictor: Evictor | None = None,
                 sink: Sink | None = None, policy: ChangePolicy | None = None):
        self.settings = settings
        self.policy = policy  # serve.select (pods move only off selected nodes) and the kill switch; None: neither
        self.step = step
        # no evictor given: a dry-run one (sends nothing, so it needs no cluster)
        self.evictor = evictor if evictor is not None else Evictor(None, dry_run=True, per_minute=settings.per_minute)
        self.sink = sink  # a sink keeping `reasons` (the file sink) also lists the moves in decisions.json

    def run(self, rep: RunReport, ctx: RunContext) -> tuple[str, RebalanceResult | None]:
        """The step's detail, and what it planned and did (None when the plan failed)."""
        if ChangePolicy.stopped(rep):
            return "kill switch: nothing moved", RebalanceResult(RebalancePlan(), note="kill switch: nothing moved")
        try:
            steps = steps_in(self.settings.horizon, self.step)
            plan = plan_rebalance(node_loads(ctx, self.settings, steps, rep), self.settings, steps,
                                  budgets_of(ctx.state)[0])
        except Exception as exc:  # noqa: BLE001 - a rebalance bug must not stop the run's other writes
            log.exception("rebalance not planned")
            rep.skipped["rebalance"] = f"{type(exc).__name__}: {exc}"
            return f"not planned: {exc}", None
        self._selected_only(plan, rep, ctx)
        result = RebalanceResult(plan)
        for m in plan.moves:
            out = self.evictor.evict(Move(m.namespace, m.pod, m.node, m.reason))
            result.outcomes.append(out)
            log.info("rebalance %s/%s off %s: %s (%s)", m.namespace, m.pod, m.node, out.result, m.reason)
        for o, m in zip(result.outcomes, plan.moves):
            note_reason(self.sink, f"Eviction/{m.namespace}/{m.pod}", o.as_dict() | {"destination": m.destination})
        done: dict[str, int] = {}
        for o in result.outcomes:
            done[o.result] = done.get(o.result, 0) + 1
        return f"{len(plan.hot)} hot nodes, {len(plan.moves)} moves " \
               f"({', '.join(f'{k} {v}' for k, v in sorted(done.items())) or 'none'}), {len(plan.kept)} pods kept", \
            result

    def _selected_only(self, plan: RebalancePlan, rep: RunReport, ctx: RunContext) -> None:
        """Drops the moves off nodes outside serve.select.node; each is named in `rep.skipped`."""
        if self.policy is None:
            return
        nodes = {meta(n).get("name"): n for n in ctx.state.nodes}
        keep = []
        for m in plan.moves:
            why = self.policy.why_not("Node", nodes.get(m.node))
            if why is None:
                keep.append(m)
            else:
                not_selected(rep, f"Eviction/{m.namespace}/{m.pod}", f"node {m.node} {why}", self.sink)
        plan.moves = keep
