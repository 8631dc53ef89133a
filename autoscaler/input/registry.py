"""The model registry step: load and verify a `predictor.registry` version, keep the last good one.

`load_last_good` checks the manifest chain (and its HMAC when a key file is configured) and every
checksum before any artifact is parsed — artifacts are JSON and NumPy arrays, never pickles — and
falls back to the newest version that verifies *and loads*; the loop keeps the version it last
loaded when even that fails. Forecasts are made with the stored per-series choices of *that*
version, loaded once per run (`predictor.serving.forecast_version` re-checks cheaply that its
folder did not change on disk since, so a changed version cannot slip in), at the quantiles it was
trained for.
"""
from __future__ import annotations

from dataclasses import replace
from typing import Any, Callable

from predictor.forecasting import ForecastRequest
from predictor.history import History
from predictor.types import Forecast


def load_registry(path: str, key_file: str | None = None) -> Any:
    """The newest verified version under `path` (a RegistryVersion); RegistryError when none
    verifies. `key_file` is read on every load, so a rotated Secret takes effect without a restart."""
    from predictor.registry import RegistryError, load_last_good, read_key

    key = None
    if key_file:
        try:
            key = read_key(key_file, "registry key file")
        except Exception as exc:  # noqa: BLE001 - a vanished Secret refuses the load, it does not stop the loop
            raise RegistryError(str(exc)) from None
    return load_last_good(path, key=key)


def registry_forecaster(registry: Any, path: str) -> Callable[[History, ForecastRequest], list[Forecast]]:
    """Forecast with one loaded version (re-checked on use by `forecast_version`, not reloaded)."""
    from predictor.serving import forecast_version

    def forecast(history: History, req: ForecastRequest) -> list[Forecast]:
        # the registry answers at the quantiles it was trained for; decisions pick the nearest
        # higher one they need (autoscaler.logic.vpa.quantile_column)
        return forecast_version(registry, history, replace(req, quantiles=tuple(registry.quantiles)))

    return forecast
