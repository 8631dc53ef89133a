"""The model registry step: load and verify a `predictor.registry` version, keep the last good one.

`load_last_good` verifies every checksum before anything is unpickled and falls back to the newest
version that verifies; the loop keeps the version it last loaded when even that fails. Forecasts are
made with the stored per-series choices of *that* version (its folder is named explicitly, so a
tampered `latest` cannot slip in), at the quantiles it was trained for.
"""
from __future__ import annotations

from dataclasses import replace
from typing import Any, Callable

from predictor.forecasting import ForecastRequest
from predictor.history import History
from predictor.types import Forecast


def load_registry(path: str) -> Any:
    """The newest verified version under `path` (a RegistryVersion); RegistryError when none verifies."""
    from predictor.registry import load_last_good

    return load_last_good(path)


def registry_forecaster(registry: Any, path: str) -> Callable[[History, ForecastRequest], list[Forecast]]:
    """Forecast with one loaded version (re-verified on use by `forecast_with_registry`)."""
    from predictor.registry import forecast_with_registry

    def forecast(history: History, req: ForecastRequest) -> list[Forecast]:
        # the registry answers at the quantiles it was trained for; decisions pick the nearest
        # higher one they need (autoscaler.logic.vpa.quantile_column)
        return forecast_with_registry(registry.path, history, replace(req, quantiles=tuple(registry.quantiles)))

    return forecast
