"""VPA recommendation from a forecast: percentile -> margin -> floors -> policy caps.

The series is the workload's total usage (sum over its pods, as Prometheus and the synthetic
generator give it); a pod's share is total / replicas. For each resource:

- target   = max over the next `window` of forecast q(`quantile`) x (1 + margin) / replicas,
             floored at the stock VPA's minimum and, for memory, at the peak of the last day;
- lower    = max over the window of q(`lower_quantile`) / replicas (below it pods are starved),
- upper    = max over `bound_window` of q(`upper_quantile`) x (1 + margin) / replicas,
so that lower <= target <= upper, and the stock VPA updater only evicts pods whose requests fall
outside [lower, upper]: a request inside it survives the day's tide.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from autoscaler.model.decisions import Reason, ResourceRecommendation
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
    policies = (((vpa.get("spec") or {}).get("resourcePolicy") or {}).get("containerPolicies")) or []
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


def recommend_resource(
    fc: Forecast,
    resource: str,
    replicas: int,
    settings: VpaSettings,
    window_steps: int,
    bound_steps: int,
    policy: ContainerPolicy | None = None,
    memory_peak: float | None = None,
    model_label: str | None = None,
) -> ResourceRecommendation:
    """One container resource's recommendation; raises NonFiniteForecast on NaN forecasts."""
    policy = policy or ContainerPolicy()
    replicas = max(1, int(replicas))
    grow = 1.0 + settings.margin
    raw_target = window_max(fc, settings.quantile, window_steps) * grow / replicas
    raw_lower = window_max(fc, settings.lower_quantile, window_steps) / replicas
    raw_upper = window_max(fc, settings.upper_quantile, max(bound_steps, window_steps)) * grow / replicas
    reason = Reason(model=model_label or fc.model, quantile=settings.quantile, margin=settings.margin,
                    window=settings.window, raw=usage_to_units(resource, max(raw_target, 0.0)))
    target = reason.raw
    floor = settings.min_cpu_millicpu if resource == "cpu" else settings.min_memory_bytes
    if resource == "memory" and memory_peak is not None and np.isfinite(memory_peak):
        peak = usage_to_units(resource, memory_peak / replicas)
        if peak > floor:
            floor = peak
            why = f"raised to the last {settings.memory_peak_window} peak {peak}"
        else:
            why = f"raised to the minimum {floor}"
    else:
        why = f"raised to the minimum {floor}"
    if target < floor:
        reason.steps.append(why)
        target = floor
    lower = min(usage_to_units(resource, max(raw_lower, 0.0)), target)
    upper = max(usage_to_units(resource, max(raw_upper, 0.0)), target)
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


def limit_change(previous: int | None, new: int, max_decrease_ratio: float, max_increase_ratio: float,
                 floor: int = 0) -> tuple[int, str | None]:
    """Guardrail: a published value moves at most by these ratios per step (never below `floor`)."""
    if previous is None or previous <= 0:
        return new, None
    lo = int(np.ceil(previous * max_decrease_ratio))
    hi = int(np.floor(previous * max_increase_ratio))
    if new < lo:
        out = max(lo, floor)
        return out, f"decrease limited to {max_decrease_ratio:g}x of {previous}: {out}"
    if new > hi:
        out = max(hi, floor)
        return out, f"increase limited to {max_increase_ratio:g}x of {previous}: {out}"
    return new, None


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
