"""Read a replay input: long `series,timestamp,value[,per_replica][,start][,oom]`."""
from __future__ import annotations

import logging
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from contracts.errors import InputError
from predictor.history import History, read_long_file, regularize, validate_long
from predictor.plain import plain
from predictor.timestamps import utc_ns

log = logging.getLogger(__name__)

# What `tidewise fetch --what requests,replicas` writes beside the usage (the demo's history has them
# too): cluster state, not a container's usage or a service's demand; replay leaves those series out.
STATE_RESOURCES = ("cpu_request", "memory_request", "replicas")
DEFAULT_REPLAY = pd.Timedelta(days=7)  # without `start`, the last 7 days of each series are replayed
# (after its first day at the earliest)


@dataclass
class ReplayInput:
    history: History  # regular 5-minute series (NaN gaps)
    start: dict[str, pd.Timestamp]  # first decision time of each series
    end: dict[str, pd.Timestamp]  # end of each series' data (exclusive: last timestamp + step)
    per_replica: dict[str, float]  # HPA only: demand one replica serves at 100% utilisation
    # VPA, optional: 1 on the rows where the container was OOM-killed (0 or empty elsewhere), on the
    # history's step grid; memory is then bumped as the stock VPA does (see autoscaler.logic.vpa)
    oom: dict[str, pd.Series] = field(default_factory=dict)


def read_oom(g: pd.DataFrame, key: str, path: str, step: pd.Timedelta) -> pd.Series:
    """One series' `oom` flags (0/1, empty = 0) on the step grid; InputError on anything else."""
    flags = pd.to_numeric(g["oom"], errors="coerce")
    bad = g["oom"].notna() & ~flags.isin([0, 1])
    if bad.any():
        raise InputError(f"input {path}: series {key!r} has oom value {plain(g['oom'][bad].iloc[0])}; "
                         "use 1 on the rows of an OOM kill and 0 (or empty) elsewhere")
    at = g["timestamp"].dt.floor(step)
    return flags.fillna(0).groupby(at).max().astype(int)


def _without_state(frame: pd.DataFrame, path: str) -> pd.DataFrame:
    """The frame without the requests and replicas series of a fetched history (ids
    `namespace/kind/name/container/<STATE_RESOURCES>`); InputError when nothing else is left."""
    parts = frame["series"].astype(str).str.split("/")
    state = (parts.str.len() == 5) & parts.str[-1].isin(STATE_RESOURCES)
    if not state.any():
        return frame
    if state.all():
        raise InputError(f"input {path}: only requests and replicas series ({', '.join(STATE_RESOURCES)}); replay "
                         "needs usage or demand series, e.g. `tidewise fetch --what cpu,memory`'s")
    log.info("input %s: %d requests and replicas series left out (not usage)", path,
             frame.loc[state, "series"].nunique())
    return frame[~state]


def load_replay_input(path: str, step: pd.Timedelta, *, need_per_replica: bool = False,
                      read_as: str | None = None) -> ReplayInput:
    """The replay's series, starts and ends; `read_as`: the resource of an id naming none (replay vpa
    decides in cpu for those: `predictor.value_scale` then holds them to a million cores)."""
    raw = read_long_file(path)
    parquet = path.lower().endswith((".parquet", ".pq"))
    frame = _without_state(validate_long(raw, path, parquet=parquet, allow_negative=False, read_as=read_as), path)
    if need_per_replica and "per_replica" not in frame.columns:
        raise InputError(f"input {path} has no column 'per_replica': replay hpa needs the demand one replica "
                         "serves at 100% utilisation, on every row")
    history = regularize(frame, step)
    starts: dict[str, pd.Timestamp] = {}
    ends: dict[str, pd.Timestamp] = {}
    pers: dict[str, float] = {}
    ooms: dict[str, pd.Series] = {}
    for key, g in frame.groupby("series", sort=True):
        key = str(key)
        if key not in history.series:
            continue
        s = history.series[key]
        ends[key] = s.index[-1] + step
        if need_per_replica:
            per = pd.to_numeric(g["per_replica"], errors="coerce").dropna().unique()
            if len(per) != 1 or not np.isfinite(per[0]) or per[0] <= 0:
                raise InputError(f"input {path}: series {key!r} needs one positive per_replica value "
                                 f"(found {plain(list(per)[:3])})")
            pers[key] = float(per[0])
        if "oom" in g.columns:
            ooms[key] = read_oom(g, key, path, step)
        if "start" in g.columns and g["start"].notna().any():
            values = g["start"].dropna().astype(str).str.strip().unique()
            if len(values) != 1:
                raise InputError(f"input {path}: series {key!r} has {len(values)} different `start` values; "
                                 "give the same first decision time on every row of a series")
            try:
                t = utc_ns(values[0])
            except ValueError:
                raise InputError(f"input {path}: series {key!r} start {values[0]!r} does not parse; use ISO-8601 UTC") from None
            starts[key] = t
        else:
            # the last 7 days, but never the first day: decisions need some history before them
            starts[key] = max(ends[key] - DEFAULT_REPLAY, s.index[0] + pd.Timedelta(days=1)).ceil(step)
        if starts[key] >= ends[key]:
            raise InputError(f"input {path}: series {key!r} starts replaying at {starts[key]}, after its data ends; "
                             "give a `start` inside the data, or more than a day of history")
        if starts[key] <= s.index[0]:
            raise InputError(f"input {path}: series {key!r} has no history before its start {starts[key]}; "
                             "a decision needs data before it")
    return ReplayInput(history, starts, ends, pers, ooms)
