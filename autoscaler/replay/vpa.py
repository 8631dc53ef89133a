"""Replay the VPA recommender: the request Tidewise would have set every `every`, from the past only."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

import numpy as np
import pandas as pd

from autoscaler.logic.vpa import limit_change, recommend_resource, vpa_default_request
from autoscaler.replay.forecasts import level_ratio, shifted
from autoscaler.settings import GuardrailSettings, VpaSettings
from predictor.types import Forecast

REFERENCE_WINDOW = pd.Timedelta("8d")  # the stock VPA keeps 8 days of decaying histogram


@dataclass
class VpaReplay:
    decisions: pd.DataFrame  # series,timestamp,target,lower_bound,upper_bound
    reference: pd.DataFrame  # series,timestamp,target: the stock VPA default on the same times
    reasons: dict[str, list[str]] = field(default_factory=dict)


def _resource_of(series: str) -> str:
    return "memory" if series.rsplit("/", 1)[-1] == "memory" else "cpu"


def _to_units(resource: str, v: int) -> float:
    return v / 1000.0 if resource == "cpu" else float(v)


def replay_vpa_series(
    key: str,
    y: pd.Series,
    start: pd.Timestamp,
    end: pd.Timestamp,
    every: pd.Timedelta,
    forecasts: dict[pd.Timestamp, Forecast],
    vpa: VpaSettings,
    guard: GuardrailSettings,
) -> tuple[list[tuple], list[tuple], list[str]]:
    step = y.index[1] - y.index[0] if len(y) > 1 else pd.Timedelta("5m")
    resource = _resource_of(key)
    window_steps = max(1, int(every / step))
    bound_steps = int(pd.Timedelta(vpa.bound_window) / step)
    values = y.to_numpy(dtype=float)
    stamps = y.index.asi8
    rows, ref_rows, reasons = [], [], []
    previous: int | None = None
    for t in pd.date_range(start, end, freq=every, inclusive="left"):
        n_before = int(np.searchsorted(stamps, t.value))  # samples strictly before t
        y_before = y.iloc[:n_before]
        past = values[:n_before]
        ages = (t.value - stamps[:n_before]) / 3.6e12
        recent = ages <= REFERENCE_WINDOW / pd.Timedelta("1h")
        ref = vpa_default_request(past[recent], ages[recent])
        ref_rows.append((key, t, ref))
        fc = forecasts.get(t.floor("D"))
        if fc is None:
            # no forecast could be made before this day: the stock rule, and say so
            rows.append((key, t, ref, ref, ref))
            reasons.append(f"{t}: no forecast (too little history); stock VPA rule {ref:.4g}")
            continue
        ratio = level_ratio(y_before, fc, t.floor("D"), t)
        view = shifted(fc, t, ratio)
        peak_day = float(np.nanmax(past[ages <= pd.Timedelta(vpa.memory_peak_window) / pd.Timedelta("1h")])) \
            if resource == "memory" and n_before else None
        rec = recommend_resource(view, resource, 1, vpa, window_steps, bound_steps, memory_peak=peak_day)
        target, why = limit_change(previous, rec.target, guard.max_decrease_ratio, guard.max_increase_ratio, rec.floor)
        previous = target
        lower, upper = min(rec.lower, target), max(rec.upper, target)
        rows.append((key, t, _to_units(resource, target), _to_units(resource, lower), _to_units(resource, upper)))
        note = rec.reason.summary() + (f"; today runs x{ratio:.2f} above forecast" if ratio > 1 else "")
        reasons.append(f"{t}: {note}" + (f"; {why}" if why else ""))
    return rows, ref_rows, reasons


def replay_vpa(
    series: dict[str, pd.Series],
    starts: dict[str, pd.Timestamp],
    ends: dict[str, pd.Timestamp],
    every: pd.Timedelta,
    forecasts: dict[str, dict[pd.Timestamp, Forecast]],
    vpa: VpaSettings | None = None,
    guard: GuardrailSettings | None = None,
    progress: Callable[[int], None] | None = None,
) -> VpaReplay:
    vpa, guard = vpa or VpaSettings(), guard or GuardrailSettings()
    rows, refs, reasons = [], [], {}
    for key, y in series.items():
        r, rf, why = replay_vpa_series(key, y, starts[key], ends[key], every, forecasts.get(key, {}), vpa, guard)
        rows += r
        refs += rf
        reasons[key] = why
        if progress:
            progress(1)
    dec = pd.DataFrame(rows, columns=["series", "timestamp", "target", "lower_bound", "upper_bound"])
    ref = pd.DataFrame(refs, columns=["series", "timestamp", "target"])
    return VpaReplay(dec, ref, reasons)


def vpa_scores(usage: pd.Series, request: pd.Series) -> tuple[float, float]:
    """(mean relative slack max(request - usage, 0) / request, share of steps with usage > request),
    over the steps where both are known — the same scores as the reference scorer."""
    u, r = usage.to_numpy(dtype=float), request.to_numpy(dtype=float)
    ok = ~(np.isnan(u) | np.isnan(r)) & (r > 0)
    if not ok.any():
        return float("nan"), float("nan")
    slack = np.clip((r[ok] - u[ok]) / r[ok], 0, None)
    return float(slack.mean()), float(np.mean(u[ok] > r[ok]))


def requests_on(usage: pd.Series, decisions: pd.DataFrame, column: str = "target") -> pd.Series:
    """The request in force at each usage timestamp (the last decision at or before it)."""
    d = decisions.set_index("timestamp")[column].sort_index()
    return d.reindex(usage.index, method="ffill")
