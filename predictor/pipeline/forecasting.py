"""Forecast many series: choose a model per series by backtest, calibrate, fit, predict — the
entry point of the forecasting pipeline (`predictor.pipeline`).

`model="auto"` (the default) runs the rolling-origin backtest of `pipeline.selection` on the
given history — cheap baselines, STL, and one global GBM shared by every series — keeps the
eligible candidate with the lowest pinball loss at q0.95 for each series, and shifts its quantiles
by the conformal correction learned on the backtest folds. A named model is fitted as is.

Series are independent: a model that raises on one series falls back to the decaying histogram
for that series alone, and a stored choice whose model needs more history than the series has
(`Forecaster.history_needed`) falls back to the no-backtest default that the history does feed
(`pipeline.fallback`). Either way the forecast's `model` is the model that ran, and its notes say why.
"""
from __future__ import annotations

import logging
from dataclasses import dataclass, replace
from typing import Callable, Iterable, Sequence

import numpy as np
import pandas as pd

from predictor.durations import DAY
from predictor.history import History
from predictor.models import Forecaster
from predictor.models.gbm import GlobalGBM
from predictor.pipeline.batched import batchable, forecast_seasonal_naive
from predictor.pipeline.calibration import apply_shifts
from predictor.pipeline.choice import ChoiceForecaster, make_model, predict_from
from predictor.pipeline.fallback import choose_baseline, fall_back, history_short
from predictor.pipeline.selection import backtest, choose, default_candidates
from predictor.timestamps import grid
from predictor.types import Choice, Forecast

log = logging.getLogger(__name__)

DEFAULT_QUANTILES = (0.5, 0.9, 0.95, 0.99)
STALE_AFTER = pd.Timedelta(days=1)  # a series silent this long before the common origin is stale


@dataclass
class ForecastRequest:
    horizon: pd.Timedelta
    step: pd.Timedelta
    quantiles: Sequence[float] = DEFAULT_QUANTILES
    model: str = "auto"
    origin: pd.Timestamp | None = None  # forecasts start at origin; default: end of the data + step
    folds: int = 3  # backtest days for auto selection and calibration (3: ~860 residuals at 5 min)
    use_global: bool = True  # auto: include the global GBM among the candidates
    # auto: leave out candidates needing more history than this (training: what serving fetches)
    max_history: pd.Timedelta | None = None
    # auto: GlobalGBM keyword arguments (e.g. {"backend": "lightgbm"}); None = the defaults in gbm.py
    global_params: dict | None = None

    @property
    def steps(self) -> int:
        return int(self.horizon / self.step)


def _origin_of(y: pd.Series, req: ForecastRequest) -> pd.Timestamp:
    return req.origin if req.origin is not None else y.index[-1] + req.step


def _predict_with(model: Forecaster, y: pd.Series, req: ForecastRequest, origin: pd.Timestamp) -> np.ndarray:
    return predict_from(model, y, req.step, req.steps, req.quantiles, origin)


def select_series(key: str, y: pd.Series, req: ForecastRequest, origin: pd.Timestamp,
                  global_model: GlobalGBM | None = None, names: tuple[str, ...] | None = None) -> Choice | None:
    """Backtest the candidates (only those in `names` when given) on one series; None when no fold
    fits in its history."""
    cands = default_candidates(req.max_history)
    if names is not None:
        cands = [c for c in cands if c.name in names]
        if not cands:
            raise ValueError(f"none of the candidates {', '.join(names)} fits {req.max_history} of serving history")
    gp = None
    if global_model is not None and (req.max_history is None or global_model.history_needed() <= req.max_history):
        def gp(past: pd.Series, h: int, o: pd.Timestamp) -> np.ndarray:
            return global_model.predict_series(past, h, req.quantiles, origin=o)
    h = min(req.steps, int(DAY / req.step))
    origins, preds, actual, errors = backtest(y, origin, req.step, req.quantiles, cands, req.folds, h, gp)
    if not origins or not preds:
        return None
    try:
        return choose(key, y, req.step, origins, preds, actual, req.quantiles, cands, errors)
    except ValueError:
        return None


def forecast_from_choice(key: str, y: pd.Series, req: ForecastRequest, choice: Choice | None,
                         global_model: GlobalGBM | None = None, version: str = "adhoc",
                         global_values: np.ndarray | None = None) -> Forecast:
    """Fit the chosen model on the whole of y, predict, apply the conformal shifts.
    `global_values`: the global GBM's forecast of this series, when already made in a batch."""
    origin = _origin_of(y, req)
    notes: list[str] = []
    if choice is not None:
        short = history_short(y, req.step, origin, choice)
        if short:
            model, why = choose_baseline(y[y.index < origin], req.step)
            notes.append(f"{short}: fell back to {model.label} ({why})")
            log.warning("series %s: %s; using %s", key, short, model.label)
            values = _predict_with(model, y, req, origin)
            index = grid(origin, req.steps, req.step)
            return Forecast(series=key, index=index, quantiles=tuple(req.quantiles), values=values, model=model.label,
                            version=version, backtest_score=None, notes=notes)
    if choice is None:
        model, why = choose_baseline(y, req.step)
        notes.append(f"no backtest possible; {why}")
        name, shifts = model.label, None
    else:
        name, shifts = choice.model, np.asarray(choice.shifts)
        notes.append(f"{name}{'(' + '+'.join(choice.members) + ')' if choice.members else ''}: {choice.reason}")
    try:
        if choice is None:
            values = _predict_with(model, y, req, origin)
        else:
            values = ChoiceForecaster.of(choice, global_model).predict(y, req.step, req.steps, req.quantiles, origin,
                                                                       global_values)
        label = name
        if shifts is not None and len(shifts) == len(req.quantiles):
            values = apply_shifts(values, shifts, req.quantiles)
    except (ValueError, RuntimeError, np.linalg.LinAlgError) as exc:
        values, label = fall_back(key, y, req.step, req.steps, req.quantiles, origin, name, exc, notes)
    index = grid(origin, req.steps, req.step)
    score = None if choice is None or choice.skill is None else float(choice.skill)
    return Forecast(series=key, index=index, quantiles=tuple(req.quantiles), values=values, model=label,
                    version=version, backtest_score=score, notes=notes)


def forecast_series(key: str, y: pd.Series, req: ForecastRequest) -> Forecast:
    """One series -> one Forecast on the requested grid, with the fallback recorded. In auto mode
    the candidates are the per-series ones (the global GBM needs a fleet: `forecast_history`)."""
    origin = _origin_of(y, req)
    if req.model == "auto":
        return forecast_from_choice(key, y, req, select_series(key, y, req, origin))
    notes: list[str] = []
    try:
        model = make_model(req.model, req.quantiles)
        values = _predict_with(model, y, req, origin)
        label = model.label
    except (ValueError, RuntimeError, np.linalg.LinAlgError) as exc:
        values, label = fall_back(key, y, req.step, req.steps, req.quantiles, origin, req.model, exc, notes)
    index = grid(origin, req.steps, req.step)
    return Forecast(series=key, index=index, quantiles=tuple(req.quantiles), values=values, model=label, notes=notes)


def series_requests(history: History, req: ForecastRequest) -> dict[str, ForecastRequest]:
    """The common origin for every series, except series silent for long, which are forecast from
    their own end rather than extrapolated across the silence."""
    out = {}
    for key, y in history.series.items():
        if req.origin - y.index[-1] > max(req.horizon, STALE_AFTER):
            log.warning("series %s ends at %s, long before %s: forecast from its own end", key, y.index[-1], req.origin)
            out[key] = replace(req, origin=None)
        else:
            out[key] = req
    return out


def fit_global(series: dict[str, pd.Series], req: ForecastRequest, before: pd.Timestamp | None = None,
               params: dict | None = None) -> GlobalGBM | None:
    """The shared GBM on every series (None when none has enough history)."""
    try:
        return GlobalGBM(quantiles=tuple(req.quantiles), **(params or {})).fit_many(series, before=before)
    except ValueError as exc:
        log.info("global GBM not fitted: %s", exc)
        return None


def forecast_history(
    history: History,
    req: ForecastRequest,
    progress: Callable[[int], None] | None = None,
) -> list[Forecast]:
    """Forecast every series of `history` from one common origin (end of the data + step).

    Auto mode fits the global GBM once on data before the first backtest fold — so the same fit
    serves the honest backtest and the forecast — then selects and calibrates per series.
    """
    if req.origin is None:
        req = replace(req, origin=history.end + req.step)
    reqs = series_requests(history, req)
    out = []
    if req.model != "auto":
        # seasonal naive: the series that need no per-series care are forecast as one array
        batch = forecast_seasonal_naive(req.model, history.series, reqs, req.step) if batchable(req.model) else {}
        for key, y in history.series.items():
            out.append(batch.get(key) or forecast_series(key, y, reqs[key]))
            if progress:
                progress(1)
        return out
    gm = None
    if req.use_global:
        gm = fit_global(history.series, req, before=req.origin - req.folds * DAY, params=req.global_params)
    for key, y in history.series.items():
        r = reqs[key]
        origin = _origin_of(y, r)
        choice = select_series(key, y, r, origin, gm)
        out.append(forecast_from_choice(key, y, r, choice, gm))
        if progress:
            progress(1)
    return out


def forecasts_to_frame(forecasts: Iterable[Forecast]) -> pd.DataFrame:
    frames = [f.to_frame() for f in forecasts]
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()
