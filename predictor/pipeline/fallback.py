"""What runs when the chosen model cannot: the no-backtest default and the per-series fallbacks.

Series are independent: a model that raises on one series falls back to the decaying histogram
for that series alone, and a stored choice whose model needs more history than the series has
(`Forecaster.history_needed`) falls back to the no-backtest default that the history does feed.
Either way the caller records the model that ran and a note that says why.
"""
from __future__ import annotations

import logging
from typing import Sequence

import numpy as np
import pandas as pd

from predictor.durations import DAY, WEEK
from predictor.features.seasonality import SEASONAL_ACF, acf_at
from predictor.models import MODELS, DecayingHistogram, Forecaster
from predictor.pipeline.choice import history_needed, predict_from
from predictor.types import Choice

log = logging.getLogger(__name__)


def choose_baseline(y: pd.Series, step: pd.Timedelta, max_history: pd.Timedelta | None = None) -> tuple[Forecaster, str]:
    """The no-backtest default (too little history for a fold): weekly naive where the weekly
    cycle is clearly stronger and three weeks exist (and `max_history`, what serving will feed it,
    holds two weeks), daily naive where a daily cycle exists (ACF >= 0.3), else the decaying histogram."""
    span = y.index[-1] - y.index[0]
    day, week = acf_at(y, DAY, step), acf_at(y, WEEK, step)
    weekly_fed = max_history is None or MODELS["seasonal_naive_weekly"]().history_needed() <= max_history
    if weekly_fed and span >= 3 * WEEK and np.isfinite(week) and week >= SEASONAL_ACF and week > (day if np.isfinite(day) else 0) + 0.05:
        return MODELS["seasonal_naive_weekly"](), f"weekly ACF {week:.2f} > daily ACF {day:.2f}"
    if span >= 2 * DAY and np.isfinite(day) and day >= SEASONAL_ACF:
        return MODELS["seasonal_naive_daily"](), f"daily ACF {day:.2f} >= {SEASONAL_ACF}"
    return DecayingHistogram(), f"no daily cycle (ACF {day:.2f})" if np.isfinite(day) else "under 1.5 days of history"


def fall_back(key: str, y: pd.Series, step: pd.Timedelta, steps: int, quantiles: Sequence[float],
              origin: pd.Timestamp, failed: str, exc: Exception, notes: list[str]) -> tuple[np.ndarray, str]:
    """The decaying histogram's forecast of `y` after model `failed` raised `exc`, and its label;
    the note says so."""
    fallback = DecayingHistogram()
    notes.append(f"{failed} failed ({exc}); fell back to {fallback.label}")
    log.warning("series %s: %s failed (%s); using %s", key, failed, exc, fallback.label)
    return predict_from(fallback, y, step, steps, quantiles, origin), fallback.label


def history_short(y: pd.Series, step: pd.Timedelta, origin: pd.Timestamp, choice: Choice) -> str | None:
    """Why `y` cannot feed the chosen model (None when it can): its span before the origin is
    under the history the model declares it needs."""
    try:
        need = history_needed(choice.model, choice.members)
    except ValueError:
        return None  # an unknown name fails when it runs, and falls back there
    past = y.index[y.index < origin]
    span = past[-1] - past[0] + step if len(past) else pd.Timedelta(0)
    if span >= need:
        return None
    return f"{choice.model} needs {_days(need)} of history, the series has {_days(span)}"


def _days(span: pd.Timedelta) -> str:
    return f"{span / DAY:.3g} days"
