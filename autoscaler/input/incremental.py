"""`IncrementalHistory`: serve's history, fetched whole once and then only its newest steps.

`tidewise serve` running forever asks for the same window (`loop.history_window`, 8 days) on every
run, and all but its newest steps were fetched by the run before: at 500 workloads that full fetch
took a median 16.5 s a run (BENCHMARKS.md, "Soak"), ~5 minutes at 10,000. This wrapper around any
`HistorySource` keeps the history it last returned (the one the loop reads: one window in memory,
not two) and asks the source only for a *slice*, from an overlap before the newest sample held to
`now`. The slice replaces the steps it covers (Prometheus' newest samples may still be incomplete
or late), is appended, and what falls out of the window is cut: the result is the History a full
fetch of the same range gives (tests/autoscaler/test_incremental.py; against a real Prometheus,
tests/integration/test_incremental_prometheus.py).

The whole window is fetched instead when a slice cannot stand in for it:
- the first run; a changed window or step; a `now` that went back or left the window behind;
- the fetch before raised (stale or missing data must freeze the loop as it always did, and the
  next run starts from a clean full fetch), or the slice reports other failed queries than the
  history held;
- every `full_every` (a safety net: samples that arrive later than the overlap, an owner learnt late);
- a series not held before that has a sample at the slice's first step: it may have older ones.
  Series are per workload container, so new pods of a known workload add none; a series that
  starts *inside* the slice is a new workload, whose whole history the slice holds. New workloads,
  frequent in a real cluster, thus cost no full fetch.
A range off the step grid (the replay clock: no range at all) is passed to the source as it is.
A slice with no series at all (Prometheus lost its data) is returned as it is: the loop freezes
on it as on a full fetch with none, and the next run fetches the whole window.
"""
from __future__ import annotations

import logging
from dataclasses import dataclass

import numpy as np
import pandas as pd

from predictor.history import History
from predictor.sources.base import HistorySource
from predictor.types import GapReport

log = logging.getLogger(__name__)

FULL, SLICE, PASSED = "full", "slice", "passed through"


@dataclass
class FetchNote:
    """What the last fetch asked the source for, and why."""

    kind: str  # FULL, SLICE or PASSED
    start: pd.Timestamp | None
    end: pd.Timestamp | None
    reason: str = ""


class IncrementalHistory:
    """A `HistorySource` that fetches the full window once, then only each run's newest steps.

    `overlap`: at least this much before the newest sample held is fetched again. `full_every`: the
    whole window is fetched again this often (None: only when a slice cannot stand in, see above).
    `slice_steps`: a slice starts a multiple of this many steps after the window's start (default:
    the source's own `slice_steps`, else 1): `PrometheusSource` asks pod owners every 12 steps from
    a range's start, and a slice on that grid asks them at points the full window asks them at."""

    def __init__(self, source: HistorySource, overlap: pd.Timedelta, full_every: pd.Timedelta | None = None,
                 slice_steps: int | None = None):
        self.source = source
        self.name = getattr(source, "name", "?")
        self.overlap = overlap
        self.full_every = full_every
        self.slice_steps = int(slice_steps or getattr(source, "slice_steps", 1) or 1)
        self._held: History | None = None
        self._range: tuple[pd.Timestamp, pd.Timestamp, pd.Timedelta] | None = None
        self._full_at: pd.Timestamp | None = None
        self._why_none = "first fetch"
        self.last: FetchNote | None = None
        self.fetches = {FULL: 0, SLICE: 0, PASSED: 0}

    def fetch(self, start: pd.Timestamp | None, end: pd.Timestamp | None, step: pd.Timedelta) -> History:
        if start is None or end is None or start != start.floor(step) or end != end.floor(step):
            self._forget("the range before was not on the step grid")
            return self._ask(PASSED, start, end, step, "no range on the step grid")
        why = self._why_full(start, end, step)
        held = self._held
        if why is not None or held is None:
            return self._full(start, end, step, why or self._why_none)
        first = self._slice_start(start, held.end, step)
        if first <= start:
            return self._full(start, end, step, "the slice would cover the whole window")
        part = self._ask(SLICE, first, end, step, f"from {first}")
        if not part.series:
            self._forget("the slice before had no series")
            return part
        if set(part.failed) != set(held.failed):
            return self._full(start, end, step, f"failed queries changed: {sorted(held.failed)} -> {sorted(part.failed)}")
        early = [k for k, y in part.series.items() if k not in held.series and y.index[0] <= first]
        if early:
            return self._full(start, end, step, f"{len(early)} series not held before have samples from the "
                                                f"slice's start, maybe older ones too (such as {early[0]})")
        self._held = None  # consumed by the merge, series by series
        return self._keep(merge_slice(held, part, start, first), start, end, step)

    # -- the decisions ----------------------------------------------------------------------------
    def _why_full(self, start: pd.Timestamp, end: pd.Timestamp, step: pd.Timedelta) -> str | None:
        if self._held is None or self._range is None or self._full_at is None:
            return self._why_none
        s0, e0, st0 = self._range
        if step != st0:
            return f"step changed ({st0} -> {step})"
        if end - start != e0 - s0:
            return f"window changed ({e0 - s0} -> {end - start})"
        if end < e0:
            return f"now went back ({e0} -> {end})"
        if self._held.series and end - self._held.end > end - start:
            return f"the history held ends at {self._held.end}, more than the window before {end}"
        if self.full_every is not None and end - self._full_at >= self.full_every:
            return f"the last full fetch ({self._full_at}) is {end - self._full_at} old (full_refetch_every)"
        return None

    def _slice_start(self, start: pd.Timestamp, newest: pd.Timestamp, step: pd.Timedelta) -> pd.Timestamp:
        """The latest point of the window's grid `start + k * slice_steps * step` at or before
        `newest - overlap` (a point at or before `start`: no slice can stand in for the window)."""
        grid = step * self.slice_steps
        return start + int((newest - self.overlap - start) // grid) * grid

    # -- fetching ---------------------------------------------------------------------------------
    def _ask(self, kind: str, start: pd.Timestamp | None, end: pd.Timestamp | None, step: pd.Timedelta,
             reason: str) -> History:
        self.last = FetchNote(kind, start, end, reason)
        self.fetches[kind] += 1
        log.info("history fetch (%s) %s .. %s: %s", kind, start, end, reason)
        try:
            return self.source.fetch(start, end, step)
        except BaseException:
            self._forget("the fetch before failed")
            raise

    def _full(self, start: pd.Timestamp, end: pd.Timestamp, step: pd.Timedelta, why: str) -> History:
        self._held = None  # the old window goes before the new one comes: one in memory, not two
        hist = self._ask(FULL, start, end, step, why)
        if not hist.series:
            self._forget("the full fetch before had no series")
            return hist
        self._full_at = end
        return self._keep(hist, start, end, step)

    def _keep(self, hist: History, start: pd.Timestamp, end: pd.Timestamp, step: pd.Timedelta) -> History:
        self._held, self._range = hist, (start, end, step)
        # the loop gets its own dicts (the series are shared): the next merge consumes the held ones
        return History(dict(hist.series), hist.step, dict(hist.gaps), hist.labels, list(hist.signed),
                       dict(hist.failed))

    def _forget(self, why: str) -> None:
        self._held, self._range, self._full_at, self._why_none = None, None, None, why


def merge_slice(held: History, part: History, start: pd.Timestamp, first: pd.Timestamp) -> History:
    """`held` before `first`, then `part` from `first`, cut to `start` and onwards; each series from
    its first sample to its last, as the source's regular grids are. Consumes `held.series`."""
    step_ns, start_ns, first_ns = held.step.value, start.value, first.value
    indexes: dict[tuple[int, int], pd.DatetimeIndex] = {}
    series: dict[str, pd.Series] = {}
    gaps: dict[str, GapReport] = {}
    for key in sorted(held.series.keys() | part.series.keys()):
        old, new = held.series.pop(key, None), part.series.get(key)
        if new is None and old is not None and old.index[0].value >= start_ns and old.index[-1].value < first_ns:
            series[key] = old  # a series that stopped: as held
            if key in held.gaps:
                gaps[key] = held.gaps[key]
            continue
        joined = _joined(old, new, start_ns, first_ns, step_ns)
        if joined is None:
            continue
        t0, vals = joined
        index = indexes.get((t0, len(vals)))
        if index is None:
            index = pd.date_range(pd.Timestamp(t0, unit="ns", tz="UTC"), periods=len(vals),
                                  freq=held.step).as_unit("ns")
            indexes[(t0, len(vals))] = index
        series[key] = pd.Series(vals, index=index, copy=False)
        found = _gaps(vals, index)
        if found:
            gaps[key] = GapReport(key, found)
    return History(series, held.step, gaps, _labels(held.labels, part.labels, series),
                   [k for k in sorted(set(held.signed) | set(part.signed)) if k in series], dict(part.failed))


def _joined(old: pd.Series | None, new: pd.Series | None, start_ns: int, first_ns: int,
            step_ns: int) -> tuple[int, np.ndarray] | None:
    """(first timestamp in ns, values) of `old` on [start, first) followed by `new` on [first, ...)."""
    pieces: list[np.ndarray] = []
    t0 = t_next = 0
    if old is not None:
        o0 = old.index[0].value
        lo, hi = max(0, -(-(start_ns - o0) // step_ns)), min(len(old), max(0, -(-(first_ns - o0) // step_ns)))
        if hi > lo:
            pieces.append(old.to_numpy()[lo:hi])
            t0, t_next = o0 + lo * step_ns, o0 + hi * step_ns
    if new is not None:
        n0 = new.index[0].value
        lo = max(0, -(-(max(start_ns, first_ns) - n0) // step_ns))
        if lo < len(new):
            n0 += lo * step_ns
            if not pieces:
                t0 = n0
            elif n0 > t_next:
                pieces.append(np.full((n0 - t_next) // step_ns, np.nan))
            pieces.append(new.to_numpy()[lo:])
    if not pieces:
        return None
    vals = np.concatenate(pieces) if len(pieces) > 1 else pieces[0].copy()
    ok = np.flatnonzero(~np.isnan(vals))
    if not len(ok):
        return None
    return t0 + int(ok[0]) * step_ns, vals[ok[0]:ok[-1] + 1]


def _gaps(vals: np.ndarray, index: pd.DatetimeIndex) -> list[tuple[pd.Timestamp, int]]:
    """Where each run of NaN starts and how many steps it lasts (as `predictor.history` reports them)."""
    isna = np.isnan(vals)
    if not isna.any():
        return []
    edges = np.diff(np.concatenate([[0], isna.astype(np.int8), [0]]))
    starts, ends = np.flatnonzero(edges == 1), np.flatnonzero(edges == -1)
    return [(index[a], int(b - a)) for a, b in zip(starts, ends)]


def _labels(held: pd.DataFrame | None, part: pd.DataFrame | None, series: dict[str, pd.Series]) -> pd.DataFrame | None:
    """The slice's label rows, then the held ones of series still there; sorted as a group-by sorts them."""
    frames = [f for f in (part, held) if f is not None]
    if not frames:
        return None
    both = pd.concat(frames) if len(frames) > 1 else frames[0]
    both = both[~both.index.duplicated(keep="first")]
    wanted = both.index.isin(list(series)) | (both.index.isin(part.index) if part is not None else False)
    return both[wanted].sort_index()


def incremental_history(source: HistorySource, overlap: str, full_refetch_every: str | None) -> HistorySource:
    """`source` wrapped for a serve that runs forever (`serve.loop.fetch_overlap`,
    `full_refetch_every`); `source` itself when `full_refetch_every` is None."""
    from predictor.durations import parse_duration

    if full_refetch_every is None:
        return source
    return IncrementalHistory(source, parse_duration(overlap, what="serve.loop.fetch_overlap"),
                              parse_duration(full_refetch_every, what="serve.loop.full_refetch_every"))
