"""Day-ahead forecasts for a replay: refitted at each UTC midnight on the history before it."""
from __future__ import annotations

from typing import Callable

import numpy as np
import pandas as pd

from predictor.forecasting import ForecastRequest, forecast_history
from predictor.history import History
from predictor.types import Forecast

TRAIN_WINDOW = pd.Timedelta("28d")  # what the daily training job sees, as in the forecast benchmark
HORIZON = pd.Timedelta("2d")  # a day ahead plus the longest window a decision looks over (24 h)


def origins_for(start: pd.Timestamp, end: pd.Timestamp) -> list[pd.Timestamp]:
    """The midnights whose forecasts serve decisions in [start, end)."""
    return list(pd.date_range(start.floor("D"), (end - pd.Timedelta("1ns")).floor("D"), freq="D"))


def daily_forecasts(
    history: History,
    starts: dict[str, pd.Timestamp],
    ends: dict[str, pd.Timestamp],
    quantiles: tuple[float, ...],
    model: str = "auto",
    progress: Callable[[int], None] | None = None,
) -> dict[str, dict[pd.Timestamp, Forecast]]:
    """series -> origin -> Forecast made from samples strictly before the origin."""
    wanted: dict[pd.Timestamp, list[str]] = {}
    for key in history.series:
        for o in origins_for(starts[key], ends[key]):
            wanted.setdefault(o, []).append(key)
    out: dict[str, dict[pd.Timestamp, Forecast]] = {k: {} for k in history.series}
    for origin in sorted(wanted):
        cut = {}
        for key in wanted[origin]:
            y = history.series[key]
            y = y[(y.index < origin) & (y.index >= origin - TRAIN_WINDOW)]
            if y.notna().sum() >= 2:
                cut[key] = y
        if cut:
            sub = History(cut, history.step)
            req = ForecastRequest(horizon=HORIZON, step=history.step, quantiles=quantiles, model=model, origin=origin)
            for fc in forecast_history(sub, req):
                out[fc.series][origin] = fc
        if progress:
            progress(1)
    return out


def level_ratio(y_before: pd.Series, fc: Forecast, since: pd.Timestamp, until: pd.Timestamp,
                lookback: pd.Timedelta = pd.Timedelta("1h")) -> float:
    """How far the samples of the last `lookback` before `until` ran above the forecast median for
    the same minutes (>= 1; 1 when they ran at or below it, or when there is nothing to compare).
    It lifts the rest of the day's forecast when the day turns out busier than predicted."""
    lo = max(since, until - lookback)
    seen = y_before[(y_before.index >= lo) & (y_before.index < until)].dropna()
    if len(seen) < 3:
        return 1.0
    pred = pd.Series(fc.quantile(0.5) if 0.5 in fc.quantiles else fc.values[:, 0], index=fc.index).reindex(seen.index)
    ok = pred.notna() & (pred > 0)
    if ok.sum() < 3:
        return 1.0
    ratio = float(np.median(seen[ok].to_numpy()) / np.median(pred[ok].to_numpy()))
    return min(max(ratio, 1.0), 3.0) if np.isfinite(ratio) else 1.0


def shifted(fc: Forecast, at: pd.Timestamp, scale: float = 1.0) -> Forecast:
    """The part of `fc` from `at` on, scaled (the serving loop's view of the forecast at time `at`)."""
    i = int(np.searchsorted(fc.index.asi8, at.value))
    return Forecast(series=fc.series, index=fc.index[i:], quantiles=fc.quantiles, values=fc.values[i:] * scale,
                    model=fc.model, version=fc.version, notes=list(fc.notes))
