"""The rolling-origin forecast every study reads, made as the serving loop would: from the past only.

At each origin, every series is forecast `steps` forecast steps ahead from its values strictly
before the origin, through `predictor.pipeline.forecasting` (auto model selection by default); each value
(a forecast of the step's peak minute) holds for every minute of its step, and the quantiles are
made exactly non-crossing. The colocation and rebalance studies forecast every series together
at each simulated midnight (`forecast_series`: one `forecast_history` call per day, independent of
the cluster size, the fleet's global GBM among the candidates); the tide study forecasts its one
pool series hourly on its own (`forecast_series` of the predictor).

A result can be cached in a `.npz` file keyed by everything it depends on (the series, the origins,
model and quantiles, and the source of the forecasting code): `cached`.
"""
from __future__ import annotations

import hashlib
import json
import logging
import os
from typing import Callable, Sequence

import numpy as np
import pandas as pd

from predictor.timestamps import epoch_ns
from studies.simulation.harness.traces import FORECAST_STEP, SIM_EPOCH, Trace

log = logging.getLogger(__name__)

QUANTILES = (0.5, 0.9, 0.95, 0.99)
HORIZON = pd.Timedelta("25h")  # daily origins: one day plus the longest reclaim window swept
PER_STEP = int(FORECAST_STEP / pd.Timedelta("1min"))


def _predictor_source_digest() -> str:
    """A digest of the forecasting code (every predictor/*.py): a cache made by other code is stale."""
    import predictor

    root = os.path.dirname(os.path.abspath(predictor.__file__))
    h = hashlib.sha256()
    for folder, dirs, files in sorted(os.walk(root)):
        dirs.sort()
        for f in sorted(files):
            if f.endswith(".py"):
                with open(os.path.join(folder, f), "rb") as fh:
                    h.update(f.encode() + fh.read())
    return h.hexdigest()


def cache_key(series: dict[str, pd.Series], days: int, model: str, quantiles: Sequence[float]) -> str:
    h = hashlib.sha256()
    h.update(_predictor_source_digest().encode())
    h.update(json.dumps({"days": days, "model": model, "q": list(quantiles), "horizon": str(HORIZON),
                         "step": str(FORECAST_STEP)}).encode())
    for name, y in series.items():
        h.update(name.encode())
        h.update(np.ascontiguousarray(epoch_ns(y.index)).tobytes())  # the same key on any pandas
        h.update(np.ascontiguousarray(np.nan_to_num(y.to_numpy(), nan=-1.0)).tobytes())
    return h.hexdigest()[:16]


def cached(path: str | None, what: str, make: Callable[[], dict[str, np.ndarray]]) -> tuple[dict[str, np.ndarray], bool]:
    """The arrays in the `.npz` at `path` when it exists, else `make()`'s, written there atomically
    (`path` None: not cached); and whether they were read from the cache."""
    if path and os.path.exists(path):
        with np.load(path, allow_pickle=False) as z:
            log.info("%s read from the cache %s", what, path)
            return {k: z[k] for k in z.files}, True
    arrays = make()
    if path:
        from contracts.atomic import atomic_path

        os.makedirs(os.path.dirname(path), exist_ok=True)
        with atomic_path(path) as tmp:
            with open(tmp, "wb") as fh:
                np.savez_compressed(fh, **arrays)  # type: ignore[arg-type]
    return arrays, False


def rolling_origin(series: dict[str, pd.Series], origins: Sequence[pd.Timestamp], steps: int, model: str,
                   quantiles: Sequence[float], together: bool = True,
                   progress: Callable[[int], None] | None = None) -> tuple[np.ndarray, list[dict[str, str]]]:
    """series x origins x quantiles x minutes (`steps` forecast steps from each origin, per minute)
    and, per origin, the model used per series. `together`: every series in one `forecast_history`
    call per origin (auto mode fits the fleet's global GBM); else each alone, its gaps dropped."""
    from predictor.pipeline.forecasting import ForecastRequest, forecast_history
    from predictor.pipeline.forecasting import forecast_series as forecast_one
    from predictor.history import History

    names = list(series)
    out = np.zeros((len(names), len(origins), len(quantiles), steps * PER_STEP))
    models: list[dict[str, str]] = []
    for d, origin in enumerate(origins):
        req = ForecastRequest(horizon=steps * FORECAST_STEP, step=FORECAST_STEP, quantiles=tuple(quantiles),
                              model=model, origin=origin)
        if together:
            made = forecast_history(History({k: y[y.index < origin] for k, y in series.items()}, FORECAST_STEP), req)
        else:
            made = [forecast_one(k, y[y.index < origin].dropna(), req) for k, y in series.items()]
        by_name = {f.series: f for f in made}
        for i, name in enumerate(names):
            f = by_name[name]
            if f.index[0] != origin:
                raise ValueError(f"forecast of {name} starts at {f.index[0]}, not at {origin}")
            vals = np.maximum(np.nan_to_num(np.asarray(f.values, dtype=float), nan=0.0), 0.0)[:steps]
            vals = np.maximum.accumulate(vals, axis=1)  # quantiles never cross (the contract), made exact
            out[i, d] = np.repeat(vals.T, PER_STEP, axis=1)
        models.append({name: by_name[name].model for name in names})
        if progress:
            progress(1)
    return out, models


def forecast_traces(traces: Sequence[Trace], days: int, model: str = "auto",
                    quantiles: Sequence[float] = QUANTILES, cache_dir: str | None = None,
                    progress: Callable[[int], None] | None = None) -> tuple[np.ndarray, dict[str, str]]:
    """traces x days x quantiles x minutes (1-minute, 25 h per day) and the model used per trace."""
    return forecast_series({t.name: t.grid_series for t in traces}, days, model, quantiles, cache_dir, progress)


def forecast_series(series: dict[str, pd.Series], days: int, model: str = "auto",
                    quantiles: Sequence[float] = QUANTILES, cache_dir: str | None = None,
                    progress: Callable[[int], None] | None = None) -> tuple[np.ndarray, dict[str, str]]:
    """series x days x quantiles x minutes (1-minute, 25 h per day, from each simulated midnight)
    and the model used per series (on the first day)."""
    names = list(series)
    path = None
    if cache_dir:
        path = os.path.join(cache_dir, f"forecasts-{cache_key(series, days, model, quantiles)}.npz")

    def make() -> dict[str, np.ndarray]:
        origins = [SIM_EPOCH + pd.Timedelta(days=d) for d in range(days)]
        values, models = rolling_origin(series, origins, int(HORIZON / FORECAST_STEP), model, quantiles,
                                        progress=progress)
        return {"values": values, "names": np.array(names), "models": np.array([models[0][n] for n in names])}

    arrays, hit = cached(path, "forecasts", make)
    if hit and progress:
        progress(days)
    return arrays["values"], dict(zip(arrays["names"].tolist(), arrays["models"].tolist()))
