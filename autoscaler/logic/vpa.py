"""VPA recommendation from a forecast: percentile -> margin -> floors -> policy caps.

The series is the workload's total usage (sum over its pods, as Prometheus and the synthetic
generator give it); a pod's share is total / replicas. For each resource:

- target   = max over the next `window` (8 h) of forecast q(`quantile`) x (1 + margin) / replicas,
             floored at the stock VPA's minimum and, for memory, at the peak of the last day and
             after an OOM kill at the stock VPA's bump of the usage at the kill;
- lower    = max over the next `safe_window` (1 h) of q(`lower_quantile`) / replicas: the level
             the next hour needs (below it pods are starved),
- upper    = target x `upper_factor`: a request further above what the window needs is waste,
so that lower <= target <= upper. The stock VPA updater changes a request only when it leaves
[lower, upper], then to the target (`apply_updater`, which replay applies too, with a minimum dwell
before a decrease when `follow_bounds`): with an 8 h window a tidal request changes about twice a
day, up before the peak and down after.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np
import pandas as pd

from autoscaler.model.decisions import Reason, ResourceRecommendation
from autoscaler.model.views import VpaView
from autoscaler.settings import VpaSettings
from contracts.quantity import to_units, usage_to_units
from predictor.decaying_histogram import cdf_quantiles, decaying_cdf
from predictor.types import Forecast

DEFAULT_CONTROLLED = ("cpu", "memory")


class NonFiniteForecast(ValueError):
    """The forecast holds NaN or inf where a decision needs it: no decision, nothing written."""


def quantile_column(fc: Forecast, q: float) -> np.ndarray:
    """The forecast's column for `q`, or the nearest higher quantile it has (never a lower one)."""
    if q in fc.quantiles:
        return fc.quantile(q)
    higher = [x for x in fc.quantiles if x >= q]
    if not higher:
        raise ValueError(f"forecast {fc.series} has quantiles {list(fc.quantiles)}, none >= {q}")
    return fc.quantile(min(higher))


def window_max(fc: Forecast, q: float, steps: int, start: int = 0) -> float:
    """Highest value of quantile q over forecast steps [start, start + steps)."""
    col = quantile_column(fc, q)[start: start + max(1, steps)]
    if len(col) == 0:
        raise NonFiniteForecast(f"forecast {fc.series} is shorter than {start + steps} steps")
    if not np.all(np.isfinite(col)):
        raise NonFiniteForecast(f"forecast {fc.series} has {int(np.sum(~np.isfinite(col)))} non-finite values in q{q:g}")
    return float(np.max(col))


@dataclass
class ContainerPolicy:
    """The VPA's resourcePolicy for one container, in integer units."""

    mode: str = "Auto"  # Auto or Off
    controlled: tuple[str, ...] = DEFAULT_CONTROLLED
    min_allowed: dict[str, int] = field(default_factory=dict)
    max_allowed: dict[str, int] = field(default_factory=dict)


def container_policy(vpa: dict[str, Any], container: str) -> ContainerPolicy:
    """The matching containerPolicies entry (exact name first, then `*`); ValueError when malformed."""
    policies = VpaView(vpa).container_policies()
    chosen = next((p for p in policies if p.get("containerName") == container), None) \
        or next((p for p in policies if p.get("containerName") == "*"), None)
    if not chosen:
        return ContainerPolicy()

    def units(d: dict[str, Any] | None) -> dict[str, int]:
        return {r: to_units(r, v) for r, v in (d or {}).items()}

    return ContainerPolicy(
        mode=chosen.get("mode", "Auto"),
        controlled=tuple(chosen.get("controlledResources") or DEFAULT_CONTROLLED),
        min_allowed=units(chosen.get("minAllowed")),
        max_allowed=units(chosen.get("maxAllowed")),
    )


def oom_bumped(memory_at_oom: float, settings: VpaSettings) -> float:
    """Memory an OOM-killed container needs at least: the stock VPA's bump, max(usage x ratio,
    usage + minimum) (OOMBumpUpRatio 1.2, OOMMinBumpUp 100 MiB)."""
    return max(memory_at_oom * settings.oom_bump_ratio, memory_at_oom + settings.oom_min_bump_bytes)


def target_floor(resource: str, replicas: int, settings: VpaSettings, memory_peak: float | None = None,
                 oom_memory: float | None = None, peak_margin: float = 0.0) -> tuple[int, str]:
    """The lowest target allowed, per pod, and why: the stock minimum; for memory also the peak of
    the last `memory_peak_window` (+ `peak_margin`, where memory is resized in place) and, after an OOM
    kill in it, the bumped usage at the kill."""
    floor = settings.min_cpu_millicpu if resource == "cpu" else settings.min_memory_bytes
    why = f"raised to the minimum {floor}"
    if resource != "memory":
        return floor, why
    if memory_peak is not None and np.isfinite(memory_peak):
        peak = usage_to_units(resource, memory_peak / replicas * (1.0 + peak_margin))
        if peak > floor:
            floor, why = peak, f"raised to the last {settings.memory_peak_window} peak {peak}"
            if peak_margin:
                why = (f"raised to the last {settings.memory_peak_window} peak +{peak_margin:.0%}, {peak} (memory is "
                       f"resized in place: the kubelet checks usage only before it lowers a limit)")
    if oom_memory is not None and np.isfinite(oom_memory):
        bumped = usage_to_units(resource, oom_bumped(oom_memory / replicas, settings))
        if bumped > floor:
            floor, why = bumped, (f"raised after an OOM kill to {bumped} (usage at the kill "
                                  f"x{settings.oom_bump_ratio:g}, at least +{settings.oom_min_bump_bytes})")
    return floor, why


def oom_lower(resource: str, replicas: int, settings: VpaSettings, oom_memory: float | None) -> int:
    """The lower bound after an OOM kill: a request below the bumped usage was shown to be unsafe,
    so the updater must move it (the stock updater likewise acts on a pod OOM-killed soon after start)."""
    if resource != "memory" or oom_memory is None or not np.isfinite(oom_memory):
        return 0
    return usage_to_units(resource, oom_bumped(oom_memory / max(1, replicas), settings))


def recommend_resource(
    fc: Forecast,
    resource: str,
    replicas: int,
    settings: VpaSettings,
    window_steps: int,
    safe_steps: int,
    policy: ContainerPolicy | None = None,
    memory_peak: float | None = None,
    model_label: str | None = None,
    oom_memory: float | None = None,
    raw_total: float | None = None,
    peak_margin: float = 0.0,
    window_label: str | None = None,
) -> ResourceRecommendation:
    """One container resource's recommendation; raises NonFiniteForecast on NaN forecasts.
    `memory_peak` and `oom_memory` (usage at the last OOM kill) are workload totals, like `fc`;
    `raw_total` (workload total) replaces the forecast's window max x margin as the raw target when
    another recommender was chosen (`choice_by_cost`): floors, bounds and caps apply to it alike.
    `peak_margin` raises the memory peak floor (in place); `window_label` names a window other than
    `settings.window` in the reason."""
    policy = policy or ContainerPolicy()
    replicas = max(1, int(replicas))
    grow = 1.0 + settings.margin
    raw_target = (window_max(fc, settings.quantile, window_steps) * grow if raw_total is None else raw_total) / replicas
    raw_lower = window_max(fc, settings.lower_quantile, safe_steps) / replicas
    reason = Reason(model=model_label or fc.model, quantile=settings.quantile, margin=settings.margin,
                    window=window_label or settings.window, raw=usage_to_units(resource, max(raw_target, 0.0)))
    target = reason.raw
    floor, why = target_floor(resource, replicas, settings, memory_peak, oom_memory, peak_margin)
    if target < floor:
        reason.steps.append(why)
        target = floor
    lower = min(max(usage_to_units(resource, max(raw_lower, 0.0)), oom_lower(resource, replicas, settings, oom_memory)),
                target)
    # a floor is a need, not waste: the upper bound is never below it times the factor
    upper = max(int(target * settings.upper_factor), target)
    uncapped = target
    lo, hi = policy.min_allowed.get(resource), policy.max_allowed.get(resource)

    def cap(v: int) -> int:
        if lo is not None and v < lo:
            v = lo
        if hi is not None and v > hi:
            v = hi
        return v

    capped = cap(target)
    if capped != target:
        reason.steps.append(f"capped by resourcePolicy to {capped} (min {lo}, max {hi})")
    return ResourceRecommendation(resource, target=capped, lower=cap(lower), upper=cap(upper),
                                  uncapped=uncapped, reason=reason, floor=cap(floor))


def apply_updater(in_force: int | None, rec: ResourceRecommendation, dwelt: pd.Timedelta | None,
                  min_dwell: pd.Timedelta) -> tuple[int, str | None]:
    """The request in force after a new recommendation, by the stock VPA updater's rule: it moves
    (to the target) only when it leaves [lower, upper]. A decrease also waits until the request has
    been in force for `min_dwell` (`dwelt`: time since its last change; None: unknown, no wait).
    Returns (request, why it changed or was held; None when inside the bounds)."""
    if in_force is None or in_force <= 0:
        return rec.target, "first request: the target"
    if in_force < rec.lower:
        return rec.target, f"request {in_force} below lowerBound {rec.lower}: set to the target"
    if in_force > rec.upper:
        if dwelt is not None and dwelt < min_dwell:
            return in_force, f"request {in_force} above upperBound {rec.upper}, held: changed less than {min_dwell} ago"
        return rec.target, f"request {in_force} above upperBound {rec.upper}: set to the target"
    return in_force, None


PeakRange = Callable[[], "tuple[int, int] | None"]  # the workload's own hourly peaks, read on demand
# ... of a container resource (container, resource): the change guardrail's range for a whole decision
PodPeaks = Callable[[str, str], "tuple[int, int] | None"]


def limit_change(previous: int | None, new: int, max_decrease_ratio: float, max_increase_ratio: float,
                 floor: int = 0, seen: PeakRange | None = None) -> tuple[int, str | None]:
    """Guardrail: a published value moves at most by these ratios per step (never below `floor`),
    or as far as the range `seen()` gives, the workload's own recent hourly peaks (`pod_peaks_range`):
    a level the workload itself reached lately is evidence, not a broken forecast, so a tide wider
    than the ratios is followed, not cut short. `seen` is called only when the ratios would limit.
    Returns (value, why it moved less than asked, or further than the ratios alone allow; None when
    neither)."""
    if previous is None or previous <= 0:
        return new, None
    lo = int(np.ceil(previous * max_decrease_ratio))
    hi = int(np.floor(previous * max_increase_ratio))
    if lo <= new <= hi:
        return new, None
    span = seen() if seen is not None else None
    low, high = (min(lo, span[0]), max(hi, span[1])) if span else (lo, hi)
    if span and low <= new <= high:
        ratio = max_decrease_ratio if new < lo else max_increase_ratio
        return new, (f"beyond {ratio:g}x of {previous}, not limited: the workload's own hourly peaks spanned "
                     f"{span[0]}-{span[1]}")
    also = f" or the workload's own hourly peaks {span[0]}-{span[1]}" if span else ""
    if new < low:
        out = max(low, floor)
        return out, f"decrease limited to {max_decrease_ratio:g}x of {previous}{also}: {out}"
    out = max(high, floor)
    return out, f"increase limited to {max_increase_ratio:g}x of {previous}{also}: {out}"


def hourly_maxima(t: np.ndarray, v: np.ndarray, per_hour: int) -> tuple[np.ndarray, np.ndarray]:
    """Maxima of `v` (one column per line, or 1-D) over the clock hours of the ascending integer times
    `t` (`per_hour` of them an hour), NaNs ignored; hours without a finite value in every column
    dropped. Returns (each hour's start, in t's units; its maxima)."""
    if len(t) == 0:
        return t, v
    hours = t // per_hour
    starts = np.flatnonzero(np.r_[True, hours[1:] != hours[:-1]])
    peak = np.fmax.reduceat(v, starts, axis=0)
    keep = np.isfinite(peak).all(axis=1) if peak.ndim > 1 else np.isfinite(peak)
    return (hours[starts] * per_hour)[keep], peak[keep]


def pod_peaks_range(y: pd.Series, now: pd.Timestamp, window: pd.Timedelta, replicas: int,
                    resource: str) -> tuple[int, int] | None:
    """(lowest, highest) of the hourly maxima (UTC clock hours) of `y`, a workload's total usage, in
    [now - window, now), per pod of `replicas`, in units: the levels the workload itself reached
    lately, which the change guardrail lets a target move within. None without a finite sample."""
    idx = y.index
    tick = pd.Timedelta(1, unit=idx.unit)
    ticks = idx.asi8
    end = int(pd.Timestamp(now).as_unit(idx.unit).asm8.view("i8"))
    lo, hi = np.searchsorted(ticks, [end - window // tick, end])
    _, peaks = hourly_maxima(ticks[lo:hi], y.to_numpy(dtype=float)[lo:hi], pd.Timedelta("1h") // tick)
    if not len(peaks):
        return None
    pods = max(1, int(replicas))
    return usage_to_units(resource, float(peaks.min()) / pods), usage_to_units(resource, float(peaks.max()) / pods)


def vpa_default_request(values: np.ndarray, ages_hours: np.ndarray, half_life_hours: float = 24.0,
                        percentile: float = 0.9, margin: float = 0.15) -> float:
    """The stock VPA recommender's target: decaying-weight percentile (24 h half-life: a week-old
    sample weighs 1/128) of the past samples, times 1 + 15%. The reference of the benchmark."""
    ok = np.isfinite(values)
    v, a = values[ok], ages_hours[ok]
    if len(v) == 0:
        return float("nan")
    ordered, cumulative = decaying_cdf(v, a, half_life_hours)
    return float(cdf_quantiles(ordered, cumulative, percentile) * (1 + margin))
