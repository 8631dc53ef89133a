"""Daily forecasts of every trace shape, made as the serving loop would: from the past only.

At the start of each simulated day, every trace is forecast 25 hours ahead (the day plus the
reclaim window that reaches past midnight) from its history before that day — the training
history plus the simulated days already seen — through `predictor.forecasting.forecast_history`
(auto model selection by default). Forecasts are of the trace *shapes*; a service's forecast is its
shape's forecast times its scale, capped at its limit, and a node's is the sum over its services
(the serving loop's "sum of the online pods' forecast quantiles").

The cost is one `forecast_history` call per simulated day, independent of the cluster size; the
result can be cached in a `.npz` file keyed by everything it depends on (the series, the days,
model and quantiles, and the source of the forecasting code).
"""
from __future__ import annotations

import hashlib
import json
import logging
import os
from typing import Callable, Sequence

import numpy as np
import pandas as pd

from studies.simulation.cluster import Cluster
from studies.simulation.policies import NodeForecasts
from studies.simulation.traces import DAY_MIN, FORECAST_STEP, SIM_EPOCH, Trace
from predictor.timestamps import epoch_ns

log = logging.getLogger(__name__)

QUANTILES = (0.5, 0.9, 0.95, 0.99)
HORIZON = pd.Timedelta("25h")  # one day plus the longest reclaim window swept
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


def node_series(cluster: Cluster) -> dict[str, pd.Series]:
    """Each node's online demand on the forecasting grid, history and evaluation days: the sum of its
    services' step peaks (a node agent's `node/<name>/cpu` series, DESIGN.md's node-level key)."""
    out = {}
    for n in range(cluster.nodes):
        parts = [np.minimum(cluster.traces[s.trace].grid_series * s.scale, s.limit)
                 for s in cluster.services if s.node == n]
        if parts:
            # only where every service has data: before a shorter trace begins, a partial sum would
            # show the forecaster a level shift that never happened
            total = pd.concat(parts, axis=1).sum(axis=1, min_count=len(parts))
            out[f"node/node-{n:03d}/cpu"] = total.loc[total.first_valid_index():]
    return out


def forecast_traces(traces: Sequence[Trace], days: int, model: str = "auto",
                    quantiles: Sequence[float] = QUANTILES, cache_dir: str | None = None,
                    progress: Callable[[int], None] | None = None) -> tuple[np.ndarray, dict[str, str]]:
    """traces x days x quantiles x minutes (1-minute, 25 h per day) and the model used per trace."""
    return forecast_series({t.name: t.grid_series for t in traces}, days, model, quantiles, cache_dir, progress)


def forecast_series(series: dict[str, pd.Series], days: int, model: str = "auto",
                    quantiles: Sequence[float] = QUANTILES, cache_dir: str | None = None,
                    progress: Callable[[int], None] | None = None) -> tuple[np.ndarray, dict[str, str]]:
    """series x days x quantiles x minutes (1-minute, 25 h per day) and the model used per series.

    Each forecast value (a forecast of the step's peak minute) holds for every minute of its step.
    """
    from predictor.forecasting import ForecastRequest, forecast_history
    from predictor.history import History

    names = list(series)
    path = None
    if cache_dir:
        path = os.path.join(cache_dir, f"forecasts-{cache_key(series, days, model, quantiles)}.npz")
        if os.path.exists(path):
            with np.load(path, allow_pickle=False) as z:
                log.info("forecasts read from the cache %s", path)
                if progress:
                    progress(days)
                return z["values"], dict(zip(z["names"].tolist(), z["models"].tolist()))
    steps = int(HORIZON / FORECAST_STEP)
    out = np.zeros((len(names), days, len(quantiles), steps * PER_STEP))
    models: dict[str, str] = {}
    for d in range(days):
        origin = SIM_EPOCH + pd.Timedelta(days=d)
        hist = History({k: y[y.index < origin] for k, y in series.items()}, FORECAST_STEP)
        req = ForecastRequest(horizon=HORIZON, step=FORECAST_STEP, quantiles=tuple(quantiles), model=model,
                              origin=origin)
        by_name = {f.series: f for f in forecast_history(hist, req)}
        for i, name in enumerate(names):
            f = by_name[name]
            if f.index[0] != origin:
                raise ValueError(f"forecast of {name} starts at {f.index[0]}, not at {origin}")
            vals = np.maximum(np.nan_to_num(np.asarray(f.values, dtype=float), nan=0.0), 0.0)[:steps]
            vals = np.maximum.accumulate(vals, axis=1)  # quantiles never cross (the contract), made exact
            out[i, d] = np.repeat(vals.T, PER_STEP, axis=1)
            if d == 0:
                models[name] = f.model
        if progress:
            progress(1)
    if path:
        from predictor.atomic import atomic_path

        os.makedirs(cache_dir, exist_ok=True)  # type: ignore[arg-type]
        with atomic_path(path) as tmp:
            with open(tmp, "wb") as fh:
                np.savez_compressed(fh, values=out, names=np.array(names),
                                    models=np.array([models[n] for n in names]))
    return out, models


def node_forecasts(cluster: Cluster, per_trace: np.ndarray, models: dict[str, str],
                   quantiles: Sequence[float] = QUANTILES) -> NodeForecasts:
    """Scale each trace's forecast to its services (capped at their limits) and sum per node."""
    days = per_trace.shape[1]
    by_day = []
    for d in range(days):
        by_day.append({q: cluster.service_matrix(per_trace[:, d, j, :]) for j, q in enumerate(quantiles)})
    return NodeForecasts(tuple(quantiles), by_day, models)


def node_level_forecasts(cluster: Cluster, per_node: np.ndarray, models: dict[str, str],
                         quantiles: Sequence[float] = QUANTILES) -> NodeForecasts:
    """Forecasts of the node series themselves (nodes x days x quantiles x minutes)."""
    by_day = [{q: per_node[:, d, j, :] for j, q in enumerate(quantiles)} for d in range(per_node.shape[1])]
    return NodeForecasts(tuple(quantiles), by_day, models)


def forecast_coverage(names: Sequence[str], actual: np.ndarray, forecasts: np.ndarray,
                      quantiles: Sequence[float] = QUANTILES, unit: str = "cores") -> list[dict]:
    """Per series: how often its 1-minute demand exceeded each forecast quantile, and by how much.

    `actual` is series x minutes, `forecasts` series x days x quantiles x minutes. This is where a
    forecast-driven policy loses: where q0.95 is exceeded far more than 5% of minutes, the reactive
    term catches up after the fact; where it sits far above the demand, batch is kept out.
    """
    rows = []
    days = min(forecasts.shape[1], actual.shape[1] // DAY_MIN)
    j95 = list(quantiles).index(0.95) if 0.95 in quantiles else len(quantiles) - 1
    for i, name in enumerate(names):
        a = actual[i, :days * DAY_MIN]
        row: dict = {"series": name}
        for j, q in enumerate(quantiles):
            fc = np.concatenate([forecasts[i, d, j, :DAY_MIN] for d in range(days)])
            row[f"exceed_q{q:g}"] = float(np.mean(a > fc + 1e-12))
        fc = np.concatenate([forecasts[i, d, j95, :DAY_MIN] for d in range(days)])
        row[f"mean_miss_q{quantiles[j95]:g} ({unit})"] = float(np.maximum(a - fc, 0.0).mean())
        row[f"mean_over_q{quantiles[j95]:g} ({unit})"] = float(np.maximum(fc - a, 0.0).mean())
        row["mean_demand"] = float(a.mean())
        rows.append(row)
    return rows
