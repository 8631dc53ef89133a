"""A workload's service profile as a Katalyst ServiceProfileDescriptor (SPD), pure: history in, object out.

What Tidewise owns in an SPD, and leaves alone otherwise (businessIndicator, systemIndicator,
baselinePercent and other extended indicators or aggMetrics belong to the user or to Katalyst):
- `spec.targetRef`: the workload (SPDs map one-to-one to workloads);
- `spec.extendedIndicator[name=TidewiseProfile]`: the service profile's facts per resource (class,
  peak and trough windows, peak/trough ratio, daily and weekly seasonality, burstiness, trend), from
  `predictor.profile.build_profile` on the workload's total usage;
- `status.aggMetrics[scope=tidewise.io/<period>-p<q>]`: the usage profile as Katalyst's aggregated
  metrics, one item per hour of the day (or week) holding that hour's usage quantile per container.
  The series are workload totals, so the aggregator is `sum` (the sum over the workload's pods).

The profile reads only whole periods of history before `start` (midnight UTC for a day, Monday for
a week): the same object all day, so an SPD is rewritten about once a day, not on every run.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

import numpy as np
import pandas as pd

from autoscaler.model.cluster import Obj, meta
from autoscaler.model.spd import INDICATOR, SCOPE_PREFIX
from autoscaler.settings import SpdSettings
from contracts.quantity import format_units, usage_to_units
from predictor.durations import DAY, WEEK
from predictor.profile import build_profile

SPD_API_VERSION = "workload.katalyst.kubewharf.io/v1alpha1"
HOUR = pd.Timedelta(hours=1)


class NotEnoughHistory(LookupError):
    """Fewer whole days of history than a profile needs."""


@dataclass(frozen=True)
class ProfileInputs:
    """One workload's usage series and the period its profile is for."""

    namespace: str
    kind: str
    name: str
    api_version: str  # of the workload (targetRef.apiVersion)
    containers: Mapping[str, Mapping[str, pd.Series]]  # container -> cpu/memory -> usage (cores, bytes)
    start: pd.Timestamp  # the period the profile describes starts here (UTC)
    lookback: pd.Timedelta  # history read: [start - lookback, start), inside every run's window all period long
    step: pd.Timedelta


def opted_in(workload: Obj, annotation: str) -> bool:
    """The workload asks for an SPD (`annotation: "true"`, as Katalyst's SPD controller reads it)."""
    return str((meta(workload).get("annotations") or {}).get(annotation, "")).lower() == "true"


def period_start(now: pd.Timestamp, period: str) -> pd.Timestamp:
    """Midnight UTC of `now`'s day, or of the Monday of its week."""
    day = now.tz_convert("UTC").floor("D") if now.tzinfo else now.tz_localize("UTC").floor("D")
    return day if period == "day" else day - pd.Timedelta(days=int(day.day_of_week))


def _slots(index: pd.DatetimeIndex, period: str) -> np.ndarray:
    return np.asarray(index.hour if period == "day" else index.day_of_week * 24 + index.hour)


def _past(y: pd.Series, inp: ProfileInputs) -> pd.Series:
    return y[(y.index >= inp.start - inp.lookback) & (y.index < inp.start)].dropna()


def agg_metrics(inp: ProfileInputs, s: SpdSettings) -> list[dict[str, Any]]:
    """One `status.aggMetrics` entry per quantile: an item per hour of the period whose usage is
    known, ending at that hour of the coming period (`timestamp` closes the `window`)."""
    per_slot: dict[float, dict[int, list[dict[str, Any]]]] = {q: {} for q in s.quantiles}
    for container in sorted(inp.containers):
        usage: dict[float, dict[int, dict[str, str]]] = {q: {} for q in s.quantiles}
        for res in ("cpu", "memory"):
            y = inp.containers[container].get(res)
            v = _past(y, inp) if y is not None else None
            if v is None or v.empty:
                continue
            grouped = v.groupby(_slots(v.index, s.period))
            for q in s.quantiles:
                for slot, val in grouped.quantile(q).items():
                    usage[q].setdefault(int(slot), {})[res] = format_units(res, usage_to_units(res, max(0.0, val)))
        for q in s.quantiles:
            for slot, u in usage[q].items():
                per_slot[q].setdefault(slot, []).append({"name": container, "usage": u})
    out = []
    for q in s.quantiles:
        items = [{"timestamp": _iso(inp.start + (slot + 1) * HOUR), "window": "1h", "containers": per_slot[q][slot],
                  "annotations": {f"{SCOPE_PREFIX}quantile": f"{q:g}"}} for slot in sorted(per_slot[q])]
        if items:
            out.append({"aggregator": "sum", "scope": f"{SCOPE_PREFIX}{s.period}-p{q * 100:g}", "items": items})
    return out


def indicators(inp: ProfileInputs) -> dict[str, Any]:
    """resource -> the service profile of the workload's total usage, in the SPD's camelCase."""
    out: dict[str, Any] = {}
    for res in ("cpu", "memory"):
        parts = [_past(c[res], inp) for c in inp.containers.values() if c.get(res) is not None]
        parts = [p for p in parts if not p.empty]
        if not parts:
            continue
        total = pd.concat(parts, axis=1).sum(axis=1, min_count=len(parts))
        p = build_profile(f"{inp.namespace}/{inp.kind}/{inp.name}/{res}", total, inp.step)
        out[res] = _finite({
            "class": p.profile_class, "peakWindow": p.peak_window, "troughWindow": p.trough_window,
            "peakToTrough": p.peak_to_trough, "seasonalityDay": p.seasonality_day,
            "seasonalityWeek": p.seasonality_week, "burstiness": p.burstiness, "trendPerDay": p.trend_per_day,
            "mean": _round(p.mean), "p95": _round(p.p95), "peak": _round(p.peak),
            "unit": "cores" if res == "cpu" else "bytes", "reasons": list(p.reasons),
        })
    return out


def history_days(inp: ProfileInputs) -> float:
    """Days of history read before `start` (the longest container series)."""
    pasts = [_past(y, inp) for c in inp.containers.values() for y in c.values()]
    firsts = [p.index[0] for p in pasts if not p.empty]
    return (inp.start - min(firsts)) / DAY if firsts else 0.0


def desired_spd(inp: ProfileInputs, s: SpdSettings) -> Obj:
    """The SPD Tidewise wants for the workload: its own parts only (see the module docstring).
    NotEnoughHistory when fewer than `s.min_days` days precede the period."""
    days = history_days(inp)
    need = s.min_days * DAY if s.period == "day" else max(s.min_days * DAY, WEEK)
    if days * DAY < need:
        raise NotEnoughHistory(f"{days:.1f} days of history before {_iso(inp.start)}; an SPD profile needs "
                               f"{need / DAY:g} whole days")
    spec = {"targetRef": {"apiVersion": inp.api_version, "kind": inp.kind, "name": inp.name},
            "extendedIndicator": [{"name": INDICATOR, "indicators": {
                f"{INDICATOR}Indicators": {"period": s.period, "from": _iso(inp.start),
                                           "historyDays": round(days, 2), "resources": indicators(inp)}}}]}
    return {"apiVersion": SPD_API_VERSION, "kind": "ServiceProfileDescriptor",
            "metadata": {"name": inp.name, "namespace": inp.namespace,
                         "labels": {"app.kubernetes.io/managed-by": "tidewise"}},
            "spec": spec, "status": {"aggMetrics": agg_metrics(inp, s)}}


def _iso(ts: pd.Timestamp) -> str:
    return ts.tz_convert("UTC").strftime("%Y-%m-%dT%H:%M:%SZ")


def _round(x: float) -> float | None:
    return round(float(x), 6) if np.isfinite(x) else None


def _finite(d: dict[str, Any]) -> dict[str, Any]:
    """Strict JSON (the API's) has no NaN: non-finite numbers become None, then are dropped."""
    out = {}
    for k, v in d.items():
        if isinstance(v, float) and not np.isfinite(v):
            v = None
        if v is not None:
            out[k] = v
    return out
