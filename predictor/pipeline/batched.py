"""Seasonal naive for many series at once, as array operations (the serving loop's hot path).

The serving loop forecasts 20,000 series a cold run; fitted one by one, the seasonal naive costs
~1 ms a series in pandas and model objects, although its arithmetic is a slice, a subtraction and
a quantile. Series that need none of the per-series care — no gap, a contiguous grid at the
requested step, two seasons of history — are grouped by (length, last timestamp, origin), stacked
into one matrix per group and forecast together: the same numbers as `SeasonalNaive` fitted on
each (`np.quantile` along rows is the per-row quantile). Everything else (gaps to bridge, short
or irregular series, other models) is left to the per-series path, which records fallbacks.
"""
from __future__ import annotations

from typing import Mapping

import numpy as np
import pandas as pd

from predictor.models import MODELS
from predictor.models.base import steps_in
from predictor.models.baselines import SeasonalNaive
from predictor.timestamps import epoch_ns, grid
from predictor.types import Forecast

MIN_GROUP = 2  # a group of one is as cheap per series


def batchable(model: str) -> bool:
    """Whether `model` (a registry name) has the array form here."""
    return model in MODELS and isinstance(MODELS[model](), SeasonalNaive)


def forecast_seasonal_naive(model: str, series: Mapping[str, pd.Series], reqs: Mapping, step: pd.Timedelta
                            ) -> dict[str, Forecast]:
    """Forecasts of the series the array form covers (module docstring), keyed by series; `reqs`
    maps each series to its `ForecastRequest` (origin None: one step after the series' end)."""
    proto = MODELS[model]()
    assert isinstance(proto, SeasonalNaive)
    m, r = steps_in(proto.season, step), steps_in(proto.residual_window, step)
    groups: dict[tuple[int, int, int], list[str]] = {}
    for key, y in series.items():
        req = reqs[key]
        if req.step != step or len(y) < 2 * m:
            continue
        ns = epoch_ns(y.index)
        if ns[1] - ns[0] != step.value or ns[-1] - ns[0] != (len(ns) - 1) * step.value or np.isnan(y.to_numpy()).any():
            continue
        origin = req.origin.value if req.origin is not None else int(ns[-1]) + step.value
        groups.setdefault((len(y), int(ns[-1]), origin), []).append(key)
    out: dict[str, Forecast] = {}
    label = proto.label
    for (_, end, origin), keys in groups.items():
        if len(keys) < MIN_GROUP:
            continue
        req = reqs[keys[0]]
        values = _forecast_matrix(np.stack([series[k].to_numpy(dtype="float64") for k in keys]), m, r,
                                  max(0, (origin - end - step.value) // step.value), req.steps, req.quantiles)
        index = grid(pd.Timestamp(origin, unit="ns", tz="UTC"), req.steps, step)
        for key, v in zip(keys, values):
            out[key] = Forecast(series=key, index=index, quantiles=tuple(req.quantiles), values=v, model=label)
    return out


def _forecast_matrix(y: np.ndarray, m: int, r: int, lead: int, steps: int, quantiles) -> np.ndarray:
    """(series, steps, quantiles): the last season repeated, plus quantiles of the seasonal
    differences over the last `r` steps, sorted across quantiles (never crossing)."""
    qs = np.asarray(quantiles, dtype=float)
    season = y[:, -m:]
    resid = (y[:, m:] - y[:, :-m])[:, -r:]
    offsets = np.quantile(resid, qs, axis=1).T  # (series, quantiles)
    reps = int(np.ceil((lead + steps) / m))
    point = np.tile(season, (1, reps))[:, lead:lead + steps]
    values = point[:, :, None] + offsets[:, None, :]
    order = np.argsort(qs)
    values[:, :, order] = np.sort(values[:, :, order], axis=2)
    return values
