"""One representation for time: tz-aware UTC at nanosecond resolution, whatever pandas parsed.

pandas 3 keeps the resolution a datetime was parsed or stored with ('s' from an ISO string, 'us'
from `date_range` or a Parquet column in µs), while pandas 2 always used nanoseconds. Code that reads
integer representations (`DatetimeIndex.asi8`, `np.diff` of an index) or builds timestamps from
integers silently gives 1970 dates when the two disagree. So every datetime entering the system is
normalised by `to_utc_ns` / `epoch_to_utc` at the boundary (file readers, Prometheus, generators),
and every integer read goes through `epoch_ns`, which is correct for any resolution.

`Timestamp.value` and `Timedelta.value` are nanoseconds on every pandas (not the stored unit), so
they stay safe to compare with `epoch_ns`.
"""
from __future__ import annotations

import functools
from typing import TypeVar

import numpy as np
import pandas as pd

# Timestamps outside this range are refused: a monitoring history before 1990 or after 2200 is a
# unit mistake (epoch milliseconds read as seconds, a year typed wrong), never real data, and
# nanosecond datetimes cannot hold dates past 2262 at all.
EARLIEST = pd.Timestamp("1990-01-01", tz="UTC")
LATEST = pd.Timestamp("2200-01-01", tz="UTC")

# Epoch numbers of unknown unit: the unit is chosen from the largest magnitude in the column.
# Inside [EARLIEST, LATEST] the units never overlap: seconds are 6.3e8..7.3e9, milliseconds
# 6.3e11..7.3e12, microseconds 6.3e14..7.3e15, nanoseconds 6.3e17..7.3e18; each cut-off sits a
# factor of ~14 or more away from both neighbours.
EPOCH_UNIT_CUTOFFS: tuple[tuple[float, str], ...] = ((1e11, "s"), (1e14, "ms"), (1e17, "us"))
NS_PER_UNIT = {"s": 10**9, "ms": 10**6, "us": 10**3, "ns": 1}
RANGE_HINT = "timestamps must lie between 1990 and 2200 (UTC)"

T = TypeVar("T", pd.Series, pd.DatetimeIndex)


class TimestampRangeError(ValueError):
    """A timestamp outside [EARLIEST, LATEST]; `position` is the first offending row (0-based)."""

    def __init__(self, position: int, shown: str, count: int, unit: str | None = None):
        self.position, self.shown, self.count, self.unit = position, shown, count, unit
        read_as = f" (read as epoch {unit})" if unit else ""
        super().__init__(f"timestamp {shown}{read_as} is outside 1990..2200 ({count} such rows)")


def epoch_unit(values: np.ndarray) -> str:
    """The unit ('s', 'ms', 'us' or 'ns') of epoch numbers, from the largest finite magnitude."""
    finite = np.abs(values[np.isfinite(values)]) if values.dtype.kind == "f" else np.abs(values)
    top = float(finite.max()) if finite.size else 0.0
    for cutoff, unit in EPOCH_UNIT_CUTOFFS:
        if top < cutoff:
            return unit
    return "ns"


def epoch_to_utc(values: np.ndarray | pd.Series, unit: str | None = None) -> pd.DatetimeIndex:
    """Epoch numbers (unit given, or chosen by `epoch_unit`) -> UTC nanosecond DatetimeIndex.

    NaN stays NaT. Integers convert exactly; floats are rounded to the microsecond (a float64 holds
    today's epoch in µs exactly, not in ns), so Prometheus' millisecond stamps come out exact.
    Raises TimestampRangeError for values outside [EARLIEST, LATEST], before anything overflows."""
    arr = np.asarray(values)
    if arr.dtype.kind not in "iuf":
        arr = arr.astype("float64")
    unit = unit or epoch_unit(arr)
    scale = NS_PER_UNIT[unit]
    lo, hi = EARLIEST.value / scale, LATEST.value / scale
    known = np.isfinite(arr) if arr.dtype.kind == "f" else np.ones(len(arr), dtype=bool)
    outside = known & ((arr < lo) | (arr > hi))
    if outside.any():
        pos = int(np.flatnonzero(outside)[0])
        raise TimestampRangeError(pos, f"{arr[pos]!r}", int(outside.sum()), unit)
    if arr.dtype.kind == "f":
        us = np.round(np.where(known, arr, 0.0) * (scale / 1e3)).astype(np.int64)
        ns = us * 1000
    else:
        ns = arr.astype(np.int64) * scale
    out = pd.DatetimeIndex(ns.astype("datetime64[ns]")).tz_localize("UTC")
    return out.where(known, pd.NaT) if not known.all() else out


def to_utc_ns(ts: T) -> T:
    """A datetime Series or DatetimeIndex as UTC nanoseconds (naive means UTC); NaT kept.

    Raises TimestampRangeError for timestamps outside [EARLIEST, LATEST]; the check runs before the
    conversion to nanoseconds, which could not hold them."""
    values = ts.dt if isinstance(ts, pd.Series) else ts
    aware = values.tz_localize("UTC") if values.tz is None else values.tz_convert("UTC")
    outside = ((aware < EARLIEST) | (aware > LATEST))
    outside = np.asarray(outside, dtype=bool)
    if outside.any():
        pos = int(np.flatnonzero(outside)[0])
        first = aware.iloc[pos] if isinstance(aware, pd.Series) else aware[pos]
        raise TimestampRangeError(pos, first.isoformat(), int(outside.sum()))
    return aware.dt.as_unit("ns") if isinstance(aware, pd.Series) else aware.as_unit("ns")


def utc_ns(t: pd.Timestamp | str) -> pd.Timestamp:
    """One timestamp as UTC nanoseconds (naive means UTC): origins and clocks, so that indexes
    built from them with `date_range` are nanosecond indexes too."""
    t = pd.Timestamp(t)
    return (t.tz_localize("UTC") if t.tzinfo is None else t.tz_convert("UTC")).as_unit("ns")


def epoch_ns(index: pd.DatetimeIndex | pd.Series) -> np.ndarray:
    """Nanoseconds since the Unix epoch as int64, correct for any stored resolution (unlike
    `.asi8`, which is in the index's own unit: µs or s on pandas 3)."""
    # an index already in ns is read as is: the serving loop calls this per series and run, and
    # building a DatetimeIndex costs ~100x more than reading one
    idx = index if isinstance(index, pd.DatetimeIndex) else pd.DatetimeIndex(index)
    raw = idx.asi8
    per = _NS_PER.get(idx.unit)
    if per == 1:
        return raw  # type: ignore[no-any-return]
    if per is not None and (not len(raw) or -_WITHIN[per] < raw.min() and raw.max() < _WITHIN[per]):
        return raw * per  # type: ignore[no-any-return]  # as_unit's result without a new index (~40 us)
    return idx.as_unit("ns").asi8  # type: ignore[no-any-return]  # raises where ns cannot hold it


_NS_PER = {"ns": 1, "us": 10**3, "ms": 10**6, "s": 10**9}
_WITHIN = {per: np.iinfo(np.int64).max // per for per in _NS_PER.values()}


def position(index: pd.DatetimeIndex, t: pd.Timestamp, side: str = "left") -> int:
    """`index.searchsorted(t, side)` of a sorted index, by int64 nanoseconds: a pandas search boxes the
    timestamp (~10 us; the serving loop makes ~100,000 of them a run at 10,000 workloads)."""
    return int(np.searchsorted(epoch_ns(index), pd.Timestamp(t).value, side))  # type: ignore[call-overload]


def grid(start: pd.Timestamp, periods: int, step: pd.Timedelta) -> pd.DatetimeIndex:
    """`pd.date_range(start, periods=periods, freq=step)`, one shared object per grid: indexes are
    immutable, and a serving run's forecasts (20,000 of them, kept between runs) mostly start at the
    same origin, so they hold one index instead of a copy each (~2.3 kB a day-ahead forecast).
    Shared for UTC and naive starts (every timestamp inside Tidewise is UTC); others are built."""
    start, step = pd.Timestamp(start), pd.Timedelta(step)
    if start.tz is not None and str(start.tz) != "UTC":
        return pd.date_range(start, periods=periods, freq=step)
    return _grid(int(start.value), start.tz is not None, start.unit, int(periods), int(step.value))


@functools.lru_cache(maxsize=256)
def _grid(start_ns: int, utc: bool, unit: str, periods: int, step_ns: int) -> pd.DatetimeIndex:
    start = pd.Timestamp(start_ns, unit="ns", tz="UTC" if utc else None).as_unit(unit)
    return pd.date_range(start, periods=periods, freq=pd.Timedelta(step_ns, unit="ns"))


def median_step(index: pd.DatetimeIndex) -> pd.Timedelta:
    """The median spacing of a sorted index (the step of a mostly regular series)."""
    return pd.Timedelta(int(np.median(np.diff(epoch_ns(index)))), unit="ns")
