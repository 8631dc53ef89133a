"""Decision-time forecasts as the decisions read them — the one code path of `tidewise serve` and
`tidewise replay --decision-model` (issue 12, item 1), in the forecasting pipeline.

`DecisionWalk` carries one series' calibrated quantiles from origin to origin: the model's raw
quantiles at each origin (made from the samples before it) plus the per-series adaptive-conformal
offsets learnt from every earlier origin whose target window has been observed since. It starts
cold (offsets 0) at the first origin it is asked for, in serve as in replay. `calibrated_series` is
the same calibration over every origin of a series at once (training's held-out check, and the
reference the walk is tested against).

`overlay` turns those quantiles into a `Forecast` the HPA code reads unchanged. The VPA reads the
hour-peak model through `raw_at_origin` (every series at one origin) and a per-series budget level
(`predictor.pipeline.calibration.BudgetLevel`), not through this walk.
"""
from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from typing import Callable, Mapping, Sequence

import numpy as np
import pandas as pd

from predictor.features.decision import next_max
from predictor.features import decision_origin as origin_features
from predictor.features.hour_peak import hour_peak_features_last, lookback
from predictor.models.base import non_crossing
from predictor.models.decision_time import FEATURE_SETS, DecisionTimeGBM
from predictor.pipeline.calibration import AdaptiveConformal
from predictor.timestamps import epoch_ns, grid
from predictor.types import Forecast

RawAt = Callable[[pd.Timestamp], "tuple[np.ndarray, float] | None"]  # origin -> (raw quantiles, scale)
ActualAt = Callable[[pd.Timestamp], float]  # origin -> its observed target (the peak of its span)


def hpa_span(startup: pd.Timedelta, look: pd.Timedelta, step: pd.Timedelta) -> int:
    """Steps of the HPA target: the demand from now through now + startup + look (what
    `predictive_min_replicas` carries: timeline[lead // step : lead // step + look/step + 1])."""
    return int(startup // step) + max(1, int(-(-look // step))) + 1


class DecisionWalk:
    """One series' calibrated decision-time quantiles, walked forward origin by origin."""

    def __init__(self, quantiles: Sequence[float], span: int, step: pd.Timedelta, rate: float = 0.05):
        self.span = int(span)
        self.step = pd.Timedelta(step)
        self.cal = AdaptiveConformal(quantiles, rate)
        self.out: dict[pd.Timestamp, np.ndarray] = {}
        self.done: pd.Timestamp | None = None  # the last origin walked

    def advance(self, origin: pd.Timestamp, raw_at: RawAt, actual_at: ActualAt) -> np.ndarray | None:
        """The calibrated quantiles at `origin` (None: no raw forecast there), after learning from
        every origin whose target window ended before it. Origins are asked in increasing order."""
        t = origin if self.done is None else self.done + self.step
        reach = self.span * self.step
        while t <= origin:
            seen = t - reach  # the latest origin whose target y[seen .. t-1] is observed
            if seen in self.out:
                self.cal.update(self.out[seen], actual_at(seen))
            raw = raw_at(t)
            if raw is not None:
                self.out[t] = self.cal.apply(raw[0], raw[1])
            t += self.step
        if self.done is None or origin > self.done:
            self.done = origin
        # only the last `span` origins are read again (by the updates still to come); the keys are in
        # the order they were walked, so the old ones lead
        oldest = origin - reach
        while self.out and next(iter(self.out)) < oldest:
            del self.out[next(iter(self.out))]
        return self.out.get(origin)


def raw_from_history(model: DecisionTimeGBM, y: pd.Series, origins: Sequence[pd.Timestamp]
                     ) -> dict[pd.Timestamp, tuple[np.ndarray, float]]:
    """The model's raw quantiles (and the series' scale) at each of `origins`, each made from the
    samples of `y` before it; `y` is put on the model's grid first. Origins past y's end + one
    step, or whose quantiles are not finite, are left out."""
    if not len(y) or not len(origins):
        return {}
    step = model.step_
    last = max(origins)
    grid = y.asfreq(step)
    if grid.index[-1] < last:  # the origin itself is the row after the last sample
        grid = grid.reindex(pd.date_range(grid.index[0], last, freq=step))
    x, level, scale = FEATURE_SETS[model.features][1](grid, step, int(model.span))
    pos = grid.index.get_indexer(pd.DatetimeIndex(origins))
    rows = pos[pos >= 0]
    if not len(rows):
        return {}
    # the trees read only the rows asked for (a serving run needs one or a few per series)
    qs = np.asarray(model.quantiles, dtype=float)
    q = non_crossing(model.predict_scaled(x[rows]), qs) * scale[rows, None] + level[rows, None]
    out = {}
    for o, i, r in zip([o for o, p in zip(origins, pos) if p >= 0], rows, q):
        if np.all(np.isfinite(r)):
            out[o] = (r, float(scale[i]))
    return out


def raw_at_origin(model: DecisionTimeGBM, series: Mapping[str, pd.Series], origin: pd.Timestamp,
                  chunk: int = 500, fresh_only: bool = False) -> dict[str, tuple[np.ndarray, float]]:
    """An hour-peak model's raw quantiles (and the series' scale) at one origin for many series at
    once: each series' samples before the origin put on the model's grid, the features of all
    computed together (`hour_peak_features_last`) and the trees walked once per chunk — what a
    serving run over thousands of workloads can afford. A chunk of 500 rows keeps the transient
    arrays at ~34 MB (2,000 rows: ~130 MB, and no faster). Equal to `raw_from_history` per series;
    series without a finite forecast are left out, and with `fresh_only` those without the sample
    just before the origin (stale features)."""
    if model.features != "hour_peak":
        raise ValueError(f"raw_at_origin reads hour-peak models, not features {model.features!r}")
    step, span = model.step_, int(model.span)
    n = lookback(step, span)
    step_ns = int(step.value)
    first_ns, origin_ns = int((origin - n * step).value), int(origin.value)
    qs = np.asarray(model.quantiles, dtype=float)
    out: dict[str, tuple[np.ndarray, float]] = {}
    keys = list(series)
    for at in range(0, len(keys), chunk):
        part = keys[at: at + chunk]
        windows = np.full((len(part), n), np.nan)
        for row, key in enumerate(part):  # by int64 nanoseconds: pandas masks cost a millisecond a series
            y = series[key]
            ix = epoch_ns(y.index)
            lo, hi = np.searchsorted(ix, first_ns), np.searchsorted(ix, origin_ns)
            off = ix[lo:hi] - first_ns
            on_grid = off % step_ns == 0
            windows[row, off[on_grid] // step_ns] = y.to_numpy(dtype=float)[lo:hi][on_grid]
        keep = np.isfinite(windows[:, -1]) if fresh_only else np.ones(len(part), dtype=bool)
        if not keep.any():
            continue
        names = [k for k, ok in zip(part, keep) if ok]
        x, level, scale = hour_peak_features_last(windows[keep], pd.DatetimeIndex([origin] * len(names)), step, span)
        q = non_crossing(model.predict_scaled(x), qs) * scale[:, None] + level[:, None]
        for row, key in enumerate(names):
            if np.all(np.isfinite(q[row])):
                out[key] = (q[row], float(scale[row]))
    return out


def actual_from_history(y: pd.Series, span: int, step: pd.Timedelta) -> ActualAt:
    """origin -> the observed peak of its next `span` steps in `y` (NaN when not all observed) on
    y's grid from its first sample; looked up per origin (a walk asks for one or two a run)."""
    ns = epoch_ns(y.index)
    values = y.to_numpy(dtype=float)
    step_ns = int(step.value)

    def at(t: pd.Timestamp) -> float:
        t_ns = int(pd.Timestamp(t).value)
        if not len(ns) or t_ns < ns[0] or (t_ns - ns[0]) % step_ns:
            return float("nan")
        want = t_ns + step_ns * np.arange(span)
        pos = np.minimum(np.searchsorted(ns, want), len(ns) - 1)
        got = values[pos]
        return float(got.max()) if np.all(ns[pos] == want) and np.all(np.isfinite(got)) else float("nan")
    return at


def overlay(key: str, q: np.ndarray, model_quantiles: Sequence[float], origin: pd.Timestamp, step: pd.Timedelta,
            steps: int, label: str, version: str = "adhoc") -> Forecast:
    """A `steps`-step Forecast from `origin` carrying the decision-time quantiles throughout (the HPA
    reads the span; the VPA's requests come from the hour-peak path, `raw_at_origin`)."""
    quantiles = tuple(model_quantiles)
    values = np.tile(np.asarray(q, dtype=float), (steps, 1))
    return Forecast(key, grid(origin, steps, step), quantiles, values, label, version)


def calibrated_series(model: DecisionTimeGBM, y: pd.Series, rate: float = 0.05,
                      start: int = 0) -> np.ndarray:
    """Calibrated quantiles at every origin of y (row i from y[:i] only): the model's forecast plus
    the adaptive-conformal offset learnt from the origins whose target window ended before i."""
    raw, scale = model.predict_series(y)
    actual = next_max(y, int(model.span))
    cal = AdaptiveConformal(model.quantiles, rate)
    out = np.full_like(raw, np.nan)
    span = int(model.span)
    for i in range(start, len(y)):
        j = i - span  # the latest origin whose target y[j .. j+span-1] is all before i
        if j >= start and np.all(np.isfinite(out[j])):
            cal.update(out[j], actual[j])
        if np.all(np.isfinite(raw[i])):
            out[i] = cal.apply(raw[i], scale[i])
    return out


@dataclass
class _Track:
    """One series' levels at every position of its last row, where the row's first and second
    samples were, and digests of the row from each on (from the second: what the next step's row
    holds when the history's window also moves on and drops the oldest sample)."""

    origin: int  # ns
    starts: tuple[int, int]
    levels: np.ndarray
    digests: tuple[bytes, bytes]


def _digest(a: np.ndarray) -> bytes:
    # SHA-256 (hardware-accelerated on current CPUs: ~4x blake2b here) over the array's own buffer
    return hashlib.sha256(np.ascontiguousarray(a).data).digest()[:16]


@dataclass
class RecentLevels:
    """The decision features' levels kept between serving runs, per series: at the same origin they
    are the last run's; one step later the last run's shifted, with the new step's level and the first
    day's after the row's first sample (windows the history's start cuts) computed, not the whole
    row's (pandas' rolling median, ~1 ms a series). Only while the samples are the same (digests): a
    late or corrected one recomputes the row."""

    tracks: dict[str, _Track] = field(default_factory=dict)

    def levels(self, keys: Sequence[str], origins: Sequence[int], past: np.ndarray, step_ns: int) -> np.ndarray:
        """`decision_origin.levels(past, day)`, from the kept levels where they still hold."""
        day = origin_features.per_day(pd.Timedelta(step_ns, unit="ns"))
        n = past.shape[1]
        finite = np.isfinite(past)
        count = np.cumsum(finite, axis=1)
        first, second = (np.where(count[:, -1] >= k, np.argmax(count >= k, axis=1), n) for k in (1, 2))
        out = np.full(past.shape, np.nan)
        cold, moved, head = [], [], 0
        for row, (key, origin, f) in enumerate(zip(keys, origins, first.tolist())):
            t = self.tracks.get(key)
            shift = (origin - t.origin) // step_ns if t is not None and len(t.levels) == n and f < n else -1
            # the same origin: the same row; one step on: the row shifted, its first sample kept or dropped
            at = -1 if t is None or shift not in (0, 1) else \
                (0 if f + shift == t.starts[0] else 1 if shift == 1 and f + 1 == t.starts[1] else -1)
            if t is None or at < 0 or _digest(past[row, f: n - shift]) != t.digests[at]:
                cold.append(row)
            elif shift == 0:
                out[row] = t.levels
            else:  # levels whose day reaches past the first sample are computed again
                out[row, f + day - 1: n - 1] = t.levels[f + day:]
                moved.append(row)
                head = max(head, min(f + day - 1, n - 1))
        if cold:
            out[cold] = origin_features.levels(past[cold], day)
        if moved:
            out[moved, :head] = origin_features.levels(past[moved, :head], day)
            out[moved, n - 1] = origin_features.new_levels(past[moved, n - day:], day)
        for row, (key, origin, f, g) in enumerate(zip(keys, origins, first.tolist(), second.tolist())):
            self.tracks[key] = _Track(origin, (f, g), out[row].copy(), (_digest(past[row, f:]), _digest(past[row, g:])))
        return out

    def keep_only(self, keys: set[str]) -> None:
        for k in [k for k in self.tracks if k not in keys]:
            del self.tracks[k]


def recent_row(y: pd.Series, origin: pd.Timestamp, step: pd.Timedelta, n: int) -> np.ndarray | None:
    """`y.shift(1)` on y's grid (from its first sample, as `raw_from_history` puts it) at the `n`
    positions up to `origin` (NaN where missing); None where that grid misses the origin."""
    if not len(y):
        return None
    ns = epoch_ns(y.index)
    step_ns, o = int(step.value), int(pd.Timestamp(origin).value)
    if o < ns[0] or (o - ns[0]) % step_ns:
        return None
    first = o - n * step_ns  # the sample at `first` is past[0]
    lo, hi = np.searchsorted(ns, first), np.searchsorted(ns, o)
    off = ns[lo:hi] - first
    on_grid = off % step_ns == 0
    row = np.full(n, np.nan)
    row[off[on_grid] // step_ns] = y.to_numpy(dtype=float)[lo:hi][on_grid]
    return row


def raw_recent(model: DecisionTimeGBM, series: Mapping[str, pd.Series], todo: Mapping[str, Sequence[pd.Timestamp]],
               cache: RecentLevels | None = None, context: pd.Timedelta | None = None,
               chunk: int = 128) -> dict[str, dict[pd.Timestamp, tuple[np.ndarray, float]]]:
    """`raw_from_history(model, series[k], todo[k])` for every k at once, equal to it, for a model of
    the "recent" features: one row per series and origin (`decision_origin`; the levels from
    `cache`), the trees walked once for all. A series' origins go in increasing order, one round each,
    so the cache carries its levels from one to the next; rows go in chunks (a row is ~20 kB; a chunk
    of 128 rows holds ~27 MB of transient arrays, 256 rows ~47 MB, at the same speed). Rows
    are at least `context` long (serve's cut of the history: rows of one length from run to run, so
    the cache holds where a series' first sample comes and goes with a gap)."""
    if model.features != "recent":
        raise ValueError(f"raw_recent reads models of the recent features, not {model.features!r}")
    step, span = model.step_, int(model.span)
    cache = cache if cache is not None else RecentLevels()
    rows: list[tuple[str, pd.Timestamp]] = []
    parts: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = []
    for r in range(max((len(v) for v in todo.values()), default=0)):
        at = {k: pd.Timestamp(v[r]) for k, v in todo.items() if r < len(v) and len(series[k])}
        keys = list(at)
        # every sample of a series before its origin in its row (past[0] before the first one)
        least = max(origin_features.min_row(step), 0 if context is None else context // step + 1)
        n = max([least] + [(at[k] - series[k].index[0]) // step + 1 for k in keys])
        for lo in range(0, len(keys), chunk):
            made = [(k, recent_row(series[k], at[k], step, n)) for k in keys[lo: lo + chunk]]
            made = [(k, w) for k, w in made if w is not None]
            if made:
                past = np.array([w for _, w in made])
                origins = [at[k] for k, _ in made]
                lv = cache.levels([k for k, _ in made], [int(o.value) for o in origins], past, int(step.value))
                parts.append(origin_features.features_at(past, lv, pd.DatetimeIndex(origins), step, span))
                rows.extend((k, at[k]) for k, _ in made)
    out: dict[str, dict[pd.Timestamp, tuple[np.ndarray, float]]] = {k: {} for k in todo}
    if not rows:
        return out
    x, level, scale = (np.concatenate(p) for p in zip(*parts))
    qs = np.asarray(model.quantiles, dtype=float)
    q = non_crossing(model.predict_scaled(x), qs) * scale[:, None] + level[:, None]
    for (key, origin), qr, sc in zip(rows, q, scale):
        if np.all(np.isfinite(qr)):
            out[key][origin] = (qr, float(sc))
    return out
