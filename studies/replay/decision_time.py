"""Decision-time forecasts in replay (`tidewise replay --decision-model lightgbm|gbm`, the default of both kinds).

`DecisionTimeTrainer` fits one global `DecisionTimeGBM` per UTC day on every replayed series'
samples before that day (as the registry's daily refit would; no look-ahead), and
`DecisionTimeForecaster` serves one series from it with per-series adaptive-conformal calibration.
Its `forecast(y, origin, horizon)` returns a `Forecast` whose quantile columns are the
decision-shaped quantiles (of the peak of the next `span` steps from `origin`) repeated over the
horizon, so the existing VPA and HPA decision code reads it unchanged.
"""
from __future__ import annotations

import logging
import math
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping

import numpy as np
import pandas as pd

from predictor.pipeline.decision import ActualAt, DecisionWalk, actual_from_history, overlay
from predictor.pipeline.decision import hpa_span as decision_hpa_span
from predictor.models.decision_time import DEFAULT_BACKEND, DecisionTimeGBM
from predictor.types import Forecast
from studies.replay.decisions import QUANTILES, STEP, DailyChoiceForecaster

log = logging.getLogger(__name__)
BACKEND = {"gbm": "hgb", "lightgbm": "lightgbm"}  # --decision-model -> DecisionTimeGBM backend
# --decision-model when not given, per kind (serve's loop.decision_time_hpa / _vpa defaults). Full dev
# replay (BENCHMARKS.md, replay section): HPA over-target 0.49x the reactive HPA's at equal replicas and
# 1.23x replicas (day-ahead 0.62 at 1.31x): better on both. VPA (issue 24): the hour-peak model at each
# series' violation-budget level (studies/replay/hour_peak.py), which closes more of the gap to
# foresight than the day-ahead forecast and the seasonal rule (BENCHMARKS.md, tidal requests). Both on
# LightGBM since 2026-12-07 (predictor.models.decision_time.DEFAULT_BACKEND: why)
FLAG = {backend: flag for flag, backend in BACKEND.items()}  # DecisionTimeGBM backend -> --decision-model
DEFAULT_MODEL: dict[str, str | None] = {"hpa": FLAG[DEFAULT_BACKEND], "vpa": FLAG[DEFAULT_BACKEND]}


def decision_model_for(kind: str, flag: str | None) -> str | None:
    """The decision-time backend flag a replay runs (None: the day-ahead forecast)."""
    if flag is None:
        return DEFAULT_MODEL[kind]
    return None if flag == "day-ahead" else flag
EPOCH = pd.Timestamp("1970-01-01", tz="UTC")  # refit blocks count days from here
TRAIN_DAYS = pd.Timedelta("28D")  # history a daily fit reads per series (4 weekly cycles)
# history one day's predictions read, per feature set (a week ago + a day of level)
CONTEXT = {"recent": pd.Timedelta("9D"), "hour_peak": pd.Timedelta("9D")}


def hpa_span(startup: pd.Timedelta, look: pd.Timedelta = pd.Timedelta("5min")) -> int:
    """Steps of the HPA target at the replay's step (`predictor.pipeline.decision.hpa_span`)."""
    return decision_hpa_span(startup, look, STEP)


@dataclass
class DecisionTimeTrainer:
    """One global model per UTC day, fitted on all `series` before the day (memoised)."""

    series: Mapping[str, pd.Series]
    span: int
    backend: str = DEFAULT_BACKEND
    quantiles: tuple[float, ...] = QUANTILES
    features: str = "recent"  # predictor.models.decision_time.FEATURE_SETS
    refit_days: int = 1  # a model serves this many days (the registry refits daily; replay may save fits)
    train_days: pd.Timedelta = TRAIN_DAYS
    params: dict[str, Any] = field(default_factory=dict)  # DecisionTimeGBM's other parameters
    models: dict[pd.Timestamp, DecisionTimeGBM | None] = field(default_factory=dict)
    on_fit: Callable[[pd.Timestamp, bool], None] | None = None  # told (day, fitted) after each fit: progress

    @property
    def context(self) -> pd.Timedelta:
        """History one day's predictions read."""
        return CONTEXT[self.features]

    def model_for(self, day: pd.Timestamp) -> DecisionTimeGBM | None:
        """The model for decisions on `day`: fitted on the fleet before the first day of its
        `refit_days` block, or, where the past was too short then, before the day itself (a short
        replay's first week); None when the fleet's past is too short even so."""
        block = day - pd.Timedelta(days=(day - EPOCH).days % max(1, self.refit_days))
        return self._fit(block) or self._fit(day)

    def _fit(self, day: pd.Timestamp) -> DecisionTimeGBM | None:
        if day not in self.models:
            past = {k: y[(y.index >= day - self.train_days) & (y.index < day)] for k, y in self.series.items()}
            past = {k: y for k, y in past.items() if len(y)}
            try:
                model = DecisionTimeGBM(self.quantiles, self.span, self.backend, features=self.features, **self.params)
                self.models[day] = model.fit_many(past, STEP, day)
            except ValueError as exc:
                log.info("no decision-time model for %s: %s", day.date(), exc)
                self.models[day] = None
            if self.on_fit is not None:
                self.on_fit(day, self.models[day] is not None)
        return self.models[day]


@dataclass
class DecisionTimeForecaster:
    """forecast(y, origin, horizon) -> Forecast of the next `span` steps' peak, calibrated online
    (`predictor.pipeline.decision`: the same walk and overlay as serve); `fallback` (the day-ahead
    forecaster) answers where the decision-time model cannot."""

    key: str
    trainer: DecisionTimeTrainer
    fallback: DailyChoiceForecaster
    rate: float = 0.05  # adaptive-conformal step, in series scales per unit of miss-rate error
    _raw: dict[pd.Timestamp, tuple[np.ndarray, float]] = field(default_factory=dict)
    _walk: DecisionWalk | None = None
    _days: set[pd.Timestamp] = field(default_factory=set)  # days whose raw predictions are made
    _actual: ActualAt | None = None  # the target at each origin (read only once observed)

    def _day(self, y: pd.Series, day: pd.Timestamp) -> None:
        """Raw predictions for every origin of `day` (each from the samples before it), by the
        model fitted for that day."""
        model = self.trainer.model_for(day)
        if model is None:
            return
        win = y[(y.index >= day - self.trainer.context) & (y.index < day + pd.Timedelta("1D"))]
        win = win.asfreq(STEP) if len(win) else win
        if not len(win):
            return
        q, scale = model.predict_series(win)
        for i in np.flatnonzero((win.index >= day) & np.all(np.isfinite(q), axis=1)):
            self._raw[win.index[i]] = (q[i], float(scale[i]))

    def calibrated(self, y: pd.Series, origin: pd.Timestamp) -> np.ndarray | None:
        """The calibrated quantiles at `origin`, walking the calibration forward to it."""
        if self._walk is None:
            self._walk = DecisionWalk(QUANTILES, self.trainer.span, STEP, self.rate)
        if self._actual is None:
            self._actual = actual_from_history(y, self.trainer.span, STEP)

        def raw_at(t: pd.Timestamp) -> tuple[np.ndarray, float] | None:
            if t.floor("D") not in self._days:
                self._days.add(t.floor("D"))
                self._day(y, t.floor("D"))
            return self._raw.pop(t, None)

        return self._walk.advance(origin, raw_at, self._actual)

    def forecast(self, y: pd.Series, origin: pd.Timestamp, horizon: pd.Timedelta) -> Forecast:
        q = self.calibrated(y, origin)
        if q is None:
            return self.fallback.forecast(y, origin, horizon)
        n = int(math.ceil(horizon / STEP))
        return overlay(self.key, q, QUANTILES, origin, STEP, n, f"decision_time_{self.trainer.backend}")
