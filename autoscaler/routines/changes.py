"""From decisions to the changes a run writes, and writing them.

A VPA decision within the dead-band (`vpa.min_change`) of what is published is not worth a write;
a change equal to the one this loop last wrote is not written again; the cool-down holds an object
rewritten too soon (except in its safe direction); the kill switch holds everything.
"""
from __future__ import annotations

import logging
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pandas as pd

from autoscaler.logic.guardrails import Cooldown, read_kill_switch
from autoscaler.model.cluster import ClusterState, meta
from autoscaler.model.views import VpaView
from autoscaler.output.objects import (Change, cnr_change, hpa_change, node_change, resource_recommend_change,
                                       vpa_change)
from autoscaler.output.sinks import Sink, WriteResult
from autoscaler.routines.context import KILLED, RunReport, iso
from autoscaler.routines.drift import WriteMemory, vpa_targets
from autoscaler.routines.ihpa import ihpa_changes
from autoscaler.routines.spd import spd_changes
from autoscaler.settings import ServeSettings

log = logging.getLogger(__name__)


def _vpa_changes(rep: RunReport, state: ClusterState, memory: WriteMemory, settings: ServeSettings,
                 now_iso: str, before: dict[str, Any]) -> list[Change]:
    vpas = {f"{meta(v).get('namespace', 'default')}/{meta(v)['name']}": v for v in state.vpas}
    min_change = settings.vpa.min_change
    changes: list[Change] = []
    for d in rep.vpa:
        vpa = vpas[f"{d.namespace}/{d.name}"]
        prev = memory.vpa_written.get(d.key) or VpaView(vpa).published()
        new = vpa_targets(d)
        if prev and set(prev) == set(new) and all(abs(t - prev[k]) < min_change * prev[k] for k, t in new.items()):
            continue  # every target within the dead-band of the one published: not worth a write
        c = vpa_change(vpa, d, now_iso)
        if c is not None:
            before[c.key] = vpa
            c.safe_direction = all(t >= (prev.get(k) or 0) for k, t in new.items())
            changes.append(c)
            if settings.vpa.write_resource_recommend:
                changes.append(resource_recommend_change(vpa, d, settings.vpa.recommender_name, now_iso))
    return changes


def candidate_changes(rep: RunReport, state: ClusterState, memory: WriteMemory, settings: ServeSettings,
                      now_iso: str, before: dict[str, Any]) -> list[Change]:
    """Every change the run's decisions make to the objects as read; `before` gets change -> the
    live object it was made against."""
    changes = _vpa_changes(rep, state, memory, settings, now_iso, before)
    hpas = {f"{meta(h).get('namespace', 'default')}/{meta(h)['name']}": h for h in state.hpas}
    for h in rep.hpa:
        c = hpa_change(hpas[f"{h.namespace}/{h.name}"], h)
        if c is not None:
            before[c.key] = hpas[f"{h.namespace}/{h.name}"]
            changes.append(c)
    changes += ihpa_changes(rep, state, before) + spd_changes(rep, before)  # Katalyst IHPA status, SPDs
    nodes = {meta(n)["name"]: n for n in state.nodes}
    for p in rep.reclaim:
        if settings.reclaim.write_node_status:
            c = node_change(nodes[p.node], p, settings.reclaim, rep.node_forecasts.get(p.node))
            if c is not None:
                before[c.key] = nodes[p.node]
                changes.append(c)
        if settings.reclaim.write_cnr:
            changes.append(cnr_change(p, settings.reclaim, now_iso))
    return changes


def _subject(c: Change, state: ClusterState, before: dict[str, Any]) -> Any:
    """The object whose labels, namespace and annotations decide whether `c` may be written: the live
    object changed, or for a Katalyst CNR its Node and for a ResourceRecommend its VPA."""
    if c.kind == "CustomNodeResource":
        return before.get(f"Node/{c.name}") or next((n for n in state.nodes if meta(n).get("name") == c.name), None)
    if c.kind == "ResourceRecommend":
        return before.get(f"VerticalPodAutoscaler/{c.namespace}/{c.name}")
    return before.get(c.key) or c.obj


def not_selected(rep: RunReport, key: str, why: str, sink: Any = None) -> None:
    """One unselected write: in the report's `skipped`, the log and the file sink's decisions.json."""
    rep.skipped[key] = why
    log.info("%s: %s", key, why)
    reasons = getattr(sink, "reasons", None)
    if isinstance(reasons, dict):
        reasons[key] = {"skipped": why}


def apply_guardrails(rep: RunReport, state: ClusterState, now: pd.Timestamp, memory: WriteMemory,
                     cooldown: Cooldown, settings: ServeSettings, before: dict[str, Any], sink: Any = None) -> str:
    """Sets `rep.changes` to what may be written this run, `rep.held` to what a guardrail held;
    a change to an object outside `serve.select` is dropped and named in `rep.skipped`."""
    allowed = []
    for c in candidate_changes(rep, state, memory, settings, iso(now), before):
        why = settings.select.why_not(c.kind, _subject(c, state, before))
        if why is not None:
            not_selected(rep, c.key, why, sink)
            continue
        if memory.already_written(c):
            continue
        if cooldown.allows(c.key, now, c.safe_direction):
            allowed.append(c)
        else:
            rep.held[c.key] = f"cool-down {settings.guardrails.cooldown} since the last write"
    rep.changes = allowed
    switch = read_kill_switch(settings.guardrails.kill_switch_file)
    if switch.engaged:
        rep.outcome, rep.reason, rep.kill_deliberate = KILLED, switch.reason, switch.deliberate
        for c in allowed:
            rep.held[c.key] = "kill switch"
        (log.warning if switch.deliberate else log.error)("%s: %d changes not written", switch.reason, len(allowed))
    return f"{len(allowed)} changes, {len(rep.held)} held"


def write_all(sink: Sink, changes: list[Change], workers: int) -> list[WriteResult]:
    """Each change through the sink, a few at once when `workers` > 1; a sink that raises fails
    that one change, never the run."""
    def write(c: Change) -> WriteResult:
        try:
            return sink.write(c)
        except Exception as exc:  # noqa: BLE001 - sinks should not raise; one object never stops the run
            return WriteResult(c.key, "failed", f"{type(exc).__name__}: {exc}")

    if workers > 1 and len(changes) > 1:
        # writes are independent and I/O-bound (API round trips, files): a few in flight at once
        with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="tidewise-write") as pool:
            return list(pool.map(write, changes))
    return [write(c) for c in changes]
