"""What may be written, decided in one place (issue 23): every feature's changes pass through it.

- change limit: a VPA target moves at most `guardrails.max_decrease_ratio` / `max_increase_ratio`
  from what is published, or as far as the workload's own hourly peaks of `guardrails.peaks_window`
  reach (applied to the decision, so its reason names the step);
- restart regime: a container resource whose change restarts a pod (`logic/regime.py`) changes its
  written target at most `vpa.max_changes_per_day` times in any 24 h (this policy remembers when each
  written target changed); in place it may change every run;
- dead band: a VPA decision whose every target is within `vpa.min_change` of the published one is
  not worth a write;
- selection: a change to an object outside `serve.select` is dropped and named in `skipped`;
- drift: a change equal to the one this loop last wrote is not written again, and an object changed
  outside Tidewise since that write is forgotten and decided again (`drift.py`'s memory);
- cool-down: an object rewritten less than `guardrails.cooldown` ago is held, except in its safe direction;
- kill switch: while it is engaged, everything is held (the run is KILLED; ACT features move nothing).

The writes an ACT feature makes itself (tide's node patches and pool status, every eviction) ask it
the two rules that apply to them: selection (`why_not`) and the kill switch (`stopped`).
"""
from __future__ import annotations

import logging
from typing import Any, Mapping

import pandas as pd

from autoscaler.logic.guardrails import Cooldown, limit_vpa_decision, read_kill_switch
from autoscaler.logic.regime import DAY, RESTART, restart_limit
from autoscaler.logic.vpa import PodPeaks
from autoscaler.model.cluster import ClusterState, meta
from autoscaler.model.decisions import VpaDecision
from autoscaler.model.views import VpaView
from autoscaler.output.objects import Change
from autoscaler.output.sinks import DRY_RUN, WRITTEN, Sink, WriteResult, note_reason
from autoscaler.routines.context import KILLED, RunReport, parse_duration
from autoscaler.routines.drift import WriteMemory, vpa_targets
from autoscaler.settings import ServeSettings

log = logging.getLogger(__name__)
Targets = Mapping[tuple[str, str], int]


def not_selected(rep: RunReport, key: str, why: str, sink: Sink | None = None) -> None:
    """One unselected write: in the report's `skipped`, the log and the file sink's decisions.json."""
    rep.skipped[key] = why
    log.info("%s: %s", key, why)
    note_reason(sink, key, {"skipped": why})


def _subject(c: Change, state: ClusterState, before: dict[str, Any]) -> Any:
    """The object whose labels, namespace and annotations decide whether `c` may be written: the live
    object changed, or for a Katalyst CNR its Node and for a ResourceRecommend its VPA."""
    if c.kind == "CustomNodeResource":
        return before.get(f"Node/{c.name}") or next((n for n in state.nodes if meta(n).get("name") == c.name), None)
    if c.kind == "ResourceRecommend":
        return before.get(f"VerticalPodAutoscaler/{c.namespace}/{c.name}")
    return before.get(c.key) or c.obj


class ChangePolicy:
    """The rules above and the memory they keep between runs (the writes, the cool-downs)."""

    def __init__(self, settings: ServeSettings, memory: WriteMemory | None = None) -> None:
        self.settings = settings
        self.memory = memory if memory is not None else WriteMemory()
        self.cooldown = Cooldown(parse_duration(settings.guardrails.cooldown, what="cooldown"))
        # (VPA key, container, resource) -> when its written target changed, over the last 24 h
        self.changed_at: dict[tuple[str, str, str], list[pd.Timestamp]] = {}

    # decisions ----------------------------------------------------------------------------------
    def published(self, vpa: VpaView) -> Targets:
        """The VPA's targets as published: what this loop last wrote (fresher than a read), else its status."""
        return self.memory.vpa_written.get(vpa.key) or vpa.published()

    def limit(self, decision: VpaDecision, vpa: VpaView, now: pd.Timestamp,
              peaks: PodPeaks | None = None) -> VpaDecision:
        """The change limit, from what is published (as far as `peaks`, the workload's own hourly
        peaks per pod of a container resource, reach), then the restart regime's changes a day."""
        g = self.settings.guardrails
        published = self.published(vpa)
        limit_vpa_decision(decision, published, vpa.obj, g.max_decrease_ratio, g.max_increase_ratio, peaks)
        for c in decision.containers:
            for res, rec in c.resources.items():
                if rec.regime != RESTART:
                    continue
                held, why = restart_limit(published.get((c.container, res)), rec.target,
                                          self.changed_at.get((vpa.key, c.container, res), ()), now,
                                          self.settings.vpa.max_changes_per_day,
                                          raise_after_oom=res == "memory" and rec.after_oom)
                if why:
                    rec.reason.steps.append(why)
                    rec.target, rec.lower, rec.upper = held, min(rec.lower, held), max(rec.upper, held)
        return decision

    def _note_changes(self, decision: VpaDecision, before: Targets, now: pd.Timestamp) -> None:
        """Each target of `decision` that differs from what was published is one change, at `now`."""
        for (container, res), target in vpa_targets(decision).items():
            prev = before.get((container, res))
            if prev is not None and prev != target:
                times = self.changed_at.setdefault((decision.key, container, res), [])
                times[:] = [t for t in times if now - t < DAY] + [now]

    def within_dead_band(self, new: Targets, prev: Targets) -> bool:
        """Every target within the dead band of the one published: not worth a write."""
        min_change = self.settings.vpa.min_change
        return bool(prev) and set(prev) == set(new) and \
            all(abs(t - prev[k]) < min_change * prev[k] for k, t in new.items())

    # changes ------------------------------------------------------------------------------------
    def why_not(self, kind: str, obj: Any) -> str | None:
        """Why `serve.select` leaves the object alone; None when it may be written."""
        return self.settings.select.why_not(kind, obj)

    @staticmethod
    def stopped(rep: RunReport) -> bool:
        """The kill switch stopped this run (read once, by `admit`): nothing is moved either."""
        return rep.outcome == KILLED

    def forget_changed_outside(self, state: ClusterState) -> dict[str, str]:
        return self.memory.forget_changed_outside(state, self.settings.reclaim)

    def admit(self, rep: RunReport, candidates: list[Change], state: ClusterState, now: pd.Timestamp,
              before: dict[str, Any], sink: Sink | None = None) -> str:
        """Sets `rep.changes` to what may be written this run, `rep.held` to what a rule held."""
        allowed = []
        for c in candidates:
            why = self.why_not(c.kind, _subject(c, state, before))
            if why is not None:
                not_selected(rep, c.key, why, sink)
                continue
            if self.memory.already_written(c):
                continue
            if self.cooldown.allows(c.key, now, c.safe_direction):
                allowed.append(c)
            else:
                rep.held[c.key] = f"cool-down {self.settings.guardrails.cooldown} since the last write"
        rep.changes = allowed
        switch = read_kill_switch(self.settings.guardrails.kill_switch_file)
        if switch.engaged:
            rep.outcome, rep.reason, rep.kill_deliberate = KILLED, switch.reason, switch.deliberate
            for c in allowed:
                rep.held[c.key] = "kill switch"
            (log.warning if switch.deliberate else log.error)("%s: %d changes not written", switch.reason, len(allowed))
        return f"{len(allowed)} changes, {len(rep.held)} held"

    def record(self, rep: RunReport, results: list[WriteResult], now: pd.Timestamp, before: dict[str, Any],
               lands: bool) -> None:
        """After the writes: each written (or dry-run) change starts its cool-down and is remembered as
        the next read should show it (`lands`: the sink's writes show in the cluster)."""
        vpa_by_key = {d.key: d for d in rep.vpa}
        for c, res in zip(rep.changes, results):
            if res.outcome in (WRITTEN, DRY_RUN):
                self.cooldown.record(c.key, now)
                if c.kind == "VerticalPodAutoscaler":
                    vpa = before.get(c.key)
                    self._note_changes(vpa_by_key[c.key], self.published(VpaView(vpa)) if vpa else {}, now)
                shown = c.obj if lands and res.outcome == WRITTEN else before.get(c.key)
                self.memory.remember(c, shown, vpa_by_key[c.key] if c.kind == "VerticalPodAutoscaler" else None,
                                     self.settings.reclaim)


__all__ = ["ChangePolicy", "not_selected", "vpa_targets"]
