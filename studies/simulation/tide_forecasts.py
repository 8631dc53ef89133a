"""Forecasts of the online side's requested cores, made as the serving loop would: from the past only.

Every `every` minutes of simulated time (an hour by default: serve forecasts every run, the pool's
need for the next hours moves with the latest data), the pool's series of requested cores
(`tide_model.history_requested`: 15-minute peaks) is forecast `horizon` ahead from the values
strictly before that origin, through `predictor.forecasting.forecast_series` (auto selection by
default). A decision at minute t reads the latest forecast whose origin is at most t, so no decision
sees data from its future (tested by changing the future and comparing).

One series per origin: about 0.4 s a call with auto, ~70 s per simulated week; the result is cached
in an `.npz` file keyed by the series, the model, the quantiles and the forecasting code.
"""
from __future__ import annotations

import hashlib
import json
import logging
import os
from dataclasses import dataclass
from typing import Callable, Sequence

import numpy as np
import pandas as pd

from studies.simulation.forecasts import cache_key
from studies.simulation.traces import FORECAST_STEP, SIM_EPOCH

log = logging.getLogger(__name__)

QUANTILES = (0.5, 0.9, 0.95, 0.99)
EVERY = 60  # minutes between forecasts
HORIZON = 7 * 60  # minutes: the next origin (1 h) + the longest lead swept (3 h) + min dwell (2 h) + slack
PER_STEP = int(FORECAST_STEP / pd.Timedelta("1min"))


@dataclass
class PoolForecasts:
    """values[origin, quantile, minute]: requested cores from each origin on, per minute."""

    origins: np.ndarray  # minutes since SIM_EPOCH, increasing
    quantiles: tuple[float, ...]
    values: np.ndarray
    model: str

    def made_at(self, t: int) -> int:
        """The origin (minute) of the forecast a decision at minute t reads."""
        o = int(np.searchsorted(self.origins, t, side="right")) - 1
        if o < 0:
            raise ValueError(f"no forecast made at or before minute {t}")
        return int(self.origins[o])

    def window(self, t: int, q: float, length: int) -> np.ndarray:
        """The `length` minutes from t + 1 on, from the latest forecast made at or before t."""
        origin = self.made_at(t)
        o = int(np.searchsorted(self.origins, origin))
        start = t + 1 - origin
        if start + length > self.values.shape[2]:
            raise ValueError(f"forecast from minute {origin} does not reach minute {t + length}")
        return self.values[o, self.quantiles.index(q), start:start + length]


def _key(series: pd.Series, minutes: int, model: str, quantiles: Sequence[float], every: int, horizon: int) -> str:
    base = cache_key({str(series.name): series}, minutes, model, quantiles)
    extra = json.dumps({"every": every, "horizon": horizon, "what": "tide"}).encode()
    return hashlib.sha256(base.encode() + extra).hexdigest()[:16]


def forecast_pool(series: pd.Series, minutes: int, model: str = "auto", quantiles: Sequence[float] = QUANTILES,
                  every: int = EVERY, horizon: int = HORIZON, cache_dir: str | None = None,
                  progress: Callable[[int], None] | None = None) -> PoolForecasts:
    """A forecast every `every` minutes over `minutes` simulated minutes, each from the data before it."""
    from predictor.forecasting import ForecastRequest, forecast_series

    origins = np.arange(0, minutes, every)
    path = None
    if cache_dir:
        path = os.path.join(cache_dir, f"tide-{_key(series, minutes, model, quantiles, every, horizon)}.npz")
        if os.path.exists(path):
            with np.load(path, allow_pickle=False) as z:
                log.info("pool forecasts read from the cache %s", path)
                if progress:
                    progress(len(origins))
                return PoolForecasts(z["origins"], tuple(quantiles), z["values"], str(z["model"]))
    steps = -(-horizon // PER_STEP)
    values = np.zeros((len(origins), len(quantiles), steps * PER_STEP))
    models: list[str] = []
    for i, o in enumerate(origins):
        origin = SIM_EPOCH + pd.Timedelta(minutes=int(o))
        past = series[series.index < origin].dropna()
        req = ForecastRequest(horizon=pd.Timedelta(minutes=steps * PER_STEP), step=FORECAST_STEP,
                              quantiles=tuple(quantiles), model=model, origin=origin)
        f = forecast_series(str(series.name), past, req)
        vals = np.maximum(np.nan_to_num(np.asarray(f.values, dtype=float), nan=0.0), 0.0)[:steps]
        vals = np.maximum.accumulate(vals, axis=1)  # quantiles never cross (the contract), made exact
        values[i] = np.repeat(vals.T, PER_STEP, axis=1)
        models.append(f.model)
        if progress:
            progress(1)
    label = max(set(models), key=models.count) if models else ""
    if path:
        from predictor.atomic import atomic_path

        os.makedirs(cache_dir, exist_ok=True)  # type: ignore[arg-type]
        with atomic_path(path) as tmp:
            with open(tmp, "wb") as fh:
                np.savez_compressed(fh, origins=origins, values=values, model=np.array(label))
    return PoolForecasts(origins, tuple(quantiles), values, label)
