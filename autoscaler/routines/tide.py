"""The tide step of the serving loop (issue 17): for each Katalyst `TideNodePool`, lend tide nodes
to batch while the forecast leaves them idle and hand them back a lead time before it needs them.

Per pool: split the nodes (reserved online / reserved offline / tide), forecast the online demand
(`tide_demand.py`), turn it into nodes per step with the calibrated or fixed margin (`tide_margin.py`:
each move's reason names it) and plan the moves (`logic/tide.py`), then write:
the Node's labels and taints first (so that evicted pods are not scheduled back), then the
evictions through the one `Evictor` (PodDisruptionBudgets honoured by the API server) — batch pods
off nodes handed back first, online pods off lent nodes after — and the pool's status. A drain
the rate limit cut short goes on in the next runs while the node is within min_dwell of its move.

Writes happen only with `--apply` (settings.loop.apply) and an API sink; otherwise every patch
and eviction is reported as `dry-run`. One bad pool is skipped with its reason; a pool whose
online demand cannot be forecast (no or short forecast) moves nothing (fail closed).
"""
from __future__ import annotations

import logging
from typing import Any

import numpy as np
import pandas as pd

from autoscaler.logic.tide import LEND, NodeMove, TideNode, plan_pool, split_pool
from autoscaler.model.cluster import Obj, meta
from autoscaler.model.tide_pool import TidePool, node_patch
from autoscaler.model.views import NodeView, PodView
from autoscaler.output.eviction import Evictor, Move, movable
from autoscaler.output.sinks import DRY_RUN, FAILED, WRITTEN, Sink, WriteResult, note_reason
from autoscaler.routines.change_policy import ChangePolicy, not_selected
from autoscaler.routines.context import RunContext, RunReport, iso, parse_duration
from autoscaler.routines.tide_demand import NoForecast, pool_online_demand
from autoscaler.routines.tide_margin import TideMargins
from autoscaler.settings import ServeSettings
from contracts.kube_errors import KubeError
from contracts.qos import QOS_ANNOTATION, QosLevel

log = logging.getLogger(__name__)
# pods every node runs: they stay on a lent node and do not stop it being lent
EVERY_NODE = ("DaemonSet pod", "system pod", "static pod", "already finished")


def _moved_at(node: Obj, annotation: str) -> float | None:
    text = ((node.get("metadata") or {}).get("annotations") or {}).get(annotation)
    try:
        return pd.Timestamp(text).timestamp() if text else None
    except ValueError:
        return None  # unreadable: treated as never moved (the dwell is a brake, not a safety)


class TideStep:
    """One instance per serving loop (its Evictor's rate limit spans runs)."""

    def __init__(self, settings: ServeSettings, sink: Sink | None, evictor: Evictor | None = None,
                 policy: ChangePolicy | None = None) -> None:
        self.settings = settings
        self.policy = policy if policy is not None else ChangePolicy(settings)  # selection, kill switch
        # writes need both --apply and a sink that talks to the API (ApiSink carries the Kube wrapper)
        self.kube = getattr(sink, "kube", None) if settings.loop.apply else None
        self.sink = sink
        self.margins = TideMargins()  # each pool's forecast errors, in memory (the calibrated margin)
        # serve's one Evictor when it made one (shared with rebalancing: one rate limit for all moves)
        self.evictor = evictor if evictor is not None else \
            Evictor(self.kube, dry_run=self.kube is None, per_minute=settings.tide.evictions_per_minute)

    def __call__(self, rep: RunReport, ctx: RunContext, entries: list[dict[str, Any]]) -> str:
        """Every pool's plan, moves and writes; each pool's entry (the report's) appended to `entries`."""
        if not self.settings.tide.enabled:
            return "off"
        if self.policy.stopped(rep):
            return "kill switch: nothing moved"
        pools = ctx.state.others.get("TideNodePool")
        if pools is None:
            return "TideNodePool objects were not read"
        moves = 0
        claimed: set[str] = set()  # a node two pools select belongs to the first by name, never to both
        for obj in sorted(pools, key=lambda o: str(meta(o).get("name"))):
            key = f"TideNodePool/{meta(obj).get('name')}"
            why = self.policy.why_not("TideNodePool", obj)
            if why is not None:  # neither its nodes relabelled or drained nor its status written
                not_selected(rep, key, why, self.sink)
                continue
            try:
                entry = self._pool(TidePool.from_object(obj), rep, ctx, claimed)
            except (ValueError, NoForecast) as exc:
                rep.skipped[key] = str(exc)
                log.warning("%s: no move (%s)", key, exc)
                continue
            except Exception as exc:  # noqa: BLE001 - one pool's bug must not stop the others or the run
                rep.skipped[key] = f"{type(exc).__name__}: {exc}"
                log.exception("%s skipped", key)
                continue
            entries.append(entry)
            moves += len(entry["moves"])
            note_reason(self.sink, key, entry)
        return f"{len(pools)} pool(s), {moves} node move(s){'' if self.kube else ' (dry-run)'}"

    # one pool -----------------------------------------------------------------------------------
    def _pool(self, pool: TidePool, rep: RunReport, ctx: RunContext, claimed: set[str]) -> dict[str, Any]:
        t, step = self.settings.tide, parse_duration(self.settings.loop.step)
        selected = {NodeView(n).name: n for n in ctx.state.nodes if pool.selects(n)}
        nodes = {k: v for k, v in selected.items() if k not in claimed}
        claimed.update(nodes)
        split = split_pool(list(nodes), pool.reserve_online, pool.reserve_offline, pool.previous)
        lead, dwell = parse_duration(t.lead), parse_duration(t.min_dwell)
        lead_steps, dwell_steps = int(np.ceil(lead / step)), int(np.ceil(dwell / step))
        pods_on = ctx.state.pods_on()
        online_pods = [p for n in nodes for p in pods_on.get(n, []) if not _batch(p)]
        args = (online_pods, ctx.state, ctx.index, ctx.forecasts, rep.vpa, self.settings, lead_steps + dwell_steps + 1)
        demand, measured, notes = pool_online_demand(*args, t.quantile)
        median = pool_online_demand(*args, 0.5)[0] if t.margin == "calibrated" else None
        serving = split.online + split.tide
        if not serving:
            raise ValueError("no reserved-online or tide node in the pool")
        capacity = np.min([NodeView(nodes[n]).allocatable() for n in serving], axis=0)
        now = ctx.now.timestamp()
        need = self.margins.need(pool.name, now, ctx.origin.timestamp(), step.total_seconds(), demand, median,
                                 measured, capacity, t)
        needed = need.needed
        tide_nodes = [self._tide_node(nodes[n], pool, pods_on.get(n, [])) for n in split.tide]
        plan = plan_pool(tide_nodes, needed - len(split.online), lead_steps=lead_steps, dwell_steps=dwell_steps,
                         max_moves=t.max_moves, now=now, min_dwell_seconds=dwell.total_seconds(),
                         return_slack=need.return_slack,
                         needed_now=None if need.needed_now is None else need.needed_now - len(split.online),
                         hold_after_return=parse_duration(t.hold_after_return).total_seconds())
        plan.moves = [NodeMove(m.node, m.action, f"{m.reason}; {need.margin}") for m in plan.moves]
        entry: dict[str, Any] = {"pool": pool.name, "summary": plan.summary, "margin": need.margin,
                                 "needed_nodes": needed.tolist(),
                                 "reserved_online": split.online, "reserved_offline": split.offline,
                                 "tide": split.tide, "moves": [m.__dict__ for m in plan.moves], "held": plan.held,
                                 "demand": notes[:20], "patches": [], "evictions": [],
                                 "other_pools_nodes": sorted(set(selected) - set(nodes))}
        moving = {m.node: m for m in plan.moves}
        self._label(pool, nodes, split, moving, entry, rep, ctx)
        self._drain(pool, moving, tide_nodes, pods_on, now, dwell.total_seconds(), entry)
        self._status(pool, split, entry, rep)
        log.info("TideNodePool/%s: %s", pool.name, plan.summary)
        return entry

    def _tide_node(self, node: Obj, pool: TidePool, pods: list[Obj]) -> TideNode:
        online = [p for p in pods if not _batch(p)]
        why = {PodView(p).label: movable(p, self.settings.tide.evict_local_storage) for p in online}
        blocked = [f"{k}: {v}" for k, v in why.items() if v is not None and v not in EVERY_NODE]
        return TideNode(NodeView(node).name, pool.is_lent(node),
                        online_pods=sum(1 for v in why.values() if v is None),
                        batch_pods=sum(1 for p in pods if _batch(p)),
                        moved_at=_moved_at(node, self.settings.tide.moved_annotation),
                        blocked=f"online pod {blocked[0]}" if blocked else None)

    def _label(self, pool: TidePool, nodes: dict[str, Obj], split: Any, moving: dict[str, NodeMove],
               entry: dict[str, Any], rep: RunReport, ctx: RunContext) -> None:
        """Every pool node labelled for its role; tide nodes moving swap side (labels and taints)."""
        roles = {**{n: "online" for n in split.online}, **{n: "offline" for n in split.offline},
                 **{n: "tide" for n in split.tide}}
        for name, role in sorted(roles.items()):
            move = moving.get(name)
            lent = pool.is_lent(nodes[name]) if move is None else move.action == LEND
            stamp = {self.settings.tide.moved_annotation: iso(ctx.now)} if move else None
            # against the snapshot, with its resourceVersion: taints changed since conflict (409) and the
            # move waits for the next run, instead of a concurrent taint being overwritten
            patch = node_patch(nodes[name], pool, role, lent, stamp)
            if patch is None:
                continue
            reason = move.reason if move else f"{role} node of the pool: labels and taints for its side"
            if self.kube is None:
                self._result(rep, entry, f"Node/{name}#tide", DRY_RUN, reason, move, patch)
                continue
            try:
                self.kube.patch_node(name, patch)
                self._result(rep, entry, f"Node/{name}#tide", WRITTEN, reason, move, patch)
            except KubeError as exc:
                self._result(rep, entry, f"Node/{name}#tide", FAILED, str(exc), move, patch)

    @staticmethod
    def _result(rep: RunReport, entry: dict[str, Any], key: str, outcome: str, detail: str,
                move: NodeMove | None, patch: Obj | None = None) -> None:
        rep.results.append(WriteResult(key, outcome, detail))
        entry["patches"].append({"node": key.split("/", 1)[1].split("#")[0], "outcome": outcome, "detail": detail,
                                 "patch": patch})
        if move is not None and outcome not in (WRITTEN, DRY_RUN):
            entry.setdefault("failed_moves", []).append(move.node)  # its drain waits for the next run

    def _drain(self, pool: TidePool, moving: dict[str, NodeMove], tide_nodes: list[TideNode],
               pods_on: dict[str, list[Obj]], now: float, dwell_s: float, entry: dict[str, Any]) -> None:
        """Evictions: batch pods off nodes going (or recently gone) back online first, then online
        pods off nodes lent now or within min_dwell. A node whose patch failed is not drained."""
        failed = set(entry.get("failed_moves", []))
        returning: list[str] = []
        lending: list[str] = []
        for n in tide_nodes:
            move = moving.get(n.name)
            lent = n.lent if move is None else move.action == LEND
            recent = move is not None or (n.moved_at is not None and now - n.moved_at < dwell_s)
            if n.name in failed or not recent:
                continue
            (lending if lent else returning).append(n.name)
        for name in returning:
            for p in pods_on.get(name, []):
                if _batch(p) and movable(p, self.settings.tide.evict_local_storage) is None:
                    self._evict(p, name, f"tide node handed back to online service (pool {pool.name})", entry)
        for name in lending:
            for p in pods_on.get(name, []):
                if not _batch(p) and movable(p, self.settings.tide.evict_local_storage) is None:
                    self._evict(p, name, f"tide node lent to batch (pool {pool.name}): online pods leave", entry)

    def _evict(self, pod: Obj, node: str, reason: str, entry: dict[str, Any]) -> None:
        m = meta(pod)
        out = self.evictor.evict(Move(str(m.get("namespace", "default")), str(m.get("name")), node, reason))
        entry["evictions"].append(out.as_dict())

    def _status(self, pool: TidePool, split: Any, entry: dict[str, Any], rep: RunReport) -> None:
        status = pool.wanted_status(split)
        if status is None:
            return
        key = f"TideNodePool/{pool.name}"
        entry["status"] = status
        if self.kube is None:
            rep.results.append(WriteResult(key, DRY_RUN, "status"))
            return
        try:
            self.kube.patch_tide_pool_status(pool.name, {"status": status})
            rep.results.append(WriteResult(key, WRITTEN, "status"))
        except KubeError as exc:
            rep.results.append(WriteResult(key, FAILED, str(exc)))


def _batch(pod: Obj) -> bool:
    return PodView(pod).qos(QOS_ANNOTATION) == QosLevel.RECLAIMED.value
