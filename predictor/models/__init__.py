"""Forecasters. Every one follows the contract in `base.py`; `MODELS` maps names to factories."""
from predictor.models.base import Forecaster, NotFittedError
from predictor.models.baselines import DecayingHistogram, SeasonalNaive
from predictor.models.decomposition import STLForecaster
from predictor.models.gbm import GBM, GlobalGBM
from predictor.models.profile import SeasonalMedian

MODELS = {
    "seasonal_naive_daily": lambda: SeasonalNaive(season="1d"),
    "seasonal_naive_weekly": lambda: SeasonalNaive(season="7d"),
    "decaying_histogram": lambda: DecayingHistogram(),
    "seasonal_median": lambda: SeasonalMedian(),
    "stl": lambda: STLForecaster(),
    "mstl": lambda: STLForecaster(weekly=True),
    "gbm": lambda: GBM(),
    "gbm_global": lambda: GlobalGBM(),
}

__all__ = ["Forecaster", "NotFittedError", "SeasonalNaive", "DecayingHistogram", "SeasonalMedian",
           "STLForecaster", "GBM", "GlobalGBM", "MODELS"]
