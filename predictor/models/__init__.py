"""Forecasters. Every one follows the contract in `base.py`; `MODELS` maps names to factories."""
from predictor.models.base import Forecaster, NotFittedError
from predictor.models.baselines import DecayingHistogram, SeasonalNaive

MODELS = {
    "seasonal_naive_daily": lambda: SeasonalNaive(season="1d"),
    "seasonal_naive_weekly": lambda: SeasonalNaive(season="7d"),
    "decaying_histogram": lambda: DecayingHistogram(),
}

__all__ = ["Forecaster", "NotFittedError", "SeasonalNaive", "DecayingHistogram", "MODELS"]
