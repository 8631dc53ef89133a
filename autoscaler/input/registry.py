"""The model registry step: load and verify `predictor.registry`, keep the last good version.

`predictor.registry` (written alongside) verifies every checksum on load and raises on a tampered
or incompatible registry; this adapter only finds its entry points, so that the loop depends on
its behaviour and not on its exact names.
"""
from __future__ import annotations

import importlib
from typing import Any, Callable

from predictor.errors import TidewiseError
from predictor.forecasting import ForecastRequest
from predictor.history import History
from predictor.types import Forecast


class RegistryUnavailable(TidewiseError):
    """There is no `predictor.registry` module (or no loader in it) in this build."""


def _module() -> Any:
    try:
        return importlib.import_module("predictor.registry")
    except ImportError as exc:
        raise RegistryUnavailable(f"predictor.registry is not available ({exc})") from exc


def load_registry(path: str) -> Any:
    """Load and verify the registry at `path`; whatever `predictor.registry` raises propagates."""
    mod = _module()
    for name in ("load_registry", "open_registry", "load"):
        fn = getattr(mod, name, None)
        if callable(fn):
            return fn(path)
    cls = getattr(mod, "Registry", None)
    for name in ("load", "open"):
        fn = getattr(cls, name, None) if cls is not None else None
        if callable(fn):
            return fn(path)
    raise RegistryUnavailable("predictor.registry has no load_registry/Registry.load entry point")


def registry_forecaster(registry: Any, path: str) -> Callable[[History, ForecastRequest], list[Forecast]]:
    """Forecast with a loaded registry (falls back to passing the folder if that is all it takes)."""
    mod = _module()
    fn = getattr(mod, "forecast_with_registry")

    def forecast(history: History, req: ForecastRequest) -> list[Forecast]:
        try:
            return fn(registry, history, req)
        except TypeError:
            return fn(path, history, req)

    return forecast
