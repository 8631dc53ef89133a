"""Predictive HPA: replicas(t) = ceil(forecast_q(t + lead) / target-per-replica), applied as the
HPA's minReplicas ahead of a peak; and the reactive Kubernetes HPA, simulated, as the reference.

The HPA keeps scaling reactively above the floor Tidewise sets: the replicas that serve are
max(minReplicas, what the HPA's own rule asks for), capped at maxReplicas.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from autoscaler.model.views import HpaView, MalformedHpa
from contracts.quantity import AbsurdScale, to_units


# Kubernetes counts replicas in an int32 (spec.replicas, minReplicas, maxReplicas): a demand that
# needs more is a unit mistake, never a decision (cast to int64 it once printed -9223372036854775808).
MAX_REPLICAS = 2**31 - 1


class TooManyReplicas(AbsurdScale):
    """A demand whose replica count does not fit Kubernetes' int32 (a unit mistake in the input)."""


def check_replica_scale(demand: np.ndarray, per_replica: float, per_replica_text: str | None = None) -> None:
    """TooManyReplicas unless ceil(demand / per_replica) fits a Kubernetes replica count;
    `per_replica_text` names the divisor in the message as the user gave it (default per-replica N)."""
    if not (per_replica > 0 and math.isfinite(per_replica)):
        raise ValueError(f"target per replica {per_replica!r} must be a positive number")
    d = np.asarray(demand, dtype=float)
    d = d[np.isfinite(d)]
    peak = float(d.max()) if len(d) else 0.0
    with np.errstate(over="ignore"):
        need = peak / per_replica
    if not need <= MAX_REPLICAS:
        divisor = per_replica_text or f"per-replica {per_replica:g}"
        raise TooManyReplicas(f"peak demand {peak:g} / {divisor} needs {need:.3g} replicas, above "
                         f"Kubernetes' limit of {MAX_REPLICAS}; check the units of the demand and per replica")


def replicas_needed(demand: np.ndarray, per_replica: float) -> np.ndarray:
    """ceil(demand / per_replica), at least 1; NaN demand -> ValueError (no decision from NaN), and
    a count above MAX_REPLICAS -> ValueError (no wrapped integer)."""
    if per_replica <= 0 or not math.isfinite(per_replica):
        raise ValueError(f"target per replica {per_replica!r} must be a positive number")
    d = np.asarray(demand, dtype=float)
    if not np.all(np.isfinite(d)):
        raise ValueError(f"{int(np.sum(~np.isfinite(d)))} non-finite forecast values")
    check_replica_scale(d, per_replica)
    # 1e-9 absorbs float noise: a demand of exactly 3 targets is 3 replicas, not 4
    return np.maximum(1, np.ceil(np.maximum(d, 0.0) / per_replica - 1e-9)).astype(int)


def predictive_min_replicas(demand_q: np.ndarray, step: pd.Timedelta, lead: pd.Timedelta,
                            look_ahead: pd.Timedelta, per_replica: float,
                            since: pd.Timedelta = pd.Timedelta(0)) -> tuple[int, np.ndarray]:
    """(replicas to have now, replicas(t) over the forecast), `demand_q[i]` being the forecast for
    the step [origin + i*step, origin + (i+1)*step) and now = origin + `since`. The floor carries the
    steps overlapping [now, now + lead + look_ahead) and no other: the replicas serving now must not
    be removed under the demand of now, those asked for now serve from now + lead, and the next
    decision, `look_ahead` later, takes over from there. A rise is thus asked for exactly a start-up
    time before the step that needs it (a floor held longer only over-provisions)."""
    timeline = replicas_needed(demand_q, per_replica)
    first = int(since // step)
    # the last step the span touches: a span ending exactly on a step boundary does not reach the next step
    last = max(first, int(-(-(since + lead + look_ahead) // step)) - 1)
    window = timeline[first: last + 1]
    if len(window) == 0:
        raise ValueError(f"forecast of {len(timeline)} steps does not reach now + lead ({lead})")
    return int(window.max()), timeline


def interpolate_quantile(values: np.ndarray, quantiles: tuple[float, ...] | list[float], q: float) -> np.ndarray:
    """Column for quantile `q` of a forecast's `values` (steps x `quantiles`), linear between the two
    quantiles around it; below the lowest the lowest column (a quantile is never extrapolated).
    Lets the HPA floor carry e.g. q0.7 from a forecast stored at 0.5/0.9/0.95/0.99."""
    qs = np.asarray(quantiles, dtype=float)
    v = np.asarray(values, dtype=float)
    order = np.argsort(qs)
    qs, v = qs[order], v[:, order]
    if q in qs:
        return v[:, int(np.searchsorted(qs, q))]
    if q < qs[0]:
        return v[:, 0]
    if q > qs[-1]:
        raise ValueError(f"forecast has quantiles {list(qs)}, none >= {q}")
    hi = int(np.searchsorted(qs, q))
    w = (q - qs[hi - 1]) / (qs[hi] - qs[hi - 1])
    return (1 - w) * v[:, hi - 1] + w * v[:, hi]


def level_ratio(observed: np.ndarray, expected: np.ndarray, lo: float = 0.5, hi: float = 2.0) -> float:
    """How the latest observations compare with what the forecast said for the same steps
    (ratio of sums, NaN pairs dropped, clipped to [lo, hi]; 1 when there is nothing to compare).
    The serving loop refits hourly but decides every minute: this carries the last minutes'
    level into the next ones, as a reactive HPA would, without its lag."""
    o, e = np.asarray(observed, dtype=float), np.asarray(expected, dtype=float)
    ok = np.isfinite(o) & np.isfinite(e)
    if not ok.any() or e[ok].sum() <= 0:
        return 1.0
    return float(np.clip(o[ok].sum() / e[ok].sum(), lo, hi))


def floor_demand(q: np.ndarray, q50: np.ndarray, ratio: float, band_factor: float | None) -> np.ndarray:
    """The demand a floor carries, shared by serve and replay: the forecast quantile `q` scaled to
    the observed level (`ratio`), or, once the short-term band knows its errors, the level-corrected
    median times the band's factor."""
    if band_factor is None:
        return np.asarray(q, dtype=float) * ratio
    return np.asarray(q50, dtype=float) * ratio * band_factor


@dataclass
class Stabilizer:
    """Scale-down stabilisation: a floor falls only to the highest wish of the last `window`
    (raises are immediate). One per HPA, kept across runs."""

    window: pd.Timedelta
    wishes: list[tuple[pd.Timestamp, int]] = field(default_factory=list)
    # the HPA's short-term band (HpaSettings.band_steps), kept with the wishes: the state of one floor
    band: ShortTermBand = field(default_factory=lambda: ShortTermBand(288))

    def apply(self, now: pd.Timestamp, wish: int) -> int:
        self.wishes = [(t, w) for t, w in self.wishes if now - t < self.window]
        self.wishes.append((now, wish))
        return max(w for _, w in self.wishes)


@dataclass
class ShortTermBand:
    """Relative errors (observed / predicted) of the level-corrected median at the step each
    decision served, over the last `size` steps: its quantile is the margin a floor needs a
    start-up time ahead, far narrower than the day-ahead band (which is as wide in the trough as at
    the peak). Adaptive in the conformal sense: a drifting series widens or narrows its own band.
    One per HPA, kept across runs; `pending` maps a step's start to what was predicted for it."""

    size: int
    errors: list[float] = field(default_factory=list)
    pending: dict[pd.Timestamp, float] = field(default_factory=dict)

    def predict(self, step_start: pd.Timestamp, predicted: float) -> None:
        """Remember the latest prediction for the step starting at `step_start` (scored once seen)."""
        self.pending[step_start] = predicted

    def observe(self, step_start: pd.Timestamp, observed: float) -> None:
        """Score the prediction for `step_start` against what was seen (NaN or no prediction: nothing)."""
        predicted = self.pending.pop(step_start, None)
        if predicted is None or not (predicted > 0 and math.isfinite(observed)):
            return
        self.errors.append(observed / predicted)
        del self.errors[: -self.size]
        self.pending = {t: v for t, v in self.pending.items() if t > step_start}

    def factor(self, q: float, min_samples: int) -> float | None:
        """The q-quantile of observed / predicted; None until `min_samples` errors are known."""
        if len(self.errors) < min_samples:
            return None
        return float(np.quantile(self.errors, q))


@dataclass
class HpaTarget:
    """What one replica should carry, from the HPA's own metric."""

    resource: str  # cpu or memory
    per_replica_units: float  # millicpu or bytes one replica should carry at the target
    describe: str


def parse_hpa(hpa: dict[str, Any]) -> tuple[str, str, int, int]:
    """(target kind, target name, minReplicas, maxReplicas) of an autoscaling/v2 HPA, or MalformedHpa."""
    return HpaView(hpa).bounds()


def hpa_target(hpa: dict[str, Any], pod_requests: dict[str, int], default_utilization: float) -> HpaTarget:
    """Per-replica capacity from the first Resource metric (cpu or memory) of the HPA.

    Utilization U% of a pod request R -> U/100 x R per replica; AverageValue V -> V per replica.
    `pod_requests` is the pod's total request per resource, in units."""
    metrics = HpaView(hpa).metrics() or [
        {"type": "Resource", "resource": {"name": "cpu", "target": {"type": "Utilization",
                                                                    "averageUtilization": int(default_utilization * 100)}}}]
    for m in metrics:
        if not isinstance(m, dict) or m.get("type") != "Resource":
            continue
        res = m.get("resource") or {}
        name, target = res.get("name"), res.get("target") or {}
        if name not in ("cpu", "memory"):
            continue
        kind = target.get("type")
        try:
            if kind == "Utilization":
                u = target.get("averageUtilization")
                if not isinstance(u, int) or u <= 0:
                    raise MalformedHpa(f"metric {name}: averageUtilization {u!r} is not a positive integer")
                req = pod_requests.get(name)
                if not req:
                    raise MalformedHpa(f"metric {name}: Utilization target but the pods request no {name}")
                return HpaTarget(name, u / 100.0 * req, f"{u}% of the pod's {name} request")
            if kind == "AverageValue":
                # a missing averageValue does not parse here: reported below as MalformedHpa
                v = to_units(name, target.get("averageValue"))  # type: ignore[arg-type]
                if v <= 0:
                    raise MalformedHpa(f"metric {name}: averageValue must be positive")
                return HpaTarget(name, float(v), f"averageValue {target.get('averageValue')}")
        except (TypeError, ValueError) as exc:
            if isinstance(exc, MalformedHpa):
                raise
            raise MalformedHpa(f"metric {name}: {exc}") from exc
        raise MalformedHpa(f"metric {name}: target type {kind!r} is not Utilization or AverageValue")
    raise MalformedHpa("no Resource metric on cpu or memory to size replicas by")


def simulate_reactive_hpa(demand_1min: np.ndarray, per: float, r0: int, *, target_utilization: float = 0.7,
                          tolerance: float = 0.1, stabilization_minutes: int = 5, startup_minutes: int = 2,
                          min_replicas: np.ndarray | None = None, max_replicas: int | None = None) -> np.ndarray:
    """The Kubernetes HPA rule minute by minute: desired = ceil(ready x util / target) outside the
    tolerance, on the demand seen one minute earlier; scale-down only to the highest desire of the
    last `stabilization_minutes`; new pods serve after `startup_minutes`. `min_replicas[i]` is the
    floor in force at minute i (a predictive minReplicas); returns the serving replicas per minute.
    With no floor this is the reference scorer's reactive HPA (shared/eval/bench_decisions.py)."""
    n = len(demand_1min)
    check_replica_scale(np.asarray(demand_1min, dtype=float), per * target_utilization)
    desired: list[int] = []
    serving = np.empty(n)
    replicas = r0
    live = r0
    pending: list[tuple[int, int]] = []
    for i in range(n):
        arrived = sum(c for t, c in pending if t <= i)
        if arrived:
            live += arrived
            pending = [p for p in pending if p[0] > i]
        serving[i] = live
        seen = demand_1min[i - 1] if i else demand_1min[0]
        util = seen / (max(live, 1) * per)
        if np.isnan(util) or abs(util / target_utilization - 1) <= tolerance:
            want = replicas
        else:
            want = max(1, int(np.ceil(live * util / target_utilization)))
        desired.append(want)
        target = max(desired[-stabilization_minutes:]) if want < replicas else want
        if min_replicas is not None:
            target = max(target, int(min_replicas[i]))
        if max_replicas is not None:
            target = min(target, max_replicas)
        if target > replicas:
            pending.append((i + startup_minutes, target - replicas))
        elif target < replicas:
            live -= replicas - target  # as the reference scorer does (it does not cancel pending pods)
        replicas = target
    return serving


def hpa_scores(demand_1min: np.ndarray, serving: np.ndarray, per: float, target_utilization: float = 0.7,
               tolerance: float = 0.1) -> tuple[float, float]:
    """(mean serving replicas, share of minutes with utilisation above target x (1 + tolerance))."""
    ok = ~np.isnan(demand_1min)
    over = demand_1min[ok] / (np.maximum(serving[ok], 1) * per) > target_utilization * (1 + tolerance)
    return float(np.mean(serving[ok])), float(np.mean(over))


