"""VPA estimator: percentile -> margin -> floors -> policy caps, and the change limit."""
import numpy as np
import pandas as pd
import pytest

from autoscaler.logic.vpa import (ContainerPolicy, NonFiniteForecast, container_policy, limit_change,
                                  pod_peaks_range, recommend_resource, vpa_default_request)
from autoscaler.settings import VpaSettings
from predictor.types import Forecast

QS = (0.5, 0.9, 0.95, 0.99)


def forecast(columns: dict[float, list[float]]) -> Forecast:
    n = len(next(iter(columns.values())))
    values = np.column_stack([np.asarray(columns[q], dtype=float) for q in QS])
    return Forecast("ns/Deployment/app/c/cpu", pd.date_range("2026-01-01", periods=n, freq="5min", tz="UTC"),
                    QS, values, model="m")


def ramp(n=24, base=1.0):
    """q0.5 = base..., each higher quantile 10% above the one below; a peak at step 6."""
    x = np.full(n, base)
    x[6] = 2 * base
    return {0.5: x, 0.9: x * 1.1, 0.95: x * 1.2, 0.99: x * 1.3}


def test_target_is_window_max_of_quantile_plus_margin_per_replica():
    s = VpaSettings(quantile=0.95, margin=0.10, lower_quantile=0.5, upper_factor=1.5, min_cpu_millicpu=1)
    fc = forecast(ramp())
    rec = recommend_resource(fc, "cpu", 2, s, window_steps=12, safe_steps=24)
    # peak in window: 2 cores * 1.2 (q0.95) * 1.1 margin / 2 replicas = 1.32 cores
    assert rec.target == 1320
    assert rec.lower == 1000  # q0.5 peak 2 / 2 replicas over the safe window, no margin
    assert rec.upper == 1980  # target x upper_factor: a request above it is waste
    assert rec.lower <= rec.target <= rec.upper
    assert rec.reason.raw == 1320 and rec.reason.quantile == 0.95


def test_lower_bound_is_the_safe_window_need_and_the_target_covers_the_hold_window():
    s = VpaSettings(quantile=0.9, margin=0.0, lower_quantile=0.9, min_cpu_millicpu=1)
    rec = recommend_resource(forecast(ramp()), "cpu", 1, s, window_steps=12, safe_steps=6)
    assert rec.target == 2200  # the peak at step 6 is inside the 12-step window
    assert rec.lower == 1100  # steps 0..5 need 1 core * 1.1 (q0.9)


def test_memory_never_below_the_last_day_peak():
    s = VpaSettings(quantile=0.9, margin=0.0, min_memory_bytes=1)
    cols = {q: np.full(12, 1e9) for q in QS}
    rec = recommend_resource(forecast(cols), "memory", 2, s, 12, 12, memory_peak=3e9)
    assert rec.target == 1_500_000_000  # peak 3 GB over 2 replicas beats the 0.5 GB forecast per pod
    assert rec.floor == rec.target
    assert "peak" in rec.reason.steps[0]


def test_policy_caps_and_the_stock_minimum():
    s = VpaSettings(quantile=0.5, margin=0.0, min_cpu_millicpu=25)
    tiny = recommend_resource(forecast({q: np.full(12, 0.001) for q in QS}), "cpu", 1, s, 12, 12)
    assert tiny.target == 25
    policy = ContainerPolicy(min_allowed={"cpu": 300}, max_allowed={"cpu": 800})
    low = recommend_resource(forecast({q: np.full(12, 0.1) for q in QS}), "cpu", 1, s, 12, 12, policy)
    high = recommend_resource(forecast({q: np.full(12, 5.0) for q in QS}), "cpu", 1, s, 12, 12, policy)
    assert (low.target, high.target) == (300, 800)
    assert high.uncapped == 5000
    assert 300 <= high.lower <= 800 and 300 <= high.upper <= 800


def test_nan_forecast_raises_instead_of_recommending():
    for q in QS:  # whichever quantile the settings read
        cols = ramp()
        cols[q] = cols[q].copy()
        cols[q][3] = np.nan
        with pytest.raises(NonFiniteForecast):
            recommend_resource(forecast(cols), "cpu", 1, VpaSettings(quantile=q, lower_quantile=q),
                               12, 24)


def test_container_policy_exact_name_beats_wildcard():
    vpa = {"spec": {"resourcePolicy": {"containerPolicies": [
        {"containerName": "*", "mode": "Off"},
        {"containerName": "app", "controlledResources": ["memory"], "maxAllowed": {"memory": "1Gi"}}]}}}
    p = container_policy(vpa, "app")
    assert p.mode == "Auto" and p.controlled == ("memory",) and p.max_allowed == {"memory": 2**30}
    assert container_policy(vpa, "sidecar").mode == "Off"
    assert container_policy({}, "x") == ContainerPolicy()


def test_limit_change_bounds_each_step():
    assert limit_change(1000, 100, 0.5, 4.0) == (500, "decrease limited to 0.5x of 1000: 500")
    assert limit_change(1000, 9000, 0.5, 4.0)[0] == 4000
    assert limit_change(1000, 900, 0.5, 4.0) == (900, None)
    assert limit_change(None, 5, 0.5, 4.0) == (5, None)
    assert limit_change(1000, 9000, 0.5, 4.0, floor=6000)[0] == 6000  # the memory floor wins


def test_limit_change_lets_a_target_move_as_far_as_the_workloads_own_hourly_peaks():
    def seen():
        return 90, 2100
    # a night at 100m after a day at 2000m: the ratios alone would halve 2000 -> 1000 -> 500 -> 250 -> 125
    assert limit_change(2000, 100, 0.5, 4.0, seen=seen) == (
        100, "beyond 0.5x of 2000, not limited: the workload's own hourly peaks spanned 90-2100")
    assert limit_change(100, 2000, 0.5, 4.0, seen=seen)[0] == 2000  # and back up at dawn
    # beyond both, the wider of the two is the limit, and the reason names both
    assert limit_change(2000, 50, 0.5, 4.0, seen=seen) == (
        90, "decrease limited to 0.5x of 2000 or the workload's own hourly peaks 90-2100: 90")
    assert limit_change(100, 9000, 0.5, 4.0, seen=seen)[0] == 2100
    assert limit_change(1000, 9000, 0.5, 4.0, seen=seen)[0] == 4000  # the ratio reaches further
    assert limit_change(2000, 50, 0.5, 4.0, floor=300, seen=seen)[0] == 300  # a floor still wins
    assert limit_change(2000, 100, 0.5, 4.0, seen=lambda: None)[0] == 1000  # no range known: the ratios
    # inside the ratios the range is not even read (serve reads it for the few targets that need it)
    assert limit_change(1000, 900, 0.5, 4.0, seen=lambda: 1 / 0) == (900, None)


def test_pod_peaks_range_is_the_lowest_and_highest_clock_hour_maximum_per_pod_in_units():
    for unit in ("ns", "us", "s"):
        idx = pd.date_range("2026-11-01", periods=36, freq="5min", tz="UTC").as_unit(unit)  # three clock hours
        y = pd.Series([1.0] * 12 + [5.0] * 6 + [2.0] * 6 + [3.0] * 11 + [np.nan], index=idx)
        now = idx[-1] + pd.Timedelta("5min")
        assert pod_peaks_range(y, now, pd.Timedelta("3h"), 2, "cpu") == (500, 2500)  # cores / 2 pods, millicpu
        assert pod_peaks_range(y, now, pd.Timedelta("2h"), 1, "memory") == (3, 5)  # the first hour is outside
        assert pod_peaks_range(y, idx[13], pd.Timedelta("3h"), 1, "cpu") == (1000, 5000)  # before now only
        assert pod_peaks_range(y, idx[0], pd.Timedelta("3h"), 1, "cpu") is None  # nothing before now
        assert pod_peaks_range(y.iloc[-1:], now, pd.Timedelta("3h"), 1, "cpu") is None  # nothing finite


def test_vpa_default_is_decaying_p90_plus_15_percent():
    values = np.array([1.0] * 90 + [10.0] * 10)
    ages = np.zeros(100)
    assert vpa_default_request(values, ages) == pytest.approx(1.15)
    # old high samples weigh less: samples a week old count 1/128 each
    ages = np.array([0.0] * 90 + [168.0] * 10)
    assert vpa_default_request(values, ages) == pytest.approx(1.15)
    values = np.array([1.0] * 50 + [2.0] * 50)
    ages = np.array([168.0] * 50 + [0.0] * 50)
    assert vpa_default_request(values, ages) == pytest.approx(2.3)
