"""Predictive HPA: replicas ahead of the peak, stabilisation, HPA parsing, the reactive simulator."""
import importlib.util
import os

import numpy as np
import pandas as pd
import pytest

from autoscaler.logic.hpa import (ShortTermBand, Stabilizer, hpa_scores, hpa_target, interpolate_quantile, parse_hpa,
                                  predictive_min_replicas, replicas_needed, simulate_reactive_hpa)
from autoscaler.model.views import MalformedHpa

STEP = pd.Timedelta("5min")


def test_replicas_are_ceil_of_demand_over_target():
    assert list(replicas_needed(np.array([0.0, 1.0, 3.0, 3.01, 10.0]), 1.0)) == [1, 1, 3, 4, 10]
    with pytest.raises(ValueError):
        replicas_needed(np.array([1.0, np.nan]), 1.0)
    with pytest.raises(ValueError):
        replicas_needed(np.array([1.0]), 0.0)


def test_min_replicas_covers_the_peak_after_the_lead_only():
    demand = np.array([1.0, 1.0, 9.0, 9.0, 1.0, 1.0, 1.0, 1.0])  # a peak at +10 min
    # lead 2 min, look-ahead 10 min: steps 0..2 -> the peak at step 2 is covered now
    n, timeline = predictive_min_replicas(demand, STEP, pd.Timedelta("2min"), pd.Timedelta("10min"), 1.0)
    assert n == 9 and timeline[2] == 9
    # 20 min after the origin: steps 4..6 are after the peak
    n, _ = predictive_min_replicas(demand, STEP, pd.Timedelta("2min"), pd.Timedelta("10min"), 1.0,
                                   since=pd.Timedelta("20min"))
    assert n == 1


def test_stabiliser_raises_at_once_and_lowers_after_the_window():
    st = Stabilizer(pd.Timedelta("10min"))
    t0 = pd.Timestamp("2026-01-01", tz="UTC")
    assert st.apply(t0, 5) == 5
    assert st.apply(t0 + pd.Timedelta("1min"), 8) == 8
    assert st.apply(t0 + pd.Timedelta("5min"), 2) == 8  # within 10 minutes of the 8
    assert st.apply(t0 + pd.Timedelta("12min"), 2) == 2  # the 8 aged out


def hpa(**spec):
    base = {"scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "web"}, "minReplicas": 2,
            "maxReplicas": 10, "metrics": [{"type": "Resource", "resource": {"name": "cpu", "target": {
                "type": "Utilization", "averageUtilization": 50}}}]}
    base.update(spec)
    return {"apiVersion": "autoscaling/v2", "kind": "HorizontalPodAutoscaler",
            "metadata": {"name": "web", "namespace": "shop"}, "spec": {k: v for k, v in base.items() if v is not None}}


def test_parse_and_target_per_replica():
    assert parse_hpa(hpa()) == ("Deployment", "web", 2, 10)
    t = hpa_target(hpa(), {"cpu": 2000}, 0.7)
    assert (t.resource, t.per_replica_units) == ("cpu", 1000.0)
    av = hpa(metrics=[{"type": "Resource", "resource": {"name": "memory", "target": {"type": "AverageValue",
                                                                                    "averageValue": "1Gi"}}}])
    assert hpa_target(av, {}, 0.7).per_replica_units == 2**30


@pytest.mark.parametrize("spec,match", [
    ({"maxReplicas": None}, "maxReplicas"),
    ({"maxReplicas": "ten"}, "maxReplicas"),
    ({"minReplicas": 5, "maxReplicas": 3}, "minReplicas 5 > maxReplicas 3"),
    ({"minReplicas": 0}, "minReplicas"),
    ({"scaleTargetRef": {"kind": "Deployment"}}, "scaleTargetRef"),
])
def test_malformed_hpas_are_refused(spec, match):
    with pytest.raises(MalformedHpa, match=match):
        parse_hpa(hpa(**spec))


def test_hpa_metrics_that_cannot_size_replicas_are_refused():
    with pytest.raises(MalformedHpa, match="request"):
        hpa_target(hpa(), {}, 0.7)  # Utilization of a request the pods do not make
    ext = hpa(metrics=[{"type": "External", "external": {"metric": {"name": "qps"}}}])
    with pytest.raises(MalformedHpa, match="no Resource metric"):
        hpa_target(ext, {"cpu": 1000}, 0.7)
    bad = hpa(metrics=[{"type": "Resource", "resource": {"name": "cpu", "target": {"type": "Utilization",
                                                                                  "averageUtilization": "x"}}}])
    with pytest.raises(MalformedHpa):
        hpa_target(bad, {"cpu": 1000}, 0.7)


def _reference():
    from tests.conftest import SHARED_EVAL

    path = os.path.join(SHARED_EVAL, "bench_decisions.py")
    if not os.path.exists(path):
        pytest.skip(f"needs the reference scorer {path} (../shared/eval beside the checkout)")
    import sys
    sys.path.insert(0, os.path.dirname(path))
    try:
        spec = importlib.util.spec_from_file_location("bench_decisions_ref", path)
        mod = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(mod)
    finally:
        sys.path.pop(0)
    return mod


def test_reactive_simulator_matches_the_reference_scorer():
    ref = _reference()
    rng = np.random.default_rng(1)
    t = np.arange(3 * 1440)
    demand = 50 + 40 * np.sin(2 * np.pi * t / 1440) + rng.normal(0, 5, len(t))
    demand[100:130] += 80  # a flash crowd
    ours = simulate_reactive_hpa(demand, 10.0, 5)
    assert np.array_equal(ours, ref.hpa_reactive(demand, 10.0, 5))
    assert hpa_scores(demand, ours, 10.0) == ref.hpa_scores(demand, ours, 10.0)


def test_a_predictive_floor_removes_the_lag_of_the_reactive_hpa():
    demand = np.concatenate([np.full(60, 10.0), np.full(60, 60.0)])  # a step up at minute 60
    reactive = simulate_reactive_hpa(demand, 10.0, 2)
    floor = np.where(np.arange(120) >= 57, 9, 1)  # asked for 3 minutes ahead (start-up 2 min)
    predictive = simulate_reactive_hpa(demand, 10.0, 2, min_replicas=floor)
    _, over_r = hpa_scores(demand, reactive, 10.0)
    _, over_p = hpa_scores(demand, predictive, 10.0)
    assert over_p < over_r
    assert predictive[60] >= 9  # ready when the step arrives
    capped = simulate_reactive_hpa(demand, 10.0, 2, min_replicas=floor, max_replicas=4)
    assert capped.max() <= 4


def test_level_ratio_carries_the_observed_level_and_is_bounded():
    from autoscaler.logic.hpa import level_ratio

    assert level_ratio(np.array([12.0, 12.0, 12.0]), np.array([10.0, 10.0, 10.0])) == pytest.approx(1.2)
    assert level_ratio(np.array([100.0]), np.array([1.0])) == 2.0  # clipped: one outlier cannot triple the floor
    assert level_ratio(np.array([0.0]), np.array([10.0])) == 0.5
    assert level_ratio(np.array([np.nan, 9.0]), np.array([10.0, 10.0])) == pytest.approx(0.9)  # NaN pair dropped
    assert level_ratio(np.array([]), np.array([])) == 1.0


def test_floor_carries_only_the_steps_it_serves():
    # the floor set now serves from now + 2 min until the next decision's replicas serve, 5 min later:
    # steps 0 and 1 ([0, 5) and [5, 10) min); a ramp at step 2 is the next decision's, not this one's
    demand = np.array([1.0, 1.0, 9.0, 9.0, 9.0, 9.0])
    assert predictive_min_replicas(demand, STEP, pd.Timedelta("2min"), pd.Timedelta("5min"), 1.0)[0] == 1
    assert predictive_min_replicas(demand, STEP, pd.Timedelta("6min"), pd.Timedelta("5min"), 1.0)[0] == 9
    # a span ending exactly on a step boundary does not reach into the next step
    assert predictive_min_replicas(demand, STEP, pd.Timedelta("0min"), pd.Timedelta("10min"), 1.0)[0] == 1


def ramp_floors(need: np.ndarray, lead: pd.Timedelta, stabilization: pd.Timedelta) -> list[int]:
    """The floor decided every 5 minutes over a known demand `need` (one value per step), stabilised."""
    st = Stabilizer(stabilization)
    t0 = pd.Timestamp("2026-01-01", tz="UTC")
    return [st.apply(t0 + k * STEP, predictive_min_replicas(need[k:], STEP, lead, STEP, 1.0)[0])
            for k in range(len(need) - 3)]


def test_replicas_rise_a_start_up_time_before_the_ramp_and_fall_after_the_stabilisation_window():
    need = np.array([2.0] * 6 + [8.0] * 4 + [2.0] * 8)  # ramp at step 6 (minute 30), back down at step 10
    floors = ramp_floors(need, pd.Timedelta("2min"), pd.Timedelta("15min"))
    # asked for at minute 25, they serve from minute 27: the start-up time before the ramp; not earlier
    assert floors[:5] == [2] * 5 and floors[5] == 8
    # the last high wish is asked at minute 45 (need falls at minute 50); the floor holds it for the
    # 15-minute window and falls at minute 60
    assert floors[9:12] == [8, 8, 8] and floors[12] == 2


def test_interpolated_quantile_lies_between_the_stored_ones():
    values = np.array([[1.0, 3.0, 4.0], [2.0, 6.0, 8.0]])
    qs = (0.5, 0.9, 0.95)
    assert np.allclose(interpolate_quantile(values, qs, 0.7), [2.0, 4.0])
    assert np.allclose(interpolate_quantile(values, qs, 0.9), [3.0, 6.0])
    assert np.allclose(interpolate_quantile(values, qs, 0.3), [1.0, 2.0])  # never extrapolated below
    with pytest.raises(ValueError):
        interpolate_quantile(values, qs, 0.99)


def test_short_term_band_is_the_quantile_of_its_own_recent_errors():
    band = ShortTermBand(size=4)
    t0 = pd.Timestamp("2026-01-01", tz="UTC")
    assert band.factor(0.9, min_samples=1) is None  # nothing scored yet
    for k, observed in enumerate([10.0, 12.0, 8.0, 11.0, 13.0]):
        band.predict(t0 + k * STEP, 10.0)
        band.observe(t0 + k * STEP, observed)
    assert band.errors == [1.2, 0.8, 1.1, 1.3]  # the oldest dropped: size 4
    assert band.factor(1.0, min_samples=4) == pytest.approx(1.3)
    assert band.factor(0.5, min_samples=5) is None
    band.observe(t0 + 9 * STEP, 50.0)  # nothing was predicted for that step: not scored
    assert len(band.errors) == 4
