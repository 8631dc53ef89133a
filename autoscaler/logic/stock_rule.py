"""The stock VPA rule (`vpa.vpa_default_request`: decaying-weight p90 + 15% of the last 8 days) at many
times of one series at once, equal to it at each time to the bit.

The restart regime's day planner costs the stock rule at each of the last week's 168 hours, for every
series on the first run of a UTC day: one call per hour (a pandas mask, a sort of 2,304 samples and a
power each) cost ~0.5 ms, ~90 ms a series, 157 CPU s of a 1,000-workload run. Here the series is
sorted once (a stable sort, so ties stay in time order, as within each window); each time's window is
then the sorted samples it holds, the others weighted 0 — adding 0.0 leaves a running sum unchanged,
so each row's cumulative weights are the per-call ones, summed in the same order, and the same
sample is picked. The weights come from a table per lag when the timestamps sit on a common grid.

`stock_at` is the other way round: many series at one time (serve's hourly reads), each series' window a
row of one array, by the same stable sort and running sums.
"""
from __future__ import annotations

import functools
from collections.abc import Mapping

import numpy as np
import pandas as pd

from predictor.decaying_histogram import cdf_quantiles, decaying_cdf
from predictor.timestamps import epoch_ns

UNITS = ["s", "ms", "us", "ns"]  # coarse to fine: a difference of two datetimes is in the finer unit
WINDOW = pd.Timedelta("8D")  # the stock recommender's history
CELLS = 50_000  # samples x times per block (~400 kB an array, in the processor's cache: 2.5 ms a series' week, not 7)


def stock_targets(y: pd.Series, times: pd.DatetimeIndex, half_life_hours: float = 24.0,
                  percentile: float = 0.9, margin: float = 0.15) -> np.ndarray:
    """`vpa_default_request` at each of `times` from the finite samples of `y` in [t - 8 days, t),
    ages in hours as `(t - index).total_seconds() / 3600` (NaN where the window holds none)."""
    values = y.to_numpy(dtype=float)
    ok = np.isfinite(values)
    if not ok.any() or not len(times):
        return np.full(len(times), np.nan)
    index, times = pd.DatetimeIndex(y.index), pd.DatetimeIndex(times)
    unit = max(index.unit, times.unit, key=UNITS.index)  # the unit the per-call subtraction works in
    ts = np.asarray(index.as_unit(unit).asi8)
    ts = ts if ok.all() else ts[ok]
    at = np.asarray(times.as_unit(unit).asi8)
    window = int(WINDOW / pd.Timedelta(1, unit=unit))
    base = int(ts.min())
    grid = int(np.gcd.reduce(np.concatenate([ts - base, at - base, [window]])))
    # no grid the tables fit (the weights' length: the window; the lags': the times' span and the samples'):
    # one by one
    if grid == 0 or max(window, int(at.max()) - int(at.min()) + int(ts.max()) - base) // grid > 100_000:
        return np.array([_one(values[ok], ts, t, window, unit, half_life_hours, percentile) for t in at]) * (1 + margin)
    order = np.argsort(values[ok], kind="stable")
    v, ti, ai = values[ok][order], (ts[order] - base) // grid, (at - base) // grid
    # each lag's weight (0 outside the window), from the grid's table of ages (pandas' total_seconds
    # is a fixed cost per call: once a grid, not once a series)
    low = int(ai.min() - ti.max())
    lags = np.arange(low, int(ai.max() - ti.min()) + 1, dtype=np.int64)
    inside = (lags > 0) & (lags * grid <= window)
    table = np.zeros(len(lags))
    table[inside] = _weights(window // grid, grid, unit, half_life_hours)[lags[inside] - 1]
    out = np.full(len(at), np.nan)
    rows = max(1, CELLS // len(v))  # blocks of times that stay in the processor's cache
    for lo in range(0, len(ai), rows):
        part = ai[lo: lo + rows]
        cols = (ti < part.max()) & (ti >= part.min() - window // grid)  # keeps the sorted order
        if cols.any():
            out[lo: lo + rows] = _block(v[cols], table[part[None, :] - (ti[cols] + low)[:, None]], percentile)
    return out * (1 + margin)


@functools.lru_cache(maxsize=32)
def _weights(steps: int, grid: int, unit: str, half_life_hours: float) -> np.ndarray:
    """The weight at each age of 1..`steps` grid units, once per grid (the same for every series on it)."""
    w = np.power(2.0, -_hours(np.arange(1, steps + 1, dtype=np.int64) * grid, unit) / half_life_hours)
    w.flags.writeable = False
    return w  # type: ignore[no-any-return]


def _block(v: np.ndarray, weights: np.ndarray, q: float) -> np.ndarray:
    """The percentile per column of `weights` [samples sorted by value, times]: 0 outside a time's
    window. Samples down, times across: each column's running sum is still added in sorted order, and
    numpy adds whole rows at a time (4x faster than along a row)."""
    cumulative = np.cumsum(weights, axis=0)
    total = cumulative[-1]
    with np.errstate(invalid="ignore", divide="ignore"):
        # the first sample whose cumulative weight reaches q (searchsorted(cumulative, q) of the
        # per-call rule): a sample outside the window adds 0, so none of them is first
        pick = np.minimum((cumulative / total < q).sum(axis=0), len(v) - 1)
    return np.where(total > 0, v[pick], np.nan)


def _hours(deltas: np.ndarray, unit: str) -> np.ndarray:
    """Ages in hours as the per-call rule computes them (pandas' total_seconds, whatever its version)."""
    seconds = pd.TimedeltaIndex(np.asarray(deltas).astype(f"timedelta64[{unit}]")).total_seconds().to_numpy()
    return seconds / 3600.0  # type: ignore[no-any-return]


def _one(values: np.ndarray, ts: np.ndarray, at: int, window: int, unit: str, half_life: float, q: float) -> float:
    """The per-call rule at one time (timestamps on no common grid)."""
    inside = (ts < at) & (ts >= at - window)
    if not inside.any():
        return float("nan")
    ordered, cumulative = decaying_cdf(values[inside], _hours(at - ts[inside], unit), half_life)
    return float(cdf_quantiles(ordered, cumulative, q))


def stock_at(series: Mapping[str, pd.Series], t: int, half_life_hours: float = 24.0, percentile: float = 0.9,
             margin: float = 0.15) -> dict[str, float]:
    """`stock_targets(y, [t])` of many series at one time `t` (int64 ns, UTC), to the bit: series whose
    8-day windows hold the same timestamps are sorted, weighted and summed as the rows of one array (serve's
    restart regime reads ~1,000 series' targets a run; at once a third to two thirds of the cost one at a time,
    `python -m benchmarks.day_plan_cost`). A series off a sorted
    index, or whose window no other one shares, is read alone."""
    window = WINDOW.value
    out: dict[str, float] = {}

    def alone(y: pd.Series) -> float:
        return float(stock_targets_ns(y, np.asarray([t]), half_life_hours, percentile, margin)[0])

    groups: dict[tuple[int, int, int], tuple[np.ndarray, list[str], list[np.ndarray]]] = {}
    for sid, y in series.items():
        ns = epoch_ns(y.index)
        if not (ns[1:] > ns[:-1]).all():  # unsorted or repeated timestamps: the window is no slice
            out[sid] = alone(y)
            continue
        lo, hi = np.searchsorted(ns, [t - window, t])
        times = ns[lo:hi]
        key = (len(times), int(times[0]) if len(times) else 0, int(times[-1]) if len(times) else 0)
        group = groups.setdefault(key, (times, [], []))
        if not np.array_equal(group[0], times):
            out[sid] = alone(y)
            continue
        group[1].append(sid)
        group[2].append(y.to_numpy(dtype=float)[lo:hi])
    for times, sids, rows in groups.values():
        if len(sids) == 1 or not len(times):
            out.update((sid, alone(series[sid])) for sid in sids)
            continue
        ages = t - times
        grid = int(np.gcd.reduce(np.concatenate([ages, [window]])))
        w = _weights(window // grid, grid, "ns", half_life_hours)[ages // grid - 1]
        out.update(zip(sids, _rows(np.vstack(rows), w, percentile) * (1 + margin)))
    return out


def _rows(values: np.ndarray, weights: np.ndarray, q: float) -> np.ndarray:
    """`_block`'s percentile per row of `values` [series, samples in time order] with the samples'
    `weights`: each row sorted stably by value (NaN last, weighted 0, so a row's running sum is its
    finite samples' in the same order)."""
    order = np.argsort(values, axis=1, kind="stable")
    v = np.take_along_axis(values, order, axis=1)
    finite = np.isfinite(v)
    cumulative = np.cumsum(np.where(finite, weights[order], 0.0), axis=1)
    total = cumulative[:, -1]
    with np.errstate(invalid="ignore", divide="ignore"):
        below = (cumulative / total[:, None] < q) & finite
    pick = np.minimum(below.sum(axis=1), np.maximum(finite.sum(axis=1) - 1, 0))
    return np.where(total > 0, v[np.arange(len(v)), pick], np.nan)  # type: ignore[no-any-return]


def stock_targets_ns(y: pd.Series, times: np.ndarray, half_life_hours: float = 24.0, percentile: float = 0.9,
                     margin: float = 0.15) -> np.ndarray:
    """`stock_targets` at `times` given as int64 nanoseconds since the epoch (UTC), in the series' own
    timezone (naive: UTC)."""
    at = pd.to_datetime(np.asarray(times, dtype=np.int64), unit="ns", utc=True)
    tz = getattr(y.index, "tz", None)
    return stock_targets(y, at.tz_convert(tz) if tz is not None else at.tz_localize(None), half_life_hours,
                         percentile, margin)
