"""The fleet's decision-time models in a training run (issue 12, item 1): fitted, backtested on
held-out days against the day-ahead forecast for the same targets, and handed to the registry.

Two models, one per decision: "vpa" (the peak of the next hour) and "hpa" (the demand from now
through a start-up time and one loop interval ahead). Each is backtested like the day-ahead models:
fitted on the history before the last `folds` days, then those days' origins are forecast from
their past only (calibrated online per series, as serve does) and scored by pinball loss per
quantile (scaled by each series' p95, so series of any unit average) and coverage. The day-ahead
forecast of the same target is each series' stored choice run from each held-out day's start, the
maximum of each quantile over the target's window. The stored models are then refitted on all of
the history (the last `train_days`).
"""
from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

import numpy as np
import pandas as pd

from predictor.pipeline.calibration import PEAK_LEVELS, apply_shifts, pinball
from predictor.pipeline.decision import calibrated_series, hpa_span
from predictor.durations import DAY
from predictor.features.decision import next_max
from predictor.history import History
from predictor.pipeline.choice import ChoiceForecaster
from predictor.models.decision_time import DEFAULT_BACKEND, DecisionTimeGBM
from predictor.models.gbm import GlobalGBM

log = logging.getLogger(__name__)
CONTEXT = pd.Timedelta("9D")  # history a held-out day's features read (a week ago + a day of level)


@dataclass
class DecisionTimeSettings:
    """What `tidewise train` fits for decision time (on unless `--no-decision-time`)."""

    enabled: bool = True
    backend: str = DEFAULT_BACKEND  # lightgbm (the default) or hgb (scikit-learn)
    vpa_window: pd.Timedelta = pd.Timedelta("1h")  # VPA target: the peak of the next hour
    hpa_startup: pd.Timedelta = pd.Timedelta("2m")  # serve's hpa.startup (the HPA target's lead)
    hpa_look: pd.Timedelta = pd.Timedelta("1m")  # serve's hpa.look_ahead (one loop interval)
    train_days: pd.Timedelta = pd.Timedelta("28D")  # history per series a fit reads (4 weekly cycles)
    backtest_series: int = 100  # series scored in the backtest (the first by name; bounds its cost)
    params: dict[str, Any] = field(default_factory=dict)  # DecisionTimeGBM keyword arguments (defaults there)

    def model(self, quantiles: Sequence[float], span: int, kind: str = "hpa") -> DecisionTimeGBM:
        """HPA: the recent-samples features at the training quantiles. VPA (issue 24): the hour-peak
        features, at the training quantiles and the levels a violation budget walks in."""
        if kind == "vpa":
            levels = tuple(sorted(set(map(float, quantiles)) | set(PEAK_LEVELS)))
            return DecisionTimeGBM(levels, span, self.backend, features="hour_peak", **self.params)
        return DecisionTimeGBM(tuple(quantiles), span, self.backend, **self.params)

    def spans(self, step: pd.Timedelta) -> dict[str, int]:
        return {"vpa": max(1, int(self.vpa_window // step)), "hpa": hpa_span(self.hpa_startup, self.hpa_look, step)}


def fit_decision_models(history: History, quantiles: Sequence[float], folds: int, settings: DecisionTimeSettings,
                        entries: Mapping[str, Mapping[str, Any]], global_backtest: GlobalGBM | None
                        ) -> tuple[dict[str, DecisionTimeGBM], dict[str, Any]]:
    """(kind -> model fitted on all history, kind -> its description and backtest for the manifest).
    A kind whose history is too short is left out, and the summary says why."""
    models: dict[str, DecisionTimeGBM] = {}
    summary: dict[str, Any] = {}
    step = history.step
    holdout = history.end + step - folds * DAY
    recent = _tail(history.series, history.end + step, settings.train_days)
    for kind, span in settings.spans(step).items():
        info: dict[str, Any] = {"span_steps": span, "target": _target_text(kind, span, step),
                                "backend": settings.backend, "quantiles": [float(q) for q in quantiles]}
        try:
            info["backtest"] = backtest(history, quantiles, span, settings, holdout, entries, global_backtest, kind)
        except ValueError as exc:
            info["backtest"] = {"skipped": str(exc)}
        t0 = time.process_time()
        try:
            models[kind] = settings.model(quantiles, span, kind).fit_many(recent, step)
        except ValueError as exc:
            info["skipped"] = str(exc)
            log.warning("no decision-time %s model: %s", kind, exc)
            summary[kind] = info
            continue
        info.update(rows=models[kind].n_rows_, series=models[kind].n_series_,
                    fit_cpu_seconds=round(time.process_time() - t0, 2))
        summary[kind] = info
    return models, summary


def _target_text(kind: str, span: int, step: pd.Timedelta) -> str:
    minutes = int((span * step).total_seconds() // 60)
    return f"peak of the next {minutes // 60}h" if minutes % 60 == 0 else f"peak of the next {minutes}m"


def _tail(series: Mapping[str, pd.Series], before: pd.Timestamp, span: pd.Timedelta) -> dict[str, pd.Series]:
    out = {k: y[(y.index >= before - span) & (y.index < before)] for k, y in series.items()}
    return {k: y for k, y in out.items() if len(y)}


def backtest(history: History, quantiles: Sequence[float], span: int, settings: DecisionTimeSettings,
             holdout: pd.Timestamp, entries: Mapping[str, Mapping[str, Any]],
             global_backtest: GlobalGBM | None, kind: str = "hpa") -> dict[str, Any]:
    """Pinball per quantile and coverage on the origins from `holdout` on, of the decision-time
    model fitted before `holdout` and of the day-ahead forecast, at the training `quantiles` (the
    VPA model's other levels are not scored); ValueError when either cannot run."""
    step = history.step
    model = settings.model(quantiles, span, kind).fit_many(_tail(history.series, holdout, settings.train_days), step,
                                                           holdout)
    cols = [list(model.quantiles).index(float(q)) for q in quantiles]
    keys = sorted(k for k, y in history.series.items() if y.index[-1] >= holdout)[: settings.backtest_series]
    scores: dict[str, list[np.ndarray]] = {"decision_time": [], "day_ahead": []}
    cover: dict[str, list[np.ndarray]] = {"decision_time": [], "day_ahead": []}
    for key in keys:
        y = history.series[key].asfreq(step)
        past = y[y.index < holdout].dropna()
        scale = float(np.nanquantile(np.abs(past.to_numpy()), 0.95)) if len(past) else 0.0
        if not scale > 0:
            continue
        win = y[y.index >= holdout - CONTEXT]
        first = int(win.index.searchsorted(holdout))
        actual = next_max(win, span)[first:]
        dt = calibrated_series(model, win, start=first)[first:, cols]
        da = day_ahead_targets(key, y, holdout, span, quantiles, entries.get(key), global_backtest)
        if da is None:
            continue
        for name, f in (("decision_time", dt), ("day_ahead", da[: len(actual)])):
            ok = np.isfinite(actual) & np.all(np.isfinite(f), axis=1)
            if ok.sum() == 0:
                break
            scores[name].append(pinball(actual[ok], f[ok], quantiles) / scale)
            cover[name].append(np.mean(actual[ok, None] <= f[ok], axis=0))
    n = min(len(scores["decision_time"]), len(scores["day_ahead"]))
    if n == 0:
        raise ValueError("no series has a held-out day both forecasts could score")
    return {"series": n, "holdout_start": holdout.isoformat(), "origins_from": "every step of the held-out days",
            "pinball_per_p95": {k: _mean(v[:n]) for k, v in scores.items()},
            "coverage": {k: _mean(v[:n]) for k, v in cover.items()}}


def _mean(rows: list[np.ndarray]) -> list[float]:
    return [round(float(x), 5) for x in np.nanmean(np.vstack(rows), axis=0)]


def day_ahead_targets(key: str, y: pd.Series, holdout: pd.Timestamp, span: int, quantiles: Sequence[float],
                      entry: Mapping[str, Any] | None, gm: GlobalGBM | None) -> np.ndarray | None:
    """The day-ahead forecast of the decision target at every origin from `holdout` to y's end:
    the series' stored choice run from the start of each held-out day (with its conformal shifts), each
    quantile's maximum over the `span` steps from the origin. None when the choice cannot run."""
    if entry is None:
        return None
    step = y.index.freq or (y.index[1] - y.index[0])
    per_day = int(DAY / step)
    runner = ChoiceForecaster(str(entry.get("model")), entry.get("members") or (), gm)
    shifts = np.asarray(entry.get("shifts") or np.zeros(len(quantiles)), dtype=float)
    rows = []
    for day in pd.date_range(holdout, y.index[-1], freq=DAY):
        past = y[y.index < day].dropna()
        try:
            f = runner.predict(past, step, per_day + span, quantiles, day)
        except (ValueError, RuntimeError, np.linalg.LinAlgError) as exc:
            log.info("decision-time backtest: day-ahead %s for %s failed (%s)", entry.get("model"), key, exc)
            return None
        f = apply_shifts(f, shifts, quantiles)
        peak = pd.DataFrame(f).rolling(span, min_periods=span).max().shift(-(span - 1)).to_numpy()
        rows.append(peak[:per_day])
    return np.vstack(rows) if rows else None


def summary_lines(summary: Mapping[str, Any]) -> list[str]:
    """One line per decision-time model for the command line: its backtest against the day-ahead
    forecast of the same target (pinball per quantile / series p95, coverage), or why it is missing."""
    lines = []
    for kind, info in summary.items():
        head = f"decision-time {kind} ({info.get('target')}, {info.get('backend')})"
        if "skipped" in info:
            lines.append(f"{head}: not fitted ({info['skipped']})")
            continue
        bt = info.get("backtest") or {}
        if "pinball_per_p95" not in bt:
            lines.append(f"{head}: fitted on {info.get('rows')} rows; no backtest ({bt.get('skipped')})")
            continue
        qs = "/".join(f"{q:g}" for q in info["quantiles"])
        pb, cv = bt["pinball_per_p95"], bt["coverage"]

        def fmt(v: list[float]) -> str:
            return " ".join(f"{x:.3f}" for x in v)
        lines.append(f"{head}: held-out pinball q{qs} {fmt(pb['decision_time'])} vs day-ahead "
                     f"{fmt(pb['day_ahead'])}; coverage {fmt(cv['decision_time'])} vs {fmt(cv['day_ahead'])} "
                     f"({bt['series']} series)")
    return lines
