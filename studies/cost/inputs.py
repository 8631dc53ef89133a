"""What the cost report prices, read from the files the user already has.

Every amount is converted on the way in to the unit it is priced in: cores for cpu and GiB for
memory (series ids ending in /memory carry bytes, as the history and the replay write them), and
every series is reduced to hours (the mean of an hour's samples, one value per hour that has any).
"""
from __future__ import annotations

import json
import math
import os
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from autoscaler.model.cluster import ClusterState, container_requests
from contracts.errors import InputError
from contracts.quantity import to_units
from predictor.history import parse_timestamps, read_long_file, validate_long
from predictor.plain import plain
from predictor.types import SeriesKey

HOUR = pd.Timedelta(hours=1)
GIB = float(2 ** 30)
REPLAY_COLUMNS = ("series", "timestamp", "target")


def price_unit(resource: str, value: float) -> float:
    """A series value (cores, or bytes for memory) in the unit it is priced in (cores, GiB)."""
    return value / GIB if resource == "memory" else value


@dataclass
class HourlySeries:
    """Series id -> its hourly amounts in priced units, and the ids left out with the reason."""

    by_id: dict[str, pd.Series] = field(default_factory=dict)
    left_out: dict[str, str] = field(default_factory=dict)


def _key(sid: str) -> SeriesKey | None:
    try:
        k = SeriesKey.parse(sid)
    except ValueError:
        return None
    return k if k.resource in ("cpu", "memory") else None


def hourly(frame: pd.DataFrame, column: str) -> HourlySeries:
    """Per series of a validated long frame (UTC timestamps), the hourly mean of `column`."""
    out = HourlySeries()
    for sid, g in frame.groupby("series", sort=True):
        k = _key(str(sid))
        if k is None:
            out.left_out[str(sid)] = "not namespace/kind/name/container/cpu|memory"
            continue
        s = pd.Series(g[column].to_numpy(dtype=float), index=pd.DatetimeIndex(g["timestamp"])).dropna()
        per_hour = s.groupby(s.index.floor(HOUR)).mean()
        out.by_id[str(sid)] = per_hour.map(lambda v, r=k.resource: price_unit(r, v))
    return out


def read_usage(path: str) -> HourlySeries:
    """`--history`: a long usage file (series,timestamp,value), as every Tidewise command reads one."""
    frame = validate_long(read_long_file(path), source=f"--history {path}",
                          parquet=path.lower().endswith((".parquet", ".pq")))
    return hourly(frame, "value")


def read_vpa_replay(path: str) -> HourlySeries:
    """`--vpa-replay`: the CSV `tidewise replay vpa` writes (series,timestamp,target,...): Tidewise's
    recommendation per decision, held until the next one (an hour without a decision keeps the last)."""
    if os.path.isdir(path) or not os.path.exists(path):
        raise InputError(f"--vpa-replay {path}: no such file; write it with `tidewise replay vpa --output FILE`")
    try:
        frame = pd.read_csv(path, dtype={"series": str})
    except Exception as exc:  # noqa: BLE001 - any reader failure becomes one clear line
        raise InputError(f"--vpa-replay {path} could not be read as CSV ({type(exc).__name__}); give the file "
                         "`tidewise replay vpa --output` wrote") from None
    missing = [c for c in REPLAY_COLUMNS if c not in frame.columns]
    if missing:
        raise InputError(f"--vpa-replay {path}: no column {missing[0]!r}; give the file `tidewise replay vpa "
                         "--output` wrote (series,timestamp,target,...)")
    if frame.empty:
        raise InputError(f"--vpa-replay {path} has no rows; replay a history that covers a decision time")
    frame["timestamp"] = parse_timestamps(frame["timestamp"], f"--vpa-replay {path}")
    target = pd.to_numeric(frame["target"], errors="coerce")
    bad = ~np.isfinite(target.to_numpy(dtype=float)) | (target.to_numpy(dtype=float) < 0)
    if bad.any():
        line = int(np.flatnonzero(bad)[0]) + 2  # line 1 is the header
        raise InputError(f"--vpa-replay {path} line {line}: target {plain(frame['target'].iloc[line - 2])} is not a "
                         "number >= 0; give the file `tidewise replay vpa --output` wrote")
    frame["target"] = target
    out = hourly(frame.sort_values(["series", "timestamp"]), "target")
    # a decision holds until the next one: hours between sparse decisions (--every 4h) keep it
    out.by_id = {sid: s.resample(HOUR).last().ffill() for sid, s in out.by_id.items()}
    return out


def requests_of(state: ClusterState, series: list[str]) -> tuple[dict[str, float], dict[str, str]]:
    """Each series' requested amount in priced units: its container's request in the workload's pod
    template x the workload's replicas (series are a workload's total usage); and the series that
    have none, with the reason."""
    found: dict[str, float] = {}
    missing: dict[str, str] = {}
    for sid in series:
        k = _key(sid)
        wl = state.workload(k.namespace, k.kind, k.name) if k else None
        if k is None or wl is None:
            missing[sid] = "its workload is not in the cluster state"
            continue
        raw = container_requests(wl).get(k.container, {}).get(k.resource)
        if raw is None:
            missing[sid] = f"container {k.container} requests no {k.resource}"
            continue
        try:
            units = to_units(k.resource, raw)
        except (ValueError, ArithmeticError):
            missing[sid] = f"request {raw!r} is not a quantity"
            continue
        value = units / 1000.0 if k.resource == "cpu" else float(units)
        found[sid] = price_unit(k.resource, value) * state.replicas(k.namespace, k.kind, k.name)
    return found, missing


def read_results(path: str, flag: str, needs: tuple[str, ...]) -> dict[str, Any]:
    """A simulator's results.json: {"policies": {label: {metric: number}}, ...}; each policy must
    carry `needs` as finite numbers."""
    if os.path.isdir(path) or not os.path.exists(path):
        raise InputError(f"{flag} {path}: no such file; give the results.json the simulator wrote")
    try:
        with open(path, encoding="utf-8") as fh:
            doc = json.load(fh)
    except (ValueError, UnicodeDecodeError) as exc:
        raise InputError(f"{flag} {path} is not JSON ({exc}); give the results.json the simulator wrote") from None
    policies = doc.get("policies") if isinstance(doc, dict) else None
    if not isinstance(policies, dict) or not policies:
        raise InputError(f"{flag} {path}: no \"policies\" mapping; give the results.json the simulator wrote")
    for label, metrics in policies.items():
        for key in needs:
            v = metrics.get(key) if isinstance(metrics, dict) else None
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v < 0:
                raise InputError(f"{flag} {path}: policies.{label}.{key} is {v!r}; each policy needs {', '.join(needs)} "
                                 "as numbers >= 0 (re-run the simulator)")
    return doc


def simulated_hours(results_path: str) -> float | None:
    """The hours a simulator's results cover: its `settings.days` x 24, read from the details.json
    it writes beside results.json (the results contract names no span); None when that file is
    absent or names no days (the lever is then priced but given no rate per day)."""
    path = os.path.join(os.path.dirname(os.path.abspath(results_path)), "details.json")
    try:
        with open(path, encoding="utf-8") as fh:
            doc = json.load(fh)
    except (OSError, ValueError, UnicodeDecodeError):
        return None
    days = doc.get("settings", {}).get("days") if isinstance(doc, dict) and isinstance(doc.get("settings"), dict) \
        else None
    if isinstance(days, bool) or not isinstance(days, (int, float)) or not math.isfinite(days) or days <= 0:
        return None
    return float(days) * 24.0


def span_hours(series: HourlySeries) -> float | None:
    """The hours from the first hour any series covers to the end of the last one (None: no hours)."""
    starts = [s.index.min() for s in series.by_id.values() if len(s)]
    ends = [s.index.max() for s in series.by_id.values() if len(s)]
    if not starts:
        return None
    return float((max(ends) + HOUR - min(starts)) / HOUR)
