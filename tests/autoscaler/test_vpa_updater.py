"""The updater's rule (the request in force moves only outside [lower, upper]), the minimum dwell
before a decrease, and the memory bump after an OOM kill."""
import pandas as pd

from autoscaler.logic.vpa import apply_updater, oom_bumped, target_floor
from autoscaler.model.decisions import Reason, ResourceRecommendation
from autoscaler.settings import MIB, VpaSettings

HOUR = pd.Timedelta("1h")


def rec(target: int, lower: int, upper: int) -> ResourceRecommendation:
    return ResourceRecommendation("cpu", target, lower, upper, target, Reason("m", 0.9, 0.1, "6h", target))


def test_request_inside_the_bounds_is_kept():
    assert apply_updater(1000, rec(800, 600, 1200), 5 * HOUR, 2 * HOUR) == (1000, None)


def test_request_below_the_lower_bound_rises_to_the_target_at_once():
    request, why = apply_updater(500, rec(1500, 900, 2250), pd.Timedelta(0), 2 * HOUR)
    assert request == 1500 and "below lowerBound 900" in why


def test_request_above_the_upper_bound_falls_only_after_the_dwell():
    held, why = apply_updater(3000, rec(1000, 700, 1500), HOUR, 2 * HOUR)
    assert held == 3000 and "held" in why
    assert apply_updater(3000, rec(1000, 700, 1500), 2 * HOUR, 2 * HOUR)[0] == 1000


def test_first_request_is_the_target():
    assert apply_updater(None, rec(700, 500, 1000), None, 2 * HOUR)[0] == 700


def test_oom_bump_is_the_stock_vpa_ratio_or_minimum():
    s = VpaSettings()
    assert oom_bumped(1000 * MIB, s) == 1200 * MIB  # 20% above 1000 MiB beats +100 MiB
    assert oom_bumped(200 * MIB, s) == 300 * MIB  # +100 MiB beats 20% of 200 MiB


def test_memory_floor_after_an_oom_is_per_pod_and_named():
    s = VpaSettings(min_memory_bytes=1)
    floor, why = target_floor("memory", 2, s, memory_peak=1000 * MIB, oom_memory=2000 * MIB)
    assert floor == 1200 * MIB  # 2000 MiB total at the kill over 2 pods, x1.2
    assert "OOM" in why
    assert target_floor("memory", 2, s, memory_peak=1000 * MIB)[0] == 500 * MIB
    assert target_floor("cpu", 1, s, oom_memory=2000 * MIB)[0] == s.min_cpu_millicpu
