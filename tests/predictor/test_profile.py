import json

import numpy as np
import pandas as pd

from predictor.history import history_from_frame
from predictor.profile import build_profile, build_profiles
from predictor.sources.synthetic import generate_cluster

STEP = pd.Timedelta("5min")


def test_profile_classes_follow_the_generated_shapes():
    c = generate_cluster(seed=7)
    profiles = build_profiles(history_from_frame(c.history(resources=("cpu",)), STEP))
    got = {w.shape: [] for w in c.workloads}
    for w in c.workloads:
        got[w.shape].append(profiles[w.key("cpu").id].profile_class)
    assert set(got["tidal"]) == {"tidal"}
    assert set(got["trending"]) == {"trending"}
    assert set(got["bursty"]) == {"bursty"}
    assert set(got["flat"]) == {"flat"}
    for p in profiles.values():
        assert p.reasons, "every class carries its reason"


def test_peak_window_and_weekly_curve_of_a_known_tide():
    idx = pd.date_range("2024-01-01", periods=14 * 288, freq="5min", tz="UTC")
    y = pd.Series(10 + 5 * np.cos(2 * np.pi * (idx.hour + idx.minute / 60 - 14) / 24), index=idx)
    p = build_profile("x", y, STEP)
    assert p.profile_class == "tidal"
    assert in_window(14, p.peak_window) and not in_window(2, p.peak_window)
    assert in_window(2, p.trough_window) and not in_window(14, p.trough_window)
    assert p.peak_to_trough == pytest_approx(15 / 5, 0.05)
    assert len(p.weekly_curve_p50) == 7 and len(p.weekly_curve_p50[0]) == 96
    assert p.weekly_curve_p95[0][14 * 4] >= p.weekly_curve_p50[0][14 * 4] > p.weekly_curve_p50[0][2 * 4]


def in_window(hour, w):
    """Whether `hour` falls in a (possibly midnight-wrapping) window of whole hours."""
    a, b = int(w["start"][:2]), int(w["end"][:2])
    return a <= hour < b if a < b else (hour >= a or hour < b)


def pytest_approx(v, rel):
    import pytest

    return pytest.approx(v, rel=rel)


def test_short_history_is_insufficient_and_json_is_strict():
    idx = pd.date_range("2024-01-01", periods=100, freq="5min", tz="UTC")
    p = build_profile("x", pd.Series(1.0, index=idx), STEP)
    assert p.profile_class == "insufficient-history"
    text = json.dumps(p.to_dict(), allow_nan=False)
    assert '"class": "insufficient-history"' in text


def test_usage_per_traffic_when_a_business_series_exists():
    idx = pd.date_range("2024-01-01", periods=3 * 288, freq="5min", tz="UTC")
    qps = 100 + 50 * np.sin(np.arange(len(idx)) / 288 * 2 * np.pi)
    frame = pd.concat([
        pd.DataFrame({"series": "ns/Deployment/web/app/cpu", "timestamp": idx, "value": qps * 0.02}),
        pd.DataFrame({"series": "ns/Deployment/web/-/qps", "timestamp": idx, "value": qps}),
    ])
    p = build_profiles(history_from_frame(frame, STEP))["ns/Deployment/web/app/cpu"]
    assert p.usage_per_traffic == pytest_approx(0.02, 1e-6)
