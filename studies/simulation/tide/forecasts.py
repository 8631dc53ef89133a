"""Forecasts of the online side's requested cores, made as the serving loop would: from the past only.

Every `every` minutes of simulated time (an hour by default: serve forecasts every run, the pool's
need for the next hours moves with the latest data), the pool's series of requested cores
(`tide.model.history_requested`: 15-minute peaks) is forecast `horizon` ahead from the values
strictly before that origin, by the harness's rolling-origin forecast (`harness.forecasts`: the
series alone, through `predictor.pipeline.forecasting.forecast_series`, auto selection by default). A
decision at minute t reads the latest forecast whose origin is at most t, so no decision sees data
from its future (tested by changing the future and comparing).

One series per origin: about 0.4 s a call with auto, ~70 s per simulated week; the result is cached
in an `.npz` file keyed by the series, the model, the quantiles and the forecasting code.
"""
from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass
from typing import Callable, Sequence

import numpy as np
import pandas as pd

from studies.simulation.harness.forecasts import PER_STEP, QUANTILES, cache_key, cached, rolling_origin
from studies.simulation.harness.traces import SIM_EPOCH


EVERY = 60  # minutes between forecasts
HORIZON = 7 * 60  # minutes: the next origin (1 h) + the longest lead swept (3 h) + min dwell (2 h) + slack


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
    origins = np.arange(0, minutes, every)
    path = None
    if cache_dir:
        path = os.path.join(cache_dir, f"tide-{_key(series, minutes, model, quantiles, every, horizon)}.npz")

    def make() -> dict[str, np.ndarray]:
        at = [SIM_EPOCH + pd.Timedelta(minutes=int(o)) for o in origins]
        values, models = rolling_origin({str(series.name): series}, at, -(-horizon // PER_STEP), model, quantiles,
                                        together=False, progress=progress)
        used = [m[str(series.name)] for m in models]
        label = max(set(used), key=used.count) if used else ""
        return {"origins": origins, "values": values[0], "model": np.array(label)}

    arrays, hit = cached(path, "pool forecasts", make)
    if hit and progress:
        progress(len(origins))
    return PoolForecasts(arrays["origins"], tuple(quantiles), arrays["values"], str(arrays["model"]))
