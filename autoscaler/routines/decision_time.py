"""Decision-time forecasts in the serving loop (issue 12, item 1): the registry's decision-time
models, when present and fresh, replace the forecast a VPA or HPA decision reads; the day-ahead
forecast stays the fallback, and the forecast's label (hence the reason) says which one was used.

The quantiles come from `predictor.pipeline.decision` — the walk and overlay that
`tidewise replay --decision-model` runs — with one `DecisionWalk` per (decision, series) kept
between runs (the per-series calibration), so a serve started at a replay's first decision time
computes the replay's numbers. The raw quantiles of every series the previous run read are made
at once (`raw_recent`, equal to the per-series `raw_from_history`), with the features' levels kept
between runs (`RecentLevels`). HPA reads the demand from now through start-up + look-ahead. VPA
reads the hour-peak model (features "hour_peak") at each series' budget level and, in the restart
regime, the day plan (`routines/tidal.py`, no walk); a VPA model of other features (an older
registry) is not read: the day-ahead forecast serves and its label says why.
"""
from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Iterator, Mapping

import numpy as np
import pandas as pd

from autoscaler.routines.tidal import HOUR_PEAK, TidalRun, TidalServing
from autoscaler.settings import LoopSettings, VpaSettings
from predictor.pipeline.decision import (DecisionWalk, RecentLevels, actual_from_history, hpa_span, overlay,
                                         raw_from_history, raw_recent)
from predictor.durations import parse_duration
from predictor.history import History
from predictor.models.decision_time import DecisionTimeGBM
from predictor.pipeline.calibration import PEAK_LEVELS as LEVELS
from predictor.timestamps import position
from predictor.types import Forecast

if TYPE_CHECKING:
    from predictor.registry import RegistryVersion

log = logging.getLogger(__name__)
CONTEXT = pd.Timedelta("9D")  # history a raw forecast reads (a week ago + a day of level); serve fetches 8d


@dataclass
class DecisionRun:
    """What one run needs to build decision-time forecasts for one kind ("vpa" or "hpa")."""

    kind: str
    model: DecisionTimeGBM | None
    why_not: str  # why the model cannot serve this run ("" when it can)
    version: str
    history: History
    origin: pd.Timestamp
    step: pd.Timedelta


class DecisionView(Mapping[str, Forecast]):
    """series -> the forecast a decision reads: decision-time when it can be made, else the
    day-ahead one relabelled with why not. Built lazily: only series a decision reads are forecast."""

    def __init__(self, base: Mapping[str, Forecast], run: DecisionRun, walks: dict[tuple[str, str], DecisionWalk],
                 levels: RecentLevels | None = None):
        self.base = base
        self.run = run
        self.walks = walks
        self.levels = levels if levels is not None else RecentLevels()
        self.made: dict[str, Forecast] = {}
        # the raw quantiles of the series the previous run read, made at once on the first read
        # (`raw_recent`): one by one the features over 9 days cost 22 ms a series
        self.raw: dict[str, dict[pd.Timestamp, tuple[np.ndarray, float]]] = {}
        self.expected = [k[1] for k in walks if k[0] == run.kind and k[1] in base]
        self.contexts: dict[str, pd.Series] = {}  # series -> its cut to the context, once a run
        self.stale: dict[str, str] = {}  # series -> why its features are stale ("": they are not), once a run

    def __getitem__(self, sid: str) -> Forecast:
        if sid not in self.made:
            self.made[sid] = self._make(sid, self.base[sid])
        return self.made[sid]

    def __iter__(self) -> Iterator[str]:
        return iter(self.base)

    def __len__(self) -> int:
        return len(self.base)

    def __contains__(self, sid: object) -> bool:
        return sid in self.base

    def _make(self, sid: str, day_ahead: Forecast) -> Forecast:
        r = self.run
        why = r.why_not or self._stale_features(sid)
        q = None
        if not why and r.model is not None:
            q = self._quantiles(sid, r.model)
            why = "" if q is not None else "the model's features are missing before this origin"
        if q is None or r.model is None:
            return _relabelled(day_ahead, f"{day_ahead.model} [day-ahead; decision-time {r.kind}: {why}]")
        m = r.model
        label = f"decision_time_{m.backend} [{r.kind}: peak of the next {_minutes(int(m.span) * r.step)}, calibrated]"
        return overlay(sid, q, m.quantiles, r.origin, r.step, len(day_ahead.index), label, r.version)

    def _stale_features(self, sid: str) -> str:
        """Why the series' latest samples cannot feed the model ("" when they can): the features
        are the last minutes, so the sample just before the origin must be there. Once a run."""
        why = self.stale.get(sid)
        if why is None:
            why = self.stale[sid] = self._staleness(sid)
        return why

    def _staleness(self, sid: str) -> str:
        y = self.run.history.series.get(sid)
        since = self.run.origin - self.run.step
        recent = y.to_numpy(dtype=float)[position(y.index, since):] if y is not None else []
        if np.isfinite(recent).any():
            return ""  # a sample since origin - step (last_valid_index scans the whole series: 0.1 ms)
        last = y.last_valid_index() if y is not None else None
        return f"features stale (newest sample {last}, origin {self.run.origin})"

    def _quantiles(self, sid: str, model: DecisionTimeGBM) -> np.ndarray | None:
        r = self.run
        key = (r.kind, sid)
        walk = self.walks.get(key)
        if walk is None or _cold(walk, r.origin, model):
            walk = self.walks[key] = DecisionWalk(model.quantiles, int(model.span), r.step)  # a cold start
        y = self._context(sid)
        if model.features == "recent":
            raw = self._batched(sid, model)
        else:
            raw = raw_from_history(model, y, _todo(walk, r.origin, r.step))
        return walk.advance(r.origin, raw.get, actual_from_history(y, int(model.span), r.step))

    def _context(self, sid: str) -> pd.Series:
        cut = self.contexts.get(sid)
        if cut is None:
            y = self.run.history.series[sid]
            first = position(y.index, self.run.origin - CONTEXT)  # y.index >= origin - CONTEXT
            cut = self.contexts[sid] = y.iloc[first:] if first else y  # serve's 8-day window is all context
        return cut

    def _batched(self, sid: str, model: DecisionTimeGBM) -> dict[pd.Timestamp, tuple[np.ndarray, float]]:
        """`sid`'s raw quantiles at the origins its walk has still to take, made with those of every
        series the previous run read (and this one has not yet) in one `raw_recent`."""
        if sid not in self.raw:
            r = self.run
            todo = {}
            for s in [sid, *self.expected]:
                if s not in self.raw and s not in todo and (s == sid or not self._stale_features(s)):
                    walk = self.walks.get((r.kind, s))
                    todo[s] = _todo(None if _cold(walk, r.origin, model) else walk, r.origin, r.step)
            self.raw.update(raw_recent(model, {s: self._context(s) for s in todo}, todo, self.levels, CONTEXT))
        return self.raw[sid]


def _cold(walk: DecisionWalk | None, origin: pd.Timestamp, model: DecisionTimeGBM) -> bool:
    """Whether a series' walk starts again at `origin`: none yet, older than the context a raw
    forecast reads, ahead of the origin, or of other quantiles."""
    return walk is None or walk.done is None or walk.done < origin - CONTEXT or walk.done > origin \
        or len(walk.cal.quantiles) != len(model.quantiles)


def _todo(walk: DecisionWalk | None, origin: pd.Timestamp, step: pd.Timedelta) -> list[pd.Timestamp]:
    """The origins a walk (None: a cold one) takes up to `origin`."""
    if walk is None or walk.done is None:
        return [origin]
    if walk.done + step == origin:  # a run one step on (most runs): no date_range
        return [origin]
    return list(pd.date_range(walk.done + step, origin, freq=step))


def _relabelled(fc: Forecast, model: str) -> Forecast:
    return Forecast(fc.series, fc.index, fc.quantiles, fc.values, model, fc.version, fc.backtest_score, fc.notes)


def _minutes(span: pd.Timedelta) -> str:
    m = int(span.total_seconds() // 60)
    return f"{m // 60}h" if m % 60 == 0 else f"{m}m"


@dataclass
class DecisionTimeServing:
    """The serving loop's decision-time state: one calibration walk per (decision, series)."""

    walks: dict[tuple[str, str], DecisionWalk] = field(default_factory=dict)
    levels: dict[str, RecentLevels] = field(default_factory=dict)  # per kind: the features' levels by series
    tidal: TidalServing = field(default_factory=TidalServing)  # VPA: budget levels and day plans per series

    def views(self, registry: RegistryVersion | None, loop: LoopSettings, hpa_startup: str, hpa_look: str,
              base: Mapping[str, Forecast], history: History, origin: pd.Timestamp, step: pd.Timedelta
              ) -> tuple[Mapping[str, Forecast] | None, Mapping[str, Forecast] | None]:
        """(what VPA decisions read, what HPA decisions read) this run: None (the day-ahead
        forecasts, as without this module) for a kind switched off (`loop.decision_time_vpa|hpa`)
        or when the registry holds no decision-time model, else a DecisionView."""
        enabled = {"vpa": loop.decision_time_vpa, "hpa": loop.decision_time_hpa}
        if registry is None or not any(enabled.values()) or not (registry.decision_models or registry.decision_errors):
            self.walks.clear()
            self.levels.clear()
            return None, None
        out: list[DecisionView | None] = []
        for kind in ("vpa", "hpa"):
            model = registry.decision_models.get(kind)
            why = why_not(registry, kind, loop, origin, step, hpa_startup, hpa_look)
            if not enabled[kind] or (kind == "vpa" and not why):  # the hour-peak model serves VPA (tidal.py)
                out.append(None)
                continue
            out.append(DecisionView(base, DecisionRun(kind, model, why, registry.version, history, origin, step),
                                    self.walks, self.levels.setdefault(kind, RecentLevels())))
        for k in [k for k in self.walks if k[1] not in base or not enabled[k[0]]]:  # gone, stale, skipped, off
            del self.walks[k]
        for kind, lv in self.levels.items():  # only the series a walk reads (a cold run may make others)
            lv.keep_only({k[1] for k in self.walks if k[0] == kind})
        return out[0], out[1]

    def tidal_run(self, registry: RegistryVersion | None, loop: LoopSettings, vpa: VpaSettings, history: History,
                  origin: pd.Timestamp, step: pd.Timedelta) -> TidalRun | None:
        """The hour-peak model and day plans VPA decisions read this run (routines/tidal.py), or None
        (then `views` labels the day-ahead forecast with why) when `loop.decision_time_vpa` is off or
        the registry's "vpa" model is missing, stale or not the hour-peak model."""
        if registry is None or not loop.decision_time_vpa or why_not(registry, "vpa", loop, origin, step, "", ""):
            self.tidal.levels.clear()
            self.tidal.plans.clear()
            return None
        return self.tidal.run(registry.decision_models["vpa"], registry.version, history, origin, vpa)


def why_not(registry: RegistryVersion, kind: str, loop: LoopSettings, origin: pd.Timestamp, step: pd.Timedelta,
            hpa_startup: str, hpa_look: str) -> str:
    """Why the registry's `kind` decision-time model cannot serve this run ("" when it can)."""
    model, errors, version = registry.decision_models.get(kind), registry.decision_errors, registry.version
    end = pd.Timestamp(registry.manifest.get("data_window", {}).get("end", origin))
    age = origin - (end if end.tzinfo else end.tz_localize("UTC"))
    max_age = loop.decision_max_age
    if model is None:
        return errors.get(kind, "") and f"not loaded ({errors[kind]})" or f"no model in registry {version}"
    if age > parse_duration(max_age):
        return f"model stale (trained on data up to {end}, older than {max_age})"
    if model.step_ != step:
        return f"model step {model.step_} is not the loop's {step}"
    if kind == "hpa" and int(model.span) != hpa_span(parse_duration(hpa_startup), parse_duration(hpa_look), step):
        return f"model trained for {int(model.span)} steps ahead; startup {hpa_startup} needs another span"
    if kind == "vpa" and model.features != HOUR_PEAK:
        return (f"model features {model.features!r}, not {HOUR_PEAK!r} (an older registry: the VPA reads only "
                f"the hour-peak model; `tidewise train` fits it)")
    if kind == "vpa" and (min(model.quantiles) > LEVELS[0] or max(model.quantiles) < LEVELS[-1]):
        return f"model quantiles {list(model.quantiles)} do not span the budget levels {LEVELS[0]}..{LEVELS[-1]}"
    return ""
