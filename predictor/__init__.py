"""Tidewise predictor: the pure library (data model, history sources, features, forecasters, profiles).

It never imports `kubernetes` and never writes cgroups; everything else in Tidewise builds on it.
"""

__version__ = "0.1.0"
