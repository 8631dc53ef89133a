"""Replay VPA and HPA decisions over a recorded series, from the past only: what the benchmark
scores and what `tidewise replay vpa|hpa` will print.

The forecasts follow the serving design: once a day (the registry's refit) the model of each series
is chosen by `predictor`'s `auto` selection; every hour (the serving loop) that model is refitted
statelessly on the history so far. Models that are too costly to refit hourly (the gradient-boosted
ones) are served from the day's forecast instead.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from functools import partial
from typing import Callable, Protocol

import numpy as np
import pandas as pd

from autoscaler.logic.hpa import (Stabilizer, check_replica_scale, floor_demand, interpolate_quantile, level_ratio,
                                  predictive_min_replicas, simulate_reactive_hpa)
from autoscaler.logic.choice_by_cost import describe_choice
from autoscaler.logic.vpa import (apply_updater, limit_change, pod_peaks_range, recommend_resource,
                                  vpa_default_request)
from autoscaler.settings import GuardrailSettings, HpaSettings, VpaSettings
from predictor.durations import to_timedelta
from predictor.pipeline.forecasting import ForecastRequest, forecast_history
from predictor.history import History
from predictor.types import Forecast
from studies.replay.choice import ReplayChooser

STEP = pd.Timedelta("5min")
MINUTE = pd.Timedelta("1min")
CHEAP = {"seasonal_naive_daily", "seasonal_naive_weekly", "seasonal_median", "decaying_histogram"}
QUANTILES = (0.5, 0.9, 0.95, 0.99)


@dataclass
class DailyChoiceForecaster:
    """forecast(y, origin, horizon) -> Forecast, with the per-series model chosen once per day."""

    key: str = "series"
    lookback: pd.Timedelta = pd.Timedelta("21D")  # history handed to the models (3 weeks: weekly naive)
    choose: Callable[[History, ForecastRequest], list[Forecast]] = forecast_history
    model: str = "auto"  # or one model name, refitted at every call (cheap models only)
    day_model: dict[pd.Timestamp, tuple[str, Forecast]] = field(default_factory=dict)

    def _history(self, y: pd.Series, origin: pd.Timestamp) -> History:
        past = y[(y.index < origin) & (y.index >= origin - self.lookback)]
        past = past.loc[past.first_valid_index(): past.last_valid_index()] if past.notna().any() else past
        return History({self.key: past}, STEP)

    def forecast(self, y: pd.Series, origin: pd.Timestamp, horizon: pd.Timedelta) -> Forecast:
        """The forecast from `origin` (memoised: several policies replay the same series)."""
        memo = self.__dict__.setdefault("_memo", {})
        if (origin, horizon) not in memo:
            memo[(origin, horizon)] = self._forecast(y, origin, horizon)
        return memo[(origin, horizon)]

    def _forecast(self, y: pd.Series, origin: pd.Timestamp, horizon: pd.Timedelta) -> Forecast:
        if self.model != "auto":
            return forecast_history(self._history(y, origin), ForecastRequest(horizon, STEP, QUANTILES, self.model, origin))[0]
        day = origin.floor("D")
        if day not in self.day_model:
            req = ForecastRequest(pd.Timedelta("1D") + horizon, STEP, QUANTILES, "auto", day)
            fc = self.choose(self._history(y, day), req)[0]
            self.day_model[day] = (fc.model, fc)
        model, day_fc = self.day_model[day]
        if model in CHEAP:
            req = ForecastRequest(horizon, STEP, QUANTILES, model, origin)
            return forecast_history(self._history(y, origin), req)[0]
        start = int((origin - day) / STEP)
        n = int(math.ceil(horizon / STEP))
        return Forecast(day_fc.series, day_fc.index[start: start + n], day_fc.quantiles,
                        day_fc.values[start: start + n], day_fc.model, day_fc.version)


class RequestSource(Protocol):
    """A recommender that gives the raw request itself (`studies.replay.hour_peak.HourPeakRequests`)."""

    @property
    def label(self) -> str: ...

    @property
    def quantile(self) -> float: ...

    def request_at(self, y: pd.Series, t: pd.Timestamp) -> float | None: ...

    def warm_up(self, y: pd.Series, start: pd.Timestamp) -> None: ...

    def why(self) -> str: ...


def _memory_floors(y: pd.Series, oom: pd.Series | None, t: pd.Timestamp, window: pd.Timedelta
                   ) -> tuple[float | None, float | None]:
    """(peak of the last `window`, usage at its last OOM kill) before `t`, for the memory floors."""
    sel = (y.index < t) & (y.index >= t - window)
    past = y[sel]
    peak = float(past.max()) if past.notna().any() else None
    if oom is None:
        return peak, None
    kills = past[oom.reindex(past.index).fillna(0).to_numpy() > 0].dropna()
    return peak, (float(kills.iloc[-1]) if len(kills) else None)


def replay_vpa_decisions(y: pd.Series, start: pd.Timestamp, end: pd.Timestamp, settings: VpaSettings,
                         forecaster: DailyChoiceForecaster | None = None, every: pd.Timedelta = pd.Timedelta("1h"),
                         guard: GuardrailSettings | None = None, resource: str = "cpu",
                         oom: pd.Series | None = None, requests: RequestSource | None = None) -> pd.DataFrame:
    """One decision every `every` in [start, end), each from the samples before it: the serving
    loop's VPA logic (`recommend_resource`: forecast q over the next `window` + margin, bounds, floors,
    memory never below the last day's peak nor, after an OOM kill flagged in `oom`, below the stock
    bump of the usage at the kill), applied by the updater's rule (`apply_updater`: the request in
    force moves to the target only when it leaves [lower, upper], a decrease after `min_dwell`) and
    the change guardrail. Columns timestamp, target (the request IN FORCE: what is scored),
    lower_bound, upper_bound, recommended (the recommendation's target), reason — in the series'
    own units (cores for cpu, bytes for memory). With `settings.choose_by_cost` the target is the
    cheapest candidate's on the series' recent past (`studies.replay.choice`), the reason says which.
    With `requests` (the hour-peak model at the series' violation-budget level) its request is the
    raw target wherever it has one, the forecast's elsewhere; floors, bounds and guardrails alike."""
    forecaster = forecaster or DailyChoiceForecaster()
    guard = guard or GuardrailSettings()
    window, safe = to_timedelta(settings.window), to_timedelta(settings.safe_window)
    dwell, peak_window = to_timedelta(settings.min_dwell), to_timedelta(settings.memory_peak_window)
    peaks_window = to_timedelta(guard.peaks_window) if guard.peaks_window else None
    unit = 1000.0 if resource == "cpu" else 1.0
    rows = []
    in_force: int | None = None
    since: pd.Timestamp | None = None
    horizon = max(every, window, safe)
    chooser = ReplayChooser(forecaster.key, settings, int(window / STEP)) if settings.choose_by_cost else None
    if chooser is not None:
        chooser.warm_up(y, start, forecaster, every, horizon)
    if requests is not None:
        requests.warm_up(y, start)
    for t in pd.date_range(start, end, freq=every, inclusive="left"):
        fc = forecaster.forecast(y, t, horizon)
        peak, at_oom = _memory_floors(y, oom, t, peak_window) if resource == "memory" else (None, None)
        cand, chose = chooser.pick(y, t, fc) if chooser is not None else (None, None)
        own = requests.request_at(y, t) if requests is not None and cand is None else None
        raw = cand.value if cand else own
        rec = recommend_resource(fc, resource, 1, settings, int(window / STEP), max(1, int(safe / STEP)),
                                 memory_peak=peak, oom_memory=at_oom, raw_total=raw,
                                 model_label=requests.label if own is not None and requests is not None else None)
        if chose:
            describe_choice(rec, cand, chose)
        elif own is not None and requests is not None:
            rec.reason.quantile, rec.reason.margin = requests.quantile, 0.0
            rec.reason.steps.insert(0, requests.why())
        wanted, why = (apply_updater(in_force, rec, None if since is None else t - since, dwell)
                       if settings.follow_bounds else (rec.target, None))
        if wanted != in_force:
            seen = partial(pod_peaks_range, y, t, peaks_window, 1, resource) if peaks_window else None
            wanted, limited = limit_change(in_force, wanted, guard.max_decrease_ratio, guard.max_increase_ratio,
                                           rec.floor, seen)
            why = "; ".join(w for w in (why, limited) if w)
            in_force, since = wanted, t
        reason = rec.reason.summary() + (f"; {why}" if why else "")
        rows.append((t, in_force / unit, min(rec.lower, in_force) / unit, max(rec.upper, in_force) / unit,
                     rec.target / unit, reason))
    return pd.DataFrame(rows, columns=["timestamp", "target", "lower_bound", "upper_bound", "recommended", "reason"])


def replay_vpa(y: pd.Series, start: pd.Timestamp, end: pd.Timestamp, settings: VpaSettings,
               forecaster: DailyChoiceForecaster | None = None, every: pd.Timedelta = pd.Timedelta("1h"),
               guard: GuardrailSettings | None = None, resource: str = "cpu") -> pd.Series:
    """The request in force at each step of [start, end) (see `replay_vpa_decisions`)."""
    d = replay_vpa_decisions(y, start, end, settings, forecaster, every, guard, resource)
    return d.set_index("timestamp")["target"].reindex(y[start:end].index, method="ffill")


def replay_vpa_default(y: pd.Series, start: pd.Timestamp, end: pd.Timestamp,
                       every: pd.Timedelta = pd.Timedelta("1h")) -> pd.Series:
    """The stock VPA recommender's target (decaying p90 + 15%, 8 days), recomputed every hour."""
    out = {}
    for t in pd.date_range(start, end, freq=every, inclusive="left"):
        h = y[(y.index < t) & (y.index >= t - pd.Timedelta("8D"))].dropna()
        out[t] = vpa_default_request(h.to_numpy(), (t - h.index).total_seconds().to_numpy() / 3600.0)
    return pd.Series(out).reindex(y[start:end].index, method="ffill")


def replay_hpa(y: pd.Series, start: pd.Timestamp, end: pd.Timestamp, per: float, settings: HpaSettings,
               target_utilization: float = 0.7, forecaster: DailyChoiceForecaster | None = None,
               every: pd.Timedelta = pd.Timedelta("1h"), tolerance: float = 0.1,
               stabilization_minutes: int = 5) -> tuple[np.ndarray, np.ndarray, np.ndarray, int]:
    """Predictive floor every minute (on 5-minute data) from forecasts refreshed every hour, the HPA's own rule above
    it (`simulate_reactive_hpa` with `tolerance` and `stabilization_minutes`; start-up = the
    settings' `startup`). Returns (demand per minute, floor per minute, serving replicas per minute, r0)."""
    forecaster = forecaster or DailyChoiceForecaster()
    check_replica_scale(y.to_numpy(dtype=float), per * target_utilization)
    lead = to_timedelta(settings.startup)
    look = to_timedelta(settings.look_ahead)
    d1 = y.resample("1min").ffill()[start:end]
    minutes = d1.index
    floor = np.ones(len(minutes), dtype=int)
    stab = Stabilizer(to_timedelta(settings.stabilization))
    stab.band.size = max(1, settings.band_steps)
    capacity = per * target_utilization * (1 + settings.floor_tolerance)
    for t in pd.date_range(start, end, freq=every, inclusive="left"):
        fc = forecaster.forecast(y, t, every + lead + 2 * STEP)
        q = interpolate_quantile(fc.values, fc.quantiles, settings.quantile)
        q = np.where(np.isfinite(q), q, np.nanmax(q) if np.isfinite(q).any() else 0.0)
        q50 = fc.quantile(0.5)
        seen = y.reindex(fc.index).to_numpy()  # observations at the forecast's steps (known once past)
        for k in range(int(every / STEP)):
            at = t + k * STEP
            ratio = 1.0
            if settings.level_steps and k:
                a = max(0, k - settings.level_steps)
                ratio = level_ratio(seen[a:k], q50[a:k])
            factor = None
            if settings.band_steps:  # score the step just seen, predict the one starting now
                stab.band.observe(at - STEP, float(seen[k - 1]) if k else float(y.get(at - STEP, np.nan)))
                stab.band.predict(at, float(q50[k] * ratio))
                factor = stab.band.factor(settings.quantile, settings.band_min_steps)
            demand = floor_demand(q[k:], q50[k:], ratio, factor)
            # serve decides every minute on the same 5-minute data: so does the replay
            first = int(minutes.searchsorted(at))
            for i in range(first, min(first + int(STEP / MINUTE), len(minutes))):
                wish, _ = predictive_min_replicas(demand, STEP, lead, look, capacity, since=minutes[i] - at)
                floor[i] = stab.apply(minutes[i], wish)
    r0 = max(1, int(np.ceil(y[y.index < start].iloc[-12:].mean() / (per * target_utilization))))
    serving = simulate_reactive_hpa(d1.to_numpy(), per, r0, target_utilization=target_utilization,
                                    tolerance=tolerance, stabilization_minutes=stabilization_minutes,
                                    startup_minutes=int(np.ceil(lead / pd.Timedelta("1min"))), min_replicas=floor)
    return d1.to_numpy(), floor, serving, r0
