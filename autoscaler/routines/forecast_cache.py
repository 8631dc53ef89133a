"""The forecast cache between runs and its triage (LoopSettings.forecast_refresh, forecast_budget).

A forecast made by an earlier run serves this one while it is young, still covers the steps the
decisions read, and nothing observed since rose above its highest quantile. Series due a new
forecast are ranked: surprised first, then new ones, then the oldest aged ones; with a budget, aged
series whose forecast still covers the run wait (up to twice `forecast_refresh`) and new ones wait
for a later run. The cache never serves a series that is gone, stale or skipped.
"""
from __future__ import annotations

import zlib
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from predictor.history import History
from predictor.timestamps import epoch_ns
from predictor.types import Forecast

_PRIORITY = {"surprised": 0, "new": 1, "aged": 2}


def spread(sid: str) -> float:
    """A stable factor in [0.5, 1) per series: refreshes of a cold cache spread over later runs."""
    return 0.5 + (zlib.crc32(sid.encode()) % 1000) / 2000.0


def covers(fc: Forecast | None, origin: pd.Timestamp, need_steps: int, step: pd.Timedelta) -> bool:
    """The forecast starts at or before `origin` and reaches `need_steps` past it."""
    if fc is None:
        return False
    start = int(epoch_ns(fc.index)[0])
    return origin.value >= start and (origin.value - start) // step.value + need_steps <= len(fc.index)


def cache_state(fc: Forecast, y: pd.Series, origin: pd.Timestamp, need_steps: int, step: pd.Timedelta,
                max_age: pd.Timedelta) -> str:
    """`fresh` when a cached forecast serves this run: young enough, still covering the steps the
    decisions read, and no observation since it was made above its highest quantile; else
    `surprised` or `aged`."""
    start = int(epoch_ns(fc.index)[0])
    o, st = origin.value, step.value
    if not covers(fc, origin, need_steps, step):
        return "aged"
    # observations since the forecast's first step, against its top quantile at the same steps
    # (both series are on the same regular grid: positions, not a pandas join, at 20,000 series a run)
    yi = epoch_ns(y.index)
    pos = int(np.searchsorted(yi, start))
    seen = y.to_numpy()[pos:]
    if len(seen):
        k = int((yi[pos] - start) // st)
        top = fc.values[k: k + len(seen), -1]
        with np.errstate(invalid="ignore"):
            if bool(np.any(seen[: len(top)] > top)):
                return "surprised"
    return "aged" if o - start >= max_age.value else "fresh"


def shifted(fc: Forecast, off: int) -> Forecast:
    """The forecast from its step `off` on (a cached forecast, seen from a later origin)."""
    if off <= 0:
        return fc
    return Forecast(fc.series, fc.index[off:], fc.quantiles, fc.values[off:], fc.model, fc.version,
                    fc.backtest_score, fc.notes)


def usable_series(needed: list[str], history: History, now: pd.Timestamp, stale_after: pd.Timedelta,
                  min_history: pd.Timedelta, stale_text: str, min_text: str,
                  skipped: dict[str, str]) -> dict[str, pd.Series]:
    """The needed series fit to decide from: a sample within `stale_after` of now and at least
    `min_history` between their first and last sample. The others go to `skipped` with the reason."""
    keep: dict[str, pd.Series] = {}
    for sid in needed:
        y = history.series[sid]
        ok = np.flatnonzero(~np.isnan(y.to_numpy()))
        ns_ = epoch_ns(y.index)  # int64 nanoseconds (any pandas unit): no Timestamp boxing at 20,000 series
        if len(ok) == 0 or now.value - ns_[ok[-1]] > stale_after.value:
            skipped[sid] = f"no sample in the last {stale_text} (gap or stopped series)"
        elif ns_[ok[-1]] - ns_[ok[0]] < min_history.value:
            skipped[sid] = f"under {min_text} of history"
        else:
            keep[sid] = y
    return keep


@dataclass
class Triage:
    """One run's split of the usable series: served from the cache, or to forecast now."""

    served: dict[str, Forecast] = field(default_factory=dict)  # series -> cached forecast, shifted to the origin
    todo: dict[str, pd.Series] = field(default_factory=dict)  # series -> history, to forecast this run


@dataclass
class ForecastCache:
    """series -> the forecast as it was made, valid for one generation (registry version, model,
    quantiles): a new generation empties it."""

    entries: dict[str, Forecast] = field(default_factory=dict)
    generation: tuple[Any, ...] | None = None

    def start(self, generation: tuple[Any, ...]) -> None:
        if self.generation != generation:
            self.entries.clear()
            self.generation = generation

    def triage(self, keep: dict[str, pd.Series], origin: pd.Timestamp, need_steps: int, step: pd.Timedelta,
               refresh: pd.Timedelta | None, budget: int | None, skipped: dict[str, str]) -> Triage:
        """Which series the cache serves and which are forecast now (module docstring)."""
        out = Triage()
        due: list[tuple[int, int, str]] = []  # (priority, -age, series)
        for sid, y in keep.items():
            cached = self.entries.get(sid)
            status = "new" if cached is None else "aged" if refresh is None else \
                cache_state(cached, y, origin, need_steps, step, refresh * spread(sid))
            if cached is not None and status == "fresh":
                out.served[sid] = self._from(cached, origin, step)
            else:
                age = (origin.value - int(epoch_ns(cached.index)[0])) if cached is not None else 0
                due.append((_PRIORITY[status], -age, sid))
        due.sort()
        for prio, neg_age, sid in due:
            cached = self.entries.get(sid)
            full = budget is not None and len(out.todo) >= budget
            if cached is not None and full and prio == 2 and refresh is not None and \
                    -neg_age < 2 * refresh.value and covers(cached, origin, need_steps, step):
                out.served[sid] = self._from(cached, origin, step)
            elif full and prio == 1:
                skipped[sid] = f"waiting for its first forecast (forecast_budget {budget} per run)"
            else:
                out.todo[sid] = keep[sid]
        return out

    @staticmethod
    def _from(cached: Forecast, origin: pd.Timestamp, step: pd.Timedelta) -> Forecast:
        return shifted(cached, (origin.value - epoch_ns(cached.index)[0]) // step.value)

    def store(self, made: list[Forecast], forecasts: dict[str, Forecast], skipped: dict[str, str]) -> None:
        """Keep this run's new forecasts; one with a non-finite value is dropped (no decision from it)."""
        for fc in made:
            if not np.all(np.isfinite(fc.values)):
                skipped[fc.series] = f"forecast {fc.model} has non-finite values: no decision from it"
                self.entries.pop(fc.series, None)
                continue
            self.entries[fc.series] = fc
            forecasts[fc.series] = fc

    def keep_only(self, series: dict[str, pd.Series]) -> None:
        """Forget series gone, stale or skipped: never decide from an old forecast."""
        for sid in set(self.entries) - set(series):
            del self.entries[sid]
