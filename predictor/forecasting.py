"""Forecast many series: pick a model per series, fit, predict, fall back on failure.

Series are independent; a model that raises on one series falls back to the decaying histogram
for that series alone, and the fallback is recorded in the forecast's notes.
"""
from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Callable, Iterable, Sequence

import numpy as np
import pandas as pd

from predictor.history import History
from predictor.models import MODELS, DecayingHistogram, Forecaster
from predictor.seasonality import DAY, SEASONAL_ACF, WEEK, acf_at
from predictor.types import Forecast

log = logging.getLogger(__name__)

DEFAULT_QUANTILES = (0.5, 0.9, 0.95, 0.99)
STALE_AFTER = pd.Timedelta("1d")  # a series silent this long before the common origin is stale


@dataclass
class ForecastRequest:
    horizon: pd.Timedelta
    step: pd.Timedelta
    quantiles: Sequence[float] = DEFAULT_QUANTILES
    model: str = "auto"
    origin: pd.Timestamp | None = None  # forecasts start at origin; default: end of the data + step

    @property
    def steps(self) -> int:
        return int(self.horizon / self.step)


def choose_baseline(y: pd.Series, step: pd.Timedelta) -> tuple[Forecaster, str]:
    """Seasonality-aware default: weekly naive where the weekly cycle is clearly stronger and three
    weeks exist, daily naive where a daily cycle exists (ACF >= 0.3), else the decaying histogram."""
    span = y.index[-1] - y.index[0]
    day, week = acf_at(y, DAY, step), acf_at(y, WEEK, step)
    if span >= 3 * WEEK and np.isfinite(week) and week >= SEASONAL_ACF and week > (day if np.isfinite(day) else 0) + 0.05:
        return MODELS["seasonal_naive_weekly"](), f"weekly ACF {week:.2f} > daily ACF {day:.2f}"
    if span >= 2 * DAY and np.isfinite(day) and day >= SEASONAL_ACF:
        return MODELS["seasonal_naive_daily"](), f"daily ACF {day:.2f} >= {SEASONAL_ACF}"
    return DecayingHistogram(), f"no daily cycle (ACF {day:.2f})" if np.isfinite(day) else "under 1.5 days of history"


def forecast_series(key: str, y: pd.Series, req: ForecastRequest) -> Forecast:
    """One series -> one Forecast on the requested grid, with the fallback recorded."""
    notes: list[str] = []
    if req.model == "auto":
        model, why = choose_baseline(y, req.step)
        notes.append(why)
    else:
        model = MODELS[req.model]()
    origin = req.origin if req.origin is not None else y.index[-1] + req.step
    # forecast through the origin: steps between the end of this series and the common origin
    lead = max(0, int((origin - (y.index[-1] + req.step)) / req.step))
    total = lead + req.steps
    try:
        values = model.forecast(y, total, req.quantiles)
        label = model.label
    except (ValueError, np.linalg.LinAlgError) as exc:
        fallback = DecayingHistogram()
        notes.append(f"{model.label} failed ({exc}); fell back to {fallback.label}")
        log.warning("series %s: %s failed (%s); using %s", key, model.label, exc, fallback.label)
        values = fallback.forecast(y, total, req.quantiles)
        label = fallback.label
    index = pd.date_range(origin, periods=req.steps, freq=req.step)
    return Forecast(series=key, index=index, quantiles=tuple(req.quantiles), values=values[lead:], model=label, notes=notes)


def forecast_history(
    history: History,
    req: ForecastRequest,
    progress: Callable[[int], None] | None = None,
) -> list[Forecast]:
    """Forecast every series of `history` from one common origin (end of the data + step)."""
    if req.origin is None:
        req = ForecastRequest(req.horizon, req.step, req.quantiles, req.model, history.end + req.step)
    out = []
    for key, y in history.series.items():
        series_req = req
        if req.origin - y.index[-1] > max(req.horizon, STALE_AFTER):
            # a series that stopped long before the others is forecast from its own end, not
            # extrapolated across the silence; the note says so
            series_req = ForecastRequest(req.horizon, req.step, req.quantiles, req.model, None)
            log.warning("series %s ends at %s, long before %s: forecast from its own end", key, y.index[-1], req.origin)
        out.append(forecast_series(key, y, series_req))
        if progress:
            progress(1)
    return out


def forecasts_to_frame(forecasts: Iterable[Forecast]) -> pd.DataFrame:
    frames = [f.to_frame() for f in forecasts]
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()
