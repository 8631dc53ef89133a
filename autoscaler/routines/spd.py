"""ServiceProfileDescriptors in the serving loop: for every workload that opts in
(`spd.katalyst.kubewharf.io/enable: "true"`), the SPD Tidewise wants (`logic/spd.py`), compared with
the one the cluster holds, and a change only where Tidewise's parts differ.

Missing: created (then its status written). Different (a new day's profile, or a hand edit of
Tidewise's parts): merge-patched, spec and status apart, leaving every other part as it is. Equal:
nothing. An SPD of the workload's name that targets another workload is not Tidewise's to take.
The profile of a workload is built once per period (a day by default) and kept.
"""
from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any

import pandas as pd

from autoscaler.settings import SpdSettings
from autoscaler.logic.spd import ProfileInputs, desired_spd, opted_in, period_start
from autoscaler.model.cluster import ClusterState, Obj, meta
from autoscaler.model.spd import SpdView
from autoscaler.model.views import WorkloadKey
from autoscaler.output.objects import Change
from autoscaler.routines.context import RunContext, RunReport, parse_duration
from predictor.durations import DAY

log = logging.getLogger(__name__)
KIND = "ServiceProfileDescriptor"


def existing_spd(state: ClusterState, key: WorkloadKey) -> Obj | None:
    """The SPD the cluster holds for the workload: the one whose targetRef names it, else the one
    of its name (whose targetRef the caller checks)."""
    ns, kind, name = key
    spds = [o for o in state.others.get(KIND, []) if meta(o).get("namespace", "default") == ns]
    return next((o for o in spds if SpdView(o).targets(ns, kind, name)), None) or \
        next((o for o in spds if meta(o).get("name") == name), None)


@dataclass
class SpdProfiles:
    """Decides the SPDs of one run; keeps each workload's desired SPD for the period it describes."""

    cache: dict[tuple[WorkloadKey, pd.Timestamp, tuple[str, ...]], Obj] = field(default_factory=dict)

    def run(self, rep: RunReport, ctx: RunContext, s: SpdSettings, history_window: str) -> list[tuple[Obj, Obj | None]]:
        """(desired SPD, the cluster's or None) per opted-in workload; the others' reasons in `rep.skipped`."""
        wanted: list[tuple[Obj, Obj | None]] = []
        start = period_start(ctx.now, s.period)
        period = DAY if s.period == "day" else 7 * DAY
        # the window every run of the period has: [start - lookback, start) is read all period long
        lookback = pd.Timedelta(days=int((parse_duration(history_window) - period) / DAY))
        self.cache = {k: v for k, v in self.cache.items() if k[1] == start}
        for key, wl in ctx.state.workloads.items():
            if not opted_in(wl, s.annotation):
                continue
            label = f"{KIND}/{key[0]}/{key[2]}"
            try:
                desired = self._desired(key, wl, ctx, s, start, lookback)
            except LookupError as exc:  # no history, or not enough: no profile to publish yet
                rep.skipped[label] = str(exc)
                continue
            have = existing_spd(ctx.state, key)
            if have is not None and not SpdView(have).targets(*key):
                rep.skipped[label] = (f"the SPD {key[0]}/{meta(have).get('name')} targets "
                                      f"{SpdView(have).target_ref()}, not {key[1]}/{key[2]}: left alone")
                continue
            wanted.append((desired, have))
        return wanted

    def _desired(self, key: WorkloadKey, wl: Obj, ctx: RunContext, s: SpdSettings, start: pd.Timestamp,
                 lookback: pd.Timedelta) -> Obj:
        series = ctx.index.get(key)
        if series is None or not series.by_container:
            raise LookupError(f"no history for {key[0]}/{key[1]}/{key[2]}")
        ids = tuple(sorted(sid for c in series.by_container.values() for sid in c.values()))
        cached = self.cache.get((key, start, ids))
        if cached is None:
            containers = {c: {r: ctx.history.series[sid] for r, sid in res.items() if r in ("cpu", "memory")}
                          for c, res in series.by_container.items()}
            inp = ProfileInputs(key[0], key[1], key[2], str(wl.get("apiVersion") or "apps/v1"), containers, start,
                                lookback, ctx.history.step)
            cached = self.cache[(key, start, ids)] = desired_spd(inp, s)
        return cached


def spd_change(desired: Obj, existing: Obj | None) -> Change | None:
    """Create when missing; else merge patches of Tidewise's parts where they differ; None when equal."""
    m = meta(desired)
    ns, name = m["namespace"], m["name"]
    want = SpdView(desired)
    reasons = {"profile": want.extended_indicators()[0]["indicators"]}
    if existing is None:
        return Change(KIND, desired["apiVersion"], ns, name, desired,
                      {"metadata": dict(m), "spec": want.spec, "status": want.status},
                      subresource="status", create=True, reasons=reasons)
    have = SpdView(existing)
    new = SpdView(have.merged(want))
    was, now = have.owned_part(), new.owned_part()
    if was == now:
        return None
    patch: dict[str, Any] = {}
    if was[:2] != now[:2]:
        patch["spec"] = {"targetRef": new.target_ref(), "extendedIndicator": new.extended_indicators()}
        rv = meta(existing).get("resourceVersion")
        if rv:
            # the list is replaced whole: a concurrent edit of another indicator is a 409, not lost
            patch["metadata"] = {"resourceVersion": rv}
    if was[2] != now[2]:
        patch["status"] = {"aggMetrics": new.agg_metrics()}
    return Change(KIND, str(existing.get("apiVersion") or desired["apiVersion"]), ns, meta(existing)["name"], new.obj, patch,
                  subresource="status" if "status" in patch else None, reasons=reasons)


def spd_changes(wanted: list[tuple[Obj, Obj | None]], before: dict[str, Any]) -> list[Change]:
    """The change of every SPD decided this run; `before` gets change -> the live object."""
    changes = []
    for desired, existing in wanted:
        c = spd_change(desired, existing)
        if c is not None:
            if existing is not None:
                before[c.key] = existing
            changes.append(c)
    return changes
