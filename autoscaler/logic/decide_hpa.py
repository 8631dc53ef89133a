"""One HPA's predictive floor from its workload's forecasts: typed in, typed out.

minReplicas = the replicas the forecast needs from now to `startup` + `look_ahead` ahead
(`predictive_min_replicas`), the forecast scaled by how the last observations compare with the cached
forecast (`observed_level_ratio`; optionally the median times its own recent errors' quantile,
`ShortTermBand`), stabilised downwards, raised to the user's own minimum and capped at maxReplicas.
The replay (studies/replay/decisions.py replay_hpa) computes the same floor with the same functions.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping

import numpy as np
import pandas as pd

from autoscaler.logic.hpa import (ShortTermBand, Stabilizer, floor_demand, hpa_target, interpolate_quantile,
                                  level_ratio, parse_hpa, predictive_min_replicas)
from autoscaler.logic.vpa import quantile_column
from autoscaler.model.decisions import HpaDecision, Reason
from autoscaler.model.views import ANNOTATION_USER_MIN, HpaView, MalformedHpa, WorkloadSeries
from autoscaler.settings import HpaSettings
from contracts.quantity import readable_units
from predictor.durations import parse_duration
from predictor.history import History
from predictor.timestamps import epoch_ns
from predictor.types import Forecast


def observed_level_ratio(sids: list[str], made: Mapping[str, Forecast], history: History, origin: pd.Timestamp,
                         step: pd.Timedelta, level_steps: int) -> float:
    """Observed / forecast (median) over the last `level_steps` steps that the forecasts as they were
    made (`made`: series -> forecast, not shifted to this run) cover; 1 when a forecast was just made
    (it has seen those samples already) or a series has none."""
    observed: list[np.ndarray] = []
    expected: list[np.ndarray] = []
    for sid in sids:
        fc = made.get(sid)
        if fc is None:
            return 1.0
        done = int((origin.value - int(epoch_ns(fc.index)[0])) // step.value)  # forecast steps now in the past
        if done <= 0:
            return 1.0
        a = max(0, done - level_steps)
        y = history.series[sid]
        # the same regular grid: the observations at the forecast's steps a..done, by position
        yi, first = epoch_ns(y.index), int(epoch_ns(fc.index)[a])
        pos = int(np.searchsorted(yi, first))
        seen = np.full(done - a, np.nan)
        if pos < len(yi) and yi[pos] == first:
            got = y.to_numpy()[pos: pos + done - a]
            seen[: len(got)] = got
        observed.append(seen)
        expected.append(quantile_column(fc, 0.5)[a:done])
    return level_ratio(np.sum(observed, axis=0), np.sum(expected, axis=0))


def _floor_demand(inp: HpaInputs, sids: list[str], s: HpaSettings, ratio: float,
                  band: ShortTermBand) -> tuple[np.ndarray, float | None]:
    """(the demand the floor carries, the short-term band's factor or None), as the replay computes it:
    the band first scores the step just seen and remembers its prediction for the step now starting."""
    q = sum(interpolate_quantile(inp.forecasts[x].values, inp.forecasts[x].quantiles, s.quantile) for x in sids)
    q50 = sum(quantile_column(inp.forecasts[x], 0.5) for x in sids)
    factor = None
    if s.band_steps:
        band.size = s.band_steps
        last = inp.origin - inp.step
        seen = [inp.history.series[x].get(last, np.nan) for x in sids]
        band.observe(last, float(np.sum(seen)))
        band.predict(inp.origin, float(np.asarray(q50)[0] * ratio))
        factor = band.factor(s.quantile, s.band_min_steps)
    return floor_demand(np.asarray(q), np.asarray(q50), ratio, factor), factor


@dataclass(frozen=True)
class HpaInputs:
    """What one HPA's decision reads besides its settings."""

    hpa: HpaView
    pod_requests: dict[str, int]  # the workload's pod template requests, in units
    series: WorkloadSeries | None
    forecasts: Mapping[str, Forecast]  # series -> forecast from this run's origin
    made: Mapping[str, Forecast]  # series -> the forecast as it was made (for the level ratio)
    history: History
    origin: pd.Timestamp
    now: pd.Timestamp
    step: pd.Timedelta


@dataclass
class HpaOutcome:
    """The decision, and which series it read (exported by the metrics)."""

    decision: HpaDecision
    target_kind: str
    target_name: str
    series: list[str]


def _user_min(hpa: HpaView, spec_min: int) -> int:
    ann = hpa.user_min_annotation()
    if ann is None:
        return spec_min
    try:
        return max(1, int(ann))
    except ValueError:
        raise MalformedHpa(f"annotation {ANNOTATION_USER_MIN}={ann!r} is not an integer") from None


def decide_hpa(inp: HpaInputs, settings: HpaSettings, stabilizer: Stabilizer) -> HpaOutcome:
    """The HPA's new minReplicas with its reason. `stabilizer` is this HPA's memory of recent
    wishes (the one state a floor needs); MalformedHpa or LookupError when it cannot be served."""
    s, step = settings, inp.step
    kind, target, spec_min, max_replicas = parse_hpa(inp.hpa.obj)
    tgt = hpa_target(inp.hpa.obj, inp.pod_requests, s.default_utilization)
    sids = inp.series.ids(tgt.resource) if inp.series else []
    if not sids or any(x not in inp.forecasts for x in sids):
        raise LookupError(f"no usable {tgt.resource} forecast for {inp.hpa.namespace}/{kind}/{target}")
    fc0 = inp.forecasts[sids[0]]
    scale = 1000.0 if tgt.resource == "cpu" else 1.0  # series carry cores; targets are millicpu
    ratio = observed_level_ratio(sids, inp.made, inp.history, inp.origin, step, s.level_steps) \
        if s.level_steps else 1.0
    demand, factor = _floor_demand(inp, sids, s, ratio, stabilizer.band)
    lead = parse_duration(s.startup)
    capacity = tgt.per_replica_units * (1 + s.floor_tolerance)
    since = max(pd.Timedelta(0), inp.now - inp.origin)  # the loop decides every minute on 5-minute steps
    wish, timeline = predictive_min_replicas(demand * scale, step, lead, parse_duration(s.look_ahead), capacity, since)
    user_min = _user_min(inp.hpa, spec_min)
    steady = stabilizer.apply(inp.now, wish)
    reason = Reason(model=f"{fc0.model}@{fc0.version}", quantile=s.quantile, margin=0.0,
                    window=f"now..+{s.startup}+{s.look_ahead}", raw=wish)
    if ratio != 1.0:
        reason.steps.append(f"forecast x{ratio:.2f}: the last {s.level_steps} steps' observed / forecast")
    if factor is not None:
        reason.steps.append(f"median x{factor:.2f}: q{s.quantile:g} of its last {len(stabilizer.band.errors)} steps' errors")
    reason.steps.append(f"per replica {readable_units(tgt.resource, tgt.per_replica_units)} ({tgt.describe}) x "
                        f"(1 + {s.floor_tolerance:g} tolerance)")
    if steady != wish:
        reason.steps.append(f"scale-down stabilised over {s.stabilization}: {steady}")
    final = max(steady, user_min)
    if final != steady:
        reason.steps.append(f"raised to the user's minReplicas {user_min}")
    if final > max_replicas:
        reason.steps.append(f"capped at maxReplicas {max_replicas}")
        final = max_replicas
    # replicas needed at now + lead, and the next 4 hours of replicas(t) for the reason and the report
    predicted = int(timeline[min(int(lead // step), len(timeline) - 1)])
    start = fc0.index[0]
    start_iso = start.tz_convert("UTC").strftime("%Y-%m-%dT%H:%M:%SZ") if start.tzinfo \
        else start.strftime("%Y-%m-%dT%H:%M:%SZ")
    decision = HpaDecision(inp.hpa.namespace, inp.hpa.name, final, user_min, max_replicas, predicted,
                           [int(x) for x in timeline[:48]], reason, start_iso, int(step.total_seconds()))
    return HpaOutcome(decision, kind, target, sids)
