"""Service profiles: each workload resource's weekly tide and the facts decisions need.

The class is decided in this order, and the reason is recorded:
`insufficient-history` (under 2 days) -> `trending` (level moves >= 15% over the window, steadily)
-> `tidal` (daily or weekly ACF >= 0.5 and peak/trough >= 1.3) -> `bursty` (spikes reach >= 50% of
the mean above the usual level for that time of day) -> `flat`.
"""
from __future__ import annotations

from typing import Any, Callable

import numpy as np
import pandas as pd

from predictor.durations import DAY, WEEK
from predictor.history import History
from predictor.features.seasonality import acf_at
from predictor.types import RESOURCES, ServiceProfile, SeriesKey

MIN_DAYS = 2.0  # below this, no daily shape can be told from noise
TIDAL_ACF = 0.5
TIDAL_RATIO = 1.3
TREND_TOTAL = 0.15  # relative change of the level over the window
BURSTY = 0.5


def _window(curve: np.ndarray, mask: np.ndarray, centre: int) -> dict[str, Any]:
    """The circular run of hours around `centre` where `mask` holds."""
    n = len(curve)
    a = b = centre
    while mask[(a - 1) % n] and (centre - a) < n - 1:
        a -= 1
    while mask[(b + 1) % n] and (b - a) < n - 1:
        b += 1
    return {"start": f"{a % n:02d}:00", "end": f"{(b + 1) % n:02d}:00", "hours": b - a + 1,
            "level": float(np.mean([curve[i % n] for i in range(a, b + 1)]))}


def build_profile(key: str, y: pd.Series, step: pd.Timedelta) -> ServiceProfile:
    v = y.dropna()
    days = float((y.index[-1] - y.index[0] + step) / DAY) if len(y) else 0.0
    gaps = int(y.isna().sum())
    mean = float(v.mean()) if len(v) else float("nan")
    reasons: list[str] = []
    base: dict[str, Any] = dict(series=key, days_of_history=round(days, 3), step_seconds=int(step.total_seconds()),
                mean=mean, p50=float(v.quantile(0.5)) if len(v) else float("nan"),
                p95=float(v.quantile(0.95)) if len(v) else float("nan"),
                peak=float(v.max()) if len(v) else float("nan"), gaps=gaps)
    day_acf, week_acf = acf_at(y, DAY, step), acf_at(y, WEEK, step)
    if days < MIN_DAYS or len(v) < 24:
        reasons.append(f"{days:.1f} days of history < {MIN_DAYS:g} needed for a daily shape")
        return ServiceProfile(profile_class="insufficient-history", peak_window=None, trough_window=None,
                              peak_to_trough=None, seasonality_day=_nan0(day_acf), seasonality_week=_nan0(week_acf),
                              burstiness=0.0, trend_per_day=0.0, reasons=reasons, **base)

    hour = v.index.hour
    hourly = v.groupby(hour).median().reindex(range(24)).interpolate(limit_direction="both").to_numpy()
    lo, hi = float(hourly.min()), float(hourly.max())
    span = hi - lo
    peak_w = _window(hourly, hourly >= lo + 0.8 * span, int(hourly.argmax())) if span > 0 else None
    trough_w = _window(hourly, hourly <= lo + 0.2 * span, int(hourly.argmin())) if span > 0 else None
    ratio = hi / lo if lo > 0 else None

    # usual level for each weekday x quarter-hour, and how far spikes rise above it
    slot = v.index.day_of_week * 96 + v.index.hour * 4 + v.index.minute // 15
    usual = v.groupby(slot).transform("median")
    resid = (v - usual).to_numpy()
    burst = float((np.quantile(resid, 0.995) - np.median(resid)) / abs(mean)) if mean else 0.0

    trend, steady = _trend(v, step, mean)

    seasonal = max(_nan0(day_acf), _nan0(week_acf))
    if abs(trend) * days >= TREND_TOTAL and steady:
        cls = "trending"
        reasons.append(f"level moves {trend * 100:+.2f}%/day ({trend * days * 100:+.0f}% over {days:.0f} d)")
    elif seasonal >= TIDAL_ACF and ratio is not None and ratio >= TIDAL_RATIO:
        cls = "tidal"
        reasons.append(f"ACF day {day_acf:.2f} / week {_nan0(week_acf):.2f} >= {TIDAL_ACF}, peak/trough {ratio:.2f}")
    elif burst >= BURSTY:
        cls = "bursty"
        reasons.append(f"spikes reach {burst * 100:.0f}% of the mean above the usual level")
    else:
        cls = "flat"
        swing = f"peak/trough {ratio:.2f}" if ratio is not None else "no trough above 0"
        reasons.append(f"ACF day {_nan0(day_acf):.2f}, {swing} (tidal needs >= {TIDAL_ACF} and >= {TIDAL_RATIO}), "
                       f"spikes {burst * 100:.0f}% of the mean")
    p50c, p95c = _weekly_curves(v)
    return ServiceProfile(profile_class=cls, peak_window=peak_w, trough_window=trough_w,
                          peak_to_trough=None if ratio is None else round(ratio, 3),
                          seasonality_day=round(_nan0(day_acf), 4), seasonality_week=round(_nan0(week_acf), 4),
                          burstiness=round(burst, 4), trend_per_day=round(trend, 5),
                          weekly_curve_p50=p50c, weekly_curve_p95=p95c, reasons=reasons, **base)


def _trend(v: pd.Series, step: pd.Timedelta, mean: float) -> tuple[float, bool]:
    """Relative change per day of the level, and whether it is steady. With two weeks or more,
    whole weeks are compared so that weekends do not pose as a trend; otherwise whole days."""
    if not mean:
        return 0.0, False
    span = v.index[-1] - v.index[0] + step
    period = WEEK if span >= 2 * WEEK else DAY
    n = int(span / period)
    if n < 2:
        return 0.0, False
    end = v.index[-1] + step
    means = np.array([v[(v.index >= end - (i + 1) * period) & (v.index < end - i * period)].mean()
                      for i in range(n)][::-1])
    means = means[np.isfinite(means)]
    if len(means) < 2:
        return 0.0, False
    slope = np.polyfit(np.arange(len(means), dtype=float), means, 1)[0]
    diffs = np.diff(means)
    steady = bool(np.all(diffs > 0) or np.all(diffs < 0)) if period == WEEK else (
        np.mean(np.sign(diffs) == np.sign(slope)) >= 0.7)
    return float(slope / (period / DAY) / mean), steady


def _weekly_curves(v: pd.Series) -> tuple[list[list[float | None]], list[list[float | None]]]:
    """weekday (Monday = 0) x quarter-hour -> P50 and P95; None where no sample falls."""
    slot = pd.MultiIndex.from_arrays([v.index.day_of_week, v.index.hour * 4 + v.index.minute // 15])
    g = v.groupby(slot)
    full = pd.MultiIndex.from_product([range(7), range(96)])
    out = []
    for q in (0.5, 0.95):
        arr = g.quantile(q).reindex(full).to_numpy().reshape(7, 96)
        out.append([[None if np.isnan(x) else round(float(x), 6) for x in row] for row in arr])
    return out[0], out[1]


def _nan0(x: float) -> float:
    return 0.0 if x is None or not np.isfinite(x) else float(x)


def build_profiles(history: History, progress: Callable[[int], Any] | None = None) -> dict[str, ServiceProfile]:
    """Profiles of every series; CPU profiles get usage per unit of business traffic where the
    same workload has a business series (any resource other than cpu/memory/requests/replicas).
    `progress(1)` is called after each series (~5 ms each: a fleet of 10,000 takes a minute)."""
    out = {}
    for k, y in history.series.items():
        out[k] = build_profile(k, y, history.step)
        if progress is not None:
            progress(1)
    by_workload: dict[str, dict[str, str]] = {}
    for k in history.series:
        try:
            sk = SeriesKey.parse(k)
        except ValueError:
            continue
        by_workload.setdefault(sk.workload, {})[sk.resource] = k
    for res in by_workload.values():
        traffic = [k for r, k in res.items() if r not in RESOURCES and not r.endswith("_request") and r != "replicas"]
        if "cpu" in res and traffic:
            cpu, qps = history.series[res["cpu"]], history.series[traffic[0]]
            both = pd.concat([cpu, qps], axis=1).dropna()
            both = both[both.iloc[:, 1] > 0]
            if len(both) >= 10:
                out[res["cpu"]].usage_per_traffic = float(np.median(both.iloc[:, 0] / both.iloc[:, 1]))
                out[res["cpu"]].reasons.append(f"usage per unit of {SeriesKey.parse(traffic[0]).resource} "
                                               f"from {len(both)} aligned samples")
    return out
