"""Replay every series of an input (`tidewise replay vpa|hpa`): Tidewise's decisions from the past
only, the reference's on the same data, the decisions table and the report's plots.

The decisions are `studies.replay.decisions` (the serving loop's logic in `autoscaler.logic`);
this module only fans out over series and shapes the results.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, cast

import pandas as pd

from autoscaler.logic.hpa import TooManyReplicas, check_replica_scale, simulate_reactive_hpa
from autoscaler.settings import HpaSettings, VpaSettings
from contracts.errors import InputError
from contracts.quantity import AbsurdScale
from studies.replay.decision_time import BACKEND, DecisionTimeForecaster, DecisionTimeTrainer, hpa_span
from studies.replay.decisions import STEP, DailyChoiceForecaster, replay_hpa, replay_vpa_decisions, replay_vpa_default
from studies.replay.day_plan import replay_restart
from studies.replay.hour_peak import HourPeakRequests, hour_peak_trainer
from studies.replay.hpa_pair import keep_hpa_scale_point
from studies.replay.inputs import ReplayInput
from studies.replay.report import MAX_PLOTS, lines_figure, render
from reports.pages import UNITS, figure, figure_png
from studies.replay.scores import request_in_force
from studies.replay.tradeoff import Curves, hpa_series_curves, mean_curves, plot_tradeoff, vpa_series_curves

MINUTE = pd.Timedelta("1min")
VPA_COLUMNS = ["series", "timestamp", "target", "lower_bound", "upper_bound"]
HPA_COLUMNS = ["series", "timestamp", "replicas"]
Progress = Callable[[str, int], Any]  # tidewise.progress.progress: a context manager yielding advance(n)


@dataclass
class ReplaySettings:
    """What one replay runs: the kind, the model, and each kind's knobs (as the command line gives them)."""

    kind: str  # vpa or hpa
    model: str = "auto"  # auto (chosen per series each UTC midnight) or one cheap model name
    every: pd.Timedelta = pd.Timedelta("1h")  # VPA decision interval
    target_utilization: float = 0.7  # HPA
    tolerance: float = 0.1  # HPA
    startup: pd.Timedelta = pd.Timedelta("2m")  # HPA: a replica serves this long after it is asked for
    stabilization: pd.Timedelta = pd.Timedelta("5m")  # HPA scale-down stabilisation window
    hpa: HpaSettings = field(default_factory=HpaSettings)
    decision_model: str | None = None  # opt-in: gbm or lightgbm decision-time forecasts (decision_time.py)
    # VPA: the hourly target applied every hour unless --hold sets window and follow_bounds
    vpa: VpaSettings = field(default_factory=lambda: VpaSettings(window="1h"))
    resize: str = "in-place"  # VPA regime: in-place (every `every`) or restart (day_plan.py)
    max_changes: int = 3  # restart: request changes a UTC day at most
    hpa_pair: tuple[float, float, float] | None = None  # VPA: (U, LO, HI) of an HPA on CPU utilisation

    @property
    def stabilization_minutes(self) -> int:
        return max(1, int(self.stabilization / MINUTE))


def check_replicas(data: ReplayInput, target_utilization: float, path: str) -> None:
    """replay hpa: refuse, before any work, a series whose replica count would pass Kubernetes' int32
    (a unit mistake in value or per_replica). The values' own units are checked as they are read
    (`predictor.value_scale`, through `validate_long`)."""
    for key, y in data.history.series.items():
        per = data.per_replica[key]
        try:
            check_replica_scale(y.to_numpy(dtype=float), per * target_utilization,
                                per_replica_text=f"(per_replica {per:g} x target utilisation {target_utilization:g})")
        except AbsurdScale as exc:
            raise InputError(f"input {path}: series {key!r}: {exc}") from None


def resource_of(key: str) -> str:
    """memory for a series id ending in /memory, cpu for the rest (what replay vpa rounds by)."""
    return "memory" if key.rsplit("/", 1)[-1] == "memory" else "cpu"


def series_forecaster(key: str, s: ReplaySettings, trainer: DecisionTimeTrainer | None) -> DailyChoiceForecaster:
    """HPA's forecaster: the day-ahead one, or the decision-time one falling back to it (typed as the
    day-ahead one: the decision functions read only `.forecast(y, origin, horizon)`)."""
    fc = DailyChoiceForecaster(key=key, model=s.model)
    if trainer is None:
        return fc
    return cast(DailyChoiceForecaster, DecisionTimeForecaster(key, trainer, fc))


def replay_hpa_series(key: str, y: pd.Series, data: ReplayInput, s: ReplaySettings, path: str,
                      trainer: DecisionTimeTrainer | None = None) -> tuple[dict[str, Any], pd.DataFrame]:
    """Tidewise's serving replicas per minute and the reactive HPA's, on one series (decision-time
    forecasts are asked every step: they condition on the latest sample)."""
    start, end, per = data.start[key], data.end[key], data.per_replica[key]
    fc = series_forecaster(key, s, trainer)
    every = STEP if trainer is not None else pd.Timedelta("1h")
    try:
        demand, floor, serving, r0 = replay_hpa(y, start, end, per, s.hpa, s.target_utilization, fc, every,
                                                tolerance=s.tolerance, stabilization_minutes=s.stabilization_minutes)
    except TooManyReplicas as exc:
        raise InputError(f"input {path}: series {key!r}: {exc}") from None
    minutes = y.resample("1min").ffill()[start:end].index
    reactive = simulate_reactive_hpa(
        demand, per, r0, target_utilization=s.target_utilization, tolerance=s.tolerance,
        stabilization_minutes=s.stabilization_minutes, startup_minutes=int(-(-s.startup // MINUTE)))
    result = {"minutes": minutes, "demand": demand, "floor": floor, "serving": serving, "reference": reactive,
              "per": per, "before": y[y.index < start].iloc[-12:]}
    return result, pd.DataFrame({"series": key, "timestamp": minutes, "replicas": serving.astype(int)})


def replay_vpa_series(key: str, y: pd.Series, data: ReplayInput, s: ReplaySettings,
                      trainer: DecisionTimeTrainer | None = None) -> tuple[dict[str, Any], pd.DataFrame]:
    """Tidewise's VPA decisions every `s.every` and the stock VPA's request, on one series: the
    hour-peak model's request at the series' budget level where `trainer` is given (the default),
    the day-ahead forecast's elsewhere and for its bounds."""
    start, end = data.start[key], data.end[key]
    resource = resource_of(key)
    if s.resize == "restart":
        dec = replay_restart(y, start, end, s.vpa, s.max_changes, s.every, resource)
    else:
        fc = DailyChoiceForecaster(key=key, model=s.model)
        requests = HourPeakRequests(key, trainer, s.vpa.violation_budget, s.every,
                                    rule_candidate=s.vpa.rule_candidate) if trainer is not None else None
        dec = replay_vpa_decisions(y, start, end, s.vpa, fc, s.every, resource=resource, oom=data.oom.get(key),
                                   requests=requests)
    if s.hpa_pair is not None and resource == "cpu":
        dec = keep_hpa_scale_point(dec, *s.hpa_pair)
    use = y[(y.index >= start) & (y.index < end)]
    result = {"usage": use, "decisions": dec, "reference": replay_vpa_default(y, start, end, s.every).reindex(use.index),
              "history": y[y.index < end], "start": start, "end": end, "budget": s.vpa.violation_budget}
    return result, dec.drop(columns="reason").assign(series=key)


def replay_all(data: ReplayInput, s: ReplaySettings, path: str, progress: Progress
               ) -> tuple[dict[str, dict[str, Any]], pd.DataFrame]:
    """(per-series results for scoring and plotting, the decisions table to write)."""
    result: dict[str, dict[str, Any]] = {}
    parts = []
    trainer = None
    if s.decision_model and s.kind == "hpa":
        trainer = DecisionTimeTrainer(data.history.series, hpa_span(s.startup), BACKEND[s.decision_model])
    elif s.decision_model and s.resize == "in-place":
        trainer = hour_peak_trainer(dict(data.history.series), s.every, BACKEND[s.decision_model])
    with progress(f"replaying {s.kind}", len(data.history.series)) as advance:
        if trainer is not None and hasattr(advance, "note"):  # a fleet refit takes a while: say so
            trainer.on_fit = lambda day, ok: advance.note(f"fleet model for {day:%Y-%m-%d} "
                                                          + ("fitted" if ok else "not fitted (too little past)"))
        for key, y in data.history.series.items():
            if s.kind == "hpa":
                result[key], part = replay_hpa_series(key, y, data, s, path, trainer)
            else:
                result[key], part = replay_vpa_series(key, y, data, s, trainer)
            parts.append(part)
            advance(1)
    cols = HPA_COLUMNS if s.kind == "hpa" else VPA_COLUMNS + (["hpa_target"] if s.hpa_pair else [])
    out = pd.concat(parts, ignore_index=True)[cols] if parts else pd.DataFrame(columns=cols)
    return result, out


def series_plot(key: str, r: dict[str, Any], s: ReplaySettings) -> str:
    """One series' plot: usage and both requests (VPA), or needed and serving replicas (HPA)."""
    return figure_png(series_figure(key, r, s))


def series_figure(key: str, r: dict[str, Any], s: ReplaySettings) -> Any:
    """`series_plot`'s figure. Its three lines differ in colour and in style (the HPA's two replica
    lines often coincide: a dashed red over a wide solid blue leaves both visible)."""
    if s.kind == "vpa":
        lines = [("usage", r["usage"], {"color": "#444", "lw": 0.7}),
                 ("tidewise request", request_in_force(r), {"color": "#1f77b4", "lw": 1.2}),
                 ("stock VPA request", r["reference"], {"color": "#d62728", "lw": 1.0, "ls": "--"})]
        resource = resource_of(key)
        return lines_figure(key, lines, UNITS[resource], f"{resource} usage and requests")
    idx = r["minutes"]
    need = pd.Series(r["demand"], index=idx) / (r["per"] * s.target_utilization)
    lines = [("replicas needed: demand / (per replica x target)", need, {"color": "#555555", "lw": 0.9, "ls": ":"}),
             ("tidewise serving replicas", pd.Series(r["serving"], index=idx),
              {"color": "#1f77b4", "lw": 2.2, "ls": "-", "drawstyle": "steps-post", "alpha": 0.8}),
             ("reactive HPA replicas", pd.Series(r["reference"], index=idx),
              {"color": "#d62728", "lw": 1.1, "ls": "--", "drawstyle": "steps-post"})]
    return lines_figure(key, lines, "replicas")


def tradeoff_curves(s: ReplaySettings, result: dict[str, dict[str, Any]]) -> Curves:
    """The reference's trade-off curve, perfect foresight and Tidewise's point, averaged over the
    replayed series (`studies.replay.tradeoff`)."""
    if s.kind == "vpa":
        return mean_curves([vpa_series_curves(r["history"], r["start"], r["end"], r["usage"], request_in_force(r))
                            for r in result.values()])
    startup = int(-(-s.startup // MINUTE))
    return mean_curves([hpa_series_curves(r, r["before"], s.target_utilization, s.tolerance, s.stabilization_minutes,
                                          startup) for r in result.values()])


def tradeoff_png(curves: Curves, kind: str) -> str:
    """The trade-off figure as base64 PNG."""
    fig, ax = figure(5.4)
    plot_tradeoff(ax, curves, "Tidewise against the " + ("stock VPA's curve" if kind == "vpa" else "reactive HPA's curve")
                  + " (mean over series; lower-left is better)")
    return figure_png(fig)


def write_report(path: str, s: ReplaySettings, result: dict[str, dict[str, Any]], summary: list[dict[str, Any]],
                 per_series: list[dict[str, Any]], input_path: str, progress: Progress) -> None:
    """The HTML report: scores and the trade-off figure, then one plot for each of the first
    MAX_PLOTS series."""
    tradeoff = tradeoff_png(tradeoff_curves(s, result), s.kind) if result else None
    plots = []
    keys = list(result)[:MAX_PLOTS]
    with progress("plotting report", len(keys)) as advance:
        for key in keys:
            plots.append((key, series_plot(key, result[key], s)))
            advance(1)
    meta = (f"{len(result)} series from {input_path}; the last 7 days are plotted; each decision uses only "
            "data before its time (model chosen each UTC midnight, refitted hourly).")
    render(path, f"Tidewise replay — {s.kind.upper()}", summary, per_series, plots, meta, total=len(result),
           tradeoff=tradeoff, kind=s.kind)
