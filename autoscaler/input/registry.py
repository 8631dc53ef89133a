"""The model registry step: load and verify a `predictor.registry` version, keep the last good one.

`load_last_good` checks the manifest chain (and its HMAC when a key file is configured) and every
checksum before any artifact is parsed — artifacts are JSON and NumPy arrays, never pickles — and
falls back to the newest version that verifies *and loads*; the loop keeps the version it last
loaded when even that fails. Forecasts are made with the stored per-series choices of *that*
version (`predictor.pipeline.serving.forecast_version` re-checks cheaply before each use that its
folder did not change on disk since, so a changed version cannot slip in), at the quantiles it was
trained for. A version is read and verified once (`RegistryReader`), not on every run.

Every refused version, and the version loaded, are told to the reader's `events` (serve's metrics:
`tidewise_registry_refused_total{reason}`, `tidewise_registry_version_info{version}`).
"""
from __future__ import annotations

import os
from dataclasses import replace
from typing import TYPE_CHECKING, Callable, Protocol, runtime_checkable

from predictor.pipeline.forecasting import ForecastRequest
from predictor.history import History
from predictor.types import Forecast

if TYPE_CHECKING:  # annotations only: predictor.registry is imported when a version is first read (below)
    from predictor.registry import RegistryVersion

# what the loop's registry step calls: a folder in, the verified version it serves out (RegistryError when none)
RegistryLoader = Callable[[str], "RegistryVersion"]

@runtime_checkable
class RegistryEvents(Protocol):
    """Told of each refused version and of the version loaded (autoscaler.metrics.Metrics)."""

    def registry_refused(self, reason: str) -> None: ...

    def registry_loaded(self, version: str) -> None: ...


class RegistryReader:
    """The loop's registry loader, reading each version once. A call returns the newest version
    under `path` that verifies (`load_last_good`; RegistryError when none does). `key_file` is read
    on every call, so a rotated Secret takes effect without a restart. A call whose `latest` still
    names the version loaded before, whose folder is unchanged on disk (`check_unchanged`: a stat
    per file, nothing re-hashed) and whose key is the same gets that loaded version back; anything
    else (a new version, a changed folder, a rotated key) loads and verifies afresh."""

    def __init__(self, key_file: str | None = None, events: RegistryEvents | None = None):
        self.key_file = key_file
        self.events = events
        self._loaded: RegistryVersion | None = None
        self._key: bytes | None = None

    def __call__(self, path: str) -> RegistryVersion:
        from predictor.registry import RegistryError, check_unchanged, load_last_good, read_key, resolve

        key = None
        if self.key_file:
            try:
                key = read_key(self.key_file, "registry key file")
            except Exception as exc:  # noqa: BLE001 - a vanished Secret refuses the load, it does not stop the loop
                self._refused("key")
                raise RegistryError(str(exc), reason="key") from None
        old = self._loaded
        if old is not None and key == self._key:
            try:
                if os.path.realpath(resolve(path)) == os.path.realpath(old.path):
                    check_unchanged(old)
                    return old
            except RegistryError:
                pass  # gone, moved or changed: verify afresh below
        refused: list[str] = []

        def on_refused(version: str, exc: RegistryError) -> None:
            refused.append(version)
            self._refused(exc.reason)

        try:
            loaded = self._loaded = load_last_good(path, on_refused, key=key)
        except RegistryError as exc:
            if not refused:  # nothing to try at all: no folder, no `latest`, no version
                self._refused(exc.reason)
            raise
        self._key = key
        if self.events is not None:
            self.events.registry_loaded(str(loaded.version))
        return loaded

    def _refused(self, reason: str) -> None:
        if self.events is not None:
            self.events.registry_refused(reason)


def registry_forecaster(registry: RegistryVersion, path: str) -> Callable[[History, ForecastRequest], list[Forecast]]:
    """Forecast with one loaded version (re-checked on use by `forecast_version`, not reloaded)."""
    from predictor.pipeline.serving import forecast_version

    def forecast(history: History, req: ForecastRequest) -> list[Forecast]:
        # the registry answers at the quantiles it was trained for; decisions pick the nearest
        # higher one they need (autoscaler.logic.vpa.quantile_column)
        return forecast_version(registry, history, replace(req, quantiles=tuple(registry.quantiles)))

    return forecast
