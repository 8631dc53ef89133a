"""Decision-time forecasts in replay (`tidewise replay --decision-model gbm|lightgbm`, opt-in).

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
from typing import Mapping

import numpy as np
import pandas as pd

from predictor.models.decision_time import AdaptiveConformal, DecisionTimeGBM
from predictor.features.decision import next_max
from predictor.types import Forecast
from studies.replay.decisions import QUANTILES, STEP, DailyChoiceForecaster

log = logging.getLogger(__name__)
BACKEND = {"gbm": "hgb", "lightgbm": "lightgbm"}  # --decision-model -> DecisionTimeGBM backend
TRAIN_DAYS = pd.Timedelta("28D")  # history a daily fit reads per series (4 weekly cycles)
CONTEXT = pd.Timedelta("9D")  # history one day's predictions read (a week ago + a day of level)


def hpa_span(startup: pd.Timedelta, look: pd.Timedelta = pd.Timedelta("5min")) -> int:
    """Steps of the HPA target: the demand from now through now + startup + look (what
    `predictive_min_replicas` carries: timeline[lead // step : lead // step + look/step + 1])."""
    return int(startup // STEP) + max(1, math.ceil(look / STEP)) + 1


@dataclass
class DecisionTimeTrainer:
    """One global model per UTC day, fitted on all `series` before the day (memoised)."""

    series: Mapping[str, pd.Series]
    span: int
    backend: str = "hgb"
    models: dict[pd.Timestamp, DecisionTimeGBM | None] = field(default_factory=dict)

    def model_for(self, day: pd.Timestamp) -> DecisionTimeGBM | None:
        """The model for decisions on `day`, or None when the fleet's past is too short to fit."""
        if day not in self.models:
            past = {k: y[(y.index >= day - TRAIN_DAYS) & (y.index < day)] for k, y in self.series.items()}
            past = {k: y for k, y in past.items() if len(y)}
            try:
                self.models[day] = DecisionTimeGBM(QUANTILES, self.span, self.backend).fit_many(past, STEP, day)
            except ValueError as exc:
                log.info("no decision-time model for %s: %s", day.date(), exc)
                self.models[day] = None
        return self.models[day]


@dataclass
class DecisionTimeForecaster:
    """forecast(y, origin, horizon) -> Forecast of the next `span` steps' peak, calibrated online;
    `fallback` (the day-ahead forecaster) answers where the decision-time model cannot."""

    key: str
    trainer: DecisionTimeTrainer
    fallback: DailyChoiceForecaster
    rate: float = 0.05  # adaptive-conformal step, in series scales per unit of miss-rate error
    # steps beyond the model's span from the day-ahead forecast (VPA: the upper bound covers the
    # day's tide, not only the next hour); off for HPA, which reads only the span
    tail_from_fallback: bool = False
    _raw: dict[pd.Timestamp, tuple[np.ndarray, float]] = field(default_factory=dict)
    _out: dict[pd.Timestamp, np.ndarray] = field(default_factory=dict)
    _cal: AdaptiveConformal | None = None
    _done: pd.Timestamp | None = None  # the last origin calibrated
    _days: set[pd.Timestamp] = field(default_factory=set)  # days whose raw predictions are made
    _actual: pd.Series | None = None  # the target at each origin (read only once observed)

    def _day(self, y: pd.Series, day: pd.Timestamp) -> None:
        """Raw predictions for every origin of `day` (each from the samples before it)."""
        model = self.trainer.model_for(day)
        if model is None:
            return
        win = y[(y.index >= day - CONTEXT) & (y.index < day + pd.Timedelta("1D"))]
        win = win.asfreq(STEP) if len(win) else win
        if not len(win):
            return
        q, scale = model.predict_series(win)
        for i in np.flatnonzero((win.index >= day) & np.all(np.isfinite(q), axis=1)):
            self._raw[win.index[i]] = (q[i], float(scale[i]))

    def calibrated(self, y: pd.Series, origin: pd.Timestamp) -> np.ndarray | None:
        """The calibrated quantiles at `origin`, walking the calibration forward to it."""
        span = self.trainer.span
        t = origin if self._done is None else self._done + STEP
        if self._cal is None:
            self._cal = AdaptiveConformal(QUANTILES, self.rate)
        if self._actual is None:
            grid = y.asfreq(STEP)
            self._actual = pd.Series(next_max(grid, span), index=grid.index)
        while t <= origin:
            if t.floor("D") not in self._days:
                self._days.add(t.floor("D"))
                self._day(y, t.floor("D"))
            seen = t - span * STEP  # the latest origin whose target window ends before t
            if seen in self._out:
                self._cal.update(self._out[seen], float(self._actual.get(seen, np.nan)))
            if t in self._raw:
                q, scale = self._raw[t]
                self._out[t] = self._cal.apply(q, scale)
            t += STEP
        self._done = origin
        return self._out.get(origin)

    def forecast(self, y: pd.Series, origin: pd.Timestamp, horizon: pd.Timedelta) -> Forecast:
        q = self.calibrated(y, origin)
        if q is None:
            return self.fallback.forecast(y, origin, horizon)
        n = int(math.ceil(horizon / STEP))
        idx = pd.date_range(origin, periods=n, freq=STEP)
        values = np.tile(q, (n, 1))
        span = self.trainer.span
        if self.tail_from_fallback and n > span:
            tail = self.fallback.forecast(y, origin, horizon)
            if tail.quantiles == QUANTILES and len(tail.values) == n:
                values[span:] = tail.values[span:]
        return Forecast(self.key, idx, QUANTILES, values, f"decision_time_{self.trainer.backend}")
