"""Replay the predictive HPA: serving replicas per minute, the Kubernetes HPA rule running above
Tidewise's minReplicas floor, against the same HPA with no floor (the reactive reference)."""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable

import numpy as np
import pandas as pd

from autoscaler.logic.hpa import Stabilizer, predictive_min_replicas, simulate_reactive_hpa
from autoscaler.logic.vpa import quantile_column
from autoscaler.replay.forecasts import level_ratio, shifted
from autoscaler.settings import HpaSettings
from predictor.types import Forecast


@dataclass
class HpaRules:
    """The simulated Kubernetes HPA (the rules of the serving benchmark)."""

    target_utilization: float = 0.7
    tolerance: float = 0.1
    stabilization: pd.Timedelta = pd.Timedelta("5m")
    startup: pd.Timedelta = pd.Timedelta("2m")

    @property
    def startup_minutes(self) -> int:
        return int(math.ceil(self.startup / pd.Timedelta("1min")))

    @property
    def stabilization_minutes(self) -> int:
        return max(1, int(math.ceil(self.stabilization / pd.Timedelta("1min"))))


@dataclass
class HpaReplay:
    replicas: pd.DataFrame  # series,timestamp,replicas (serving, per minute)
    reference: pd.DataFrame  # series,timestamp,replicas of the reactive HPA alone
    floors: pd.DataFrame  # series,timestamp,min_replicas Tidewise set


def demand_per_minute(y: pd.Series, start: pd.Timestamp) -> pd.Series:
    """The demand as the HPA sees it each minute (each sample holds until the next)."""
    d = y.resample("1min").ffill()
    return d[d.index >= start]


def floor_timeline(key: str, y: pd.Series, minutes: pd.DatetimeIndex, per: float, rules: HpaRules,
                   hpa: HpaSettings, forecasts: dict[pd.Timestamp, Forecast]) -> np.ndarray:
    """minReplicas in force at each minute; set every forecast step from samples before that step."""
    step = y.index[1] - y.index[0] if len(y) > 1 else pd.Timedelta("5m")
    stamps = y.index.asi8
    capacity = per * rules.target_utilization  # what one replica carries at the target utilisation
    stabilizer = Stabilizer(pd.Timedelta(hpa.stabilization))
    floors = np.ones(len(minutes), dtype=int)
    slots = minutes.floor(step)
    for slot in pd.unique(slots):
        slot = pd.Timestamp(slot)
        fc = forecasts.get(slot.floor("D"))
        if fc is None:
            continue  # no forecast before this day: the HPA runs reactively (floor 1)
        y_before = y.iloc[: int(np.searchsorted(stamps, slot.value))]
        view = shifted(fc, slot, level_ratio(y_before, fc, slot.floor("D"), slot))
        demand = quantile_column(view, hpa.quantile)
        if len(demand) == 0 or not np.all(np.isfinite(demand)):
            continue
        want, _ = predictive_min_replicas(demand, step, pd.Timedelta(hpa.startup), pd.Timedelta(hpa.look_ahead), capacity)
        floors[slots == slot] = stabilizer.apply(slot, want)
    return floors


def replay_hpa(
    series: dict[str, pd.Series],
    starts: dict[str, pd.Timestamp],
    per_replica: dict[str, float],
    forecasts: dict[str, dict[pd.Timestamp, Forecast]],
    rules: HpaRules | None = None,
    hpa: HpaSettings | None = None,
    progress: Callable[[int], None] | None = None,
) -> HpaReplay:
    rules = rules or HpaRules()
    hpa = hpa or HpaSettings(startup=f"{int(rules.startup.total_seconds())}s")
    out, ref, floors = [], [], []
    for key, y in series.items():
        start, per = starts[key], per_replica[key]
        d1 = demand_per_minute(y, start)
        before = y[y.index < start].dropna().iloc[-12:]
        r0 = max(1, int(np.ceil(before.mean() / (per * rules.target_utilization)))) if len(before) else 1
        demand = d1.to_numpy(dtype=float)
        floor = floor_timeline(key, y, d1.index, per, rules, hpa, forecasts.get(key, {}))
        kw = dict(target_utilization=rules.target_utilization, tolerance=rules.tolerance,
                  stabilization_minutes=rules.stabilization_minutes, startup_minutes=rules.startup_minutes)
        serving = simulate_reactive_hpa(demand, per, r0, min_replicas=floor, **kw)
        reactive = simulate_reactive_hpa(demand, per, r0, **kw)
        out.append(pd.DataFrame({"series": key, "timestamp": d1.index, "replicas": serving.astype(int)}))
        ref.append(pd.DataFrame({"series": key, "timestamp": d1.index, "replicas": reactive.astype(int)}))
        floors.append(pd.DataFrame({"series": key, "timestamp": d1.index, "min_replicas": floor}))
        if progress:
            progress(1)
    cat = lambda parts, cols: pd.concat(parts, ignore_index=True) if parts else pd.DataFrame(columns=cols)  # noqa: E731
    return HpaReplay(cat(out, ["series", "timestamp", "replicas"]), cat(ref, ["series", "timestamp", "replicas"]),
                     cat(floors, ["series", "timestamp", "min_replicas"]))
