"""Running a stored per-series choice: models by name, and the forecaster that runs a `Choice`.

A `Choice` (`predictor.types`) is what a backtest decided for one series
(`predictor.pipeline.selection.choose`) and what the registry stores for it: a model name, for the
ensemble its members, and the conformal shifts. Two names are not plain models: `gbm_global` is the
one GBM shared by the fleet (fitted once, loaded from the registry, often predicted for many series
in one batch), and `ensemble` is the mean of its members. `ChoiceForecaster` is the one place that
knows both, so that forecasting, serving and training run a choice the same way.
"""
from __future__ import annotations

from typing import Any, Sequence

import numpy as np
import pandas as pd

from predictor.models import MODELS, Forecaster
from predictor.models.gbm import GlobalGBM
from predictor.types import ENSEMBLE, GLOBAL, Choice


def make_model(name: str, quantiles: Sequence[float] | None = None) -> Forecaster:
    """A fresh model by registry name; quantile models are built for the requested quantiles."""
    if name not in MODELS:
        raise ValueError(f"unknown model {name!r}: use one of {sorted(MODELS)}")
    m = MODELS[name]()
    if quantiles is not None and "quantiles" in m.get_params():
        m.set_params(quantiles=tuple(float(q) for q in quantiles))
    return m


def history_needed(name: str, members: Sequence[str] = ()) -> pd.Timedelta:
    """The history a stored choice needs to run as chosen: its model's (or its ensemble
    members') declared need."""
    if name == ENSEMBLE:
        return max((history_needed(m) for m in members), default=pd.Timedelta(0))
    if name not in MODELS:
        raise ValueError(f"unknown model {name!r}: use one of {sorted(MODELS)}")
    return MODELS[name]().history_needed()


def stored_params(name: str) -> dict[str, Any]:
    """A model's constructor parameters, as JSON, for the registry (the global GBM's are in the
    manifest, and the ensemble has none of its own)."""
    if name in (GLOBAL, ENSEMBLE):
        return {}
    return {k: v for k, v in make_model(name).get_params().items()
            if isinstance(v, (int, float, str, bool, type(None), tuple, list))}


def predict_from(model: Forecaster, y: pd.Series, step: pd.Timedelta, steps: int, quantiles: Sequence[float],
                 origin: pd.Timestamp) -> np.ndarray:
    """Fit `model` on y and predict `steps` from `origin` (forecasting through any silence
    between the end of y and the origin, then dropping those lead steps)."""
    lead = max(0, int((origin - (y.index[-1] + step)) / step))
    return model.forecast(y, lead + steps, quantiles)[lead:]


class ChoiceForecaster:
    """Runs a stored choice on one series: a plain model fitted on the series, the shared global
    GBM (or its forecast already made in a batch), or the mean of the ensemble's members.

    Not a `Forecaster`: it forecasts from a given origin with a model fitted elsewhere (the
    global GBM), so it has no `fit` of its own. Values come out uncalibrated: the caller applies
    the choice's conformal shifts (`predictor.pipeline.calibration.apply_shifts`)."""

    def __init__(self, model: str, members: Sequence[str] = (), global_model: GlobalGBM | None = None):
        self.model = model
        self.members = list(members)
        self.global_model = global_model

    @classmethod
    def of(cls, choice: Choice, global_model: GlobalGBM | None = None) -> "ChoiceForecaster":
        return cls(choice.model, choice.members, global_model)

    def predict(self, y: pd.Series, step: pd.Timedelta, steps: int, quantiles: Sequence[float],
                origin: pd.Timestamp, global_values: np.ndarray | None = None) -> np.ndarray:
        """(steps, len(quantiles)) from `origin`; `global_values`: the global GBM's forecast of
        this series when already made in a batch. ValueError when the choice cannot run."""
        if self.model == ENSEMBLE:
            if not self.members:
                raise ValueError("the ensemble lists no members")
            return np.mean([self._run(m, y, step, steps, quantiles, origin, global_values) for m in self.members],
                           axis=0)
        return self._run(self.model, y, step, steps, quantiles, origin, global_values)

    def _run(self, name: str, y: pd.Series, step: pd.Timedelta, steps: int, quantiles: Sequence[float],
             origin: pd.Timestamp, global_values: np.ndarray | None) -> np.ndarray:
        if name != GLOBAL:
            return predict_from(make_model(name, quantiles), y, step, steps, quantiles, origin)
        if global_values is not None:
            return global_values
        if self.global_model is None:
            raise ValueError("the global GBM is not available")
        return self.global_model.predict_series(y, steps, quantiles, origin=origin)

