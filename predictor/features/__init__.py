"""Leakage-free features: calendar (cyclic time of day and week, Fourier terms), day/week lags,
recent level and spread, and a series-level scale so that one model can serve many series."""
from predictor.features.calendar import calendar_features, fourier
from predictor.features.direct import FEATURE_NAMES, SeriesContext, context_of, direct_features, training_rows
from predictor.features.scale import level_and_scale

__all__ = ["calendar_features", "fourier", "FEATURE_NAMES", "SeriesContext", "context_of", "direct_features",
           "training_rows", "level_and_scale"]
