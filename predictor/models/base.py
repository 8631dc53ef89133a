"""The forecaster contract (scikit-learn style, see STYLE.md).

`__init__` only stores keyword arguments; `fit(y)` validates and learns state in attributes that
end in `_` and returns self; `predict(horizon, quantiles)` checks it was fitted and returns an
array (horizon, len(quantiles)) whose columns never cross. `forecast(y, ...)` is the stateless
fit+predict that the serving path uses. `y` is a regular pandas Series on a DatetimeIndex with
NaN for gaps.
"""
from __future__ import annotations

from typing import ClassVar, Sequence

import numpy as np
import pandas as pd
from sklearn.base import BaseEstimator

from predictor.durations import to_timedelta
from predictor.timestamps import median_step


class NotFittedError(RuntimeError):
    """predict() was called before fit()."""


class Forecaster(BaseEstimator):
    """Base class; subclasses set `name` and implement `_fit` and `_predict`."""

    name: ClassVar[str] = "forecaster"
    # The span of history `fit` needs to work as designed. Training never chooses a model that
    # needs more than serving fetches (predictor.pipeline.selection.default_candidates), and
    # forecasting a series with less falls back to a model it can feed, saying so
    # (predictor.pipeline.fallback).
    min_history: ClassVar[str] = "2d"

    def history_needed(self) -> pd.Timedelta:
        """`min_history`; models whose need depends on a parameter (a season) override this."""
        return to_timedelta(self.min_history)

    def fit(self, y: pd.Series) -> "Forecaster":
        y = check_series(y)
        self.step_ = pd.Timedelta(y.index.freq) if y.index.freq is not None else infer_step(y.index)
        self.last_timestamp_ = y.index[-1]
        self._fit(y)
        return self

    def predict(self, horizon: int, quantiles: Sequence[float]) -> np.ndarray:
        if not hasattr(self, "last_timestamp_"):
            raise NotFittedError(f"{type(self).__name__} is not fitted: call fit(y) first")
        qs = np.asarray(quantiles, dtype=float)
        if horizon < 1:
            raise ValueError(f"horizon must be at least 1 step, got {horizon}")
        if np.any((qs <= 0) | (qs >= 1)):
            raise ValueError(f"quantiles must lie strictly between 0 and 1, got {list(quantiles)}")
        out = np.asarray(self._predict(int(horizon), qs), dtype=float)
        return non_crossing(out, qs)

    def forecast(self, y: pd.Series, horizon: int, quantiles: Sequence[float]) -> np.ndarray:
        return self.fit(y).predict(horizon, quantiles)

    def future_index(self, horizon: int) -> pd.DatetimeIndex:
        return pd.date_range(self.last_timestamp_ + self.step_, periods=horizon, freq=self.step_)

    @property
    def label(self) -> str:
        """The name written in the `model` column of a forecast."""
        return self.name

    # subclasses ---------------------------------------------------------------------------------
    def _fit(self, y: pd.Series) -> None:  # pragma: no cover - abstract
        raise NotImplementedError

    def _predict(self, horizon: int, quantiles: np.ndarray) -> np.ndarray:  # pragma: no cover
        raise NotImplementedError


def check_series(y: pd.Series) -> pd.Series:
    if not isinstance(y, pd.Series) or not isinstance(y.index, pd.DatetimeIndex):
        raise TypeError("y must be a pandas Series on a DatetimeIndex")
    v = y.to_numpy()
    values = int(np.count_nonzero(~np.isnan(v))) if v.dtype.kind == "f" else int(y.notna().sum())
    if len(y) < 2 or values < 2:
        raise ValueError(f"history has {values} values; at least 2 are needed")
    if not y.index.is_monotonic_increasing:
        raise ValueError("history index must be sorted")
    return y if y.dtype == np.float64 else y.astype("float64")  # models never write to y: no copy


def infer_step(index: pd.DatetimeIndex) -> pd.Timedelta:
    return median_step(index)


def non_crossing(values: np.ndarray, quantiles: np.ndarray) -> np.ndarray:
    """Sort each row across quantiles (in quantile order) so that q_i <= q_j whenever i < j."""
    order = np.argsort(quantiles)
    out = values.copy()
    out[:, order] = np.sort(values[:, order], axis=1)
    return out


def steps_in(duration: str | pd.Timedelta, step: pd.Timedelta) -> int:
    return max(1, int(round(to_timedelta(duration) / step)))
