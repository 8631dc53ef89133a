"""Issue 13: the within-minute burst model (estimation, scaling law, node peaks) and tidewise's
colocation policy (reserve from its one-minute-ahead errors, forecast-aware placement)."""
from __future__ import annotations

import numpy as np
import pytest

from studies.simulation.colocation.bursts import BurstModel, estimate, excess_samples, hurst, node_peaks
from studies.simulation.colocation.forecast_policy import START_RESERVE, Tidewise
from studies.simulation.colocation.policies import NodeForecasts, Observation, forward_max
from studies.simulation.harness.cluster import Service
from tests.conftest import SHARED_DATA, needs_shared_data
from tests.studies.test_simulation import flat_forecasts, hand_cluster


# --- the burst model ------------------------------------------------------------------------------

def test_excess_of_the_busiest_minute_over_its_five_minute_mean():
    v = np.array([1, 1, 1, 1, 6, 2, 2, 2, 2, 2, 3.0])  # two whole windows; the 11th value is dropped
    np.testing.assert_allclose(excess_samples(v), [6 / 2 - 1, 0.0])
    v[7] = np.nan  # a window with a gap is left out
    np.testing.assert_allclose(excess_samples(v), [2.0])


def test_hurst_separates_white_noise_from_a_random_walk_and_the_law_caps_it():
    rng = np.random.default_rng(0)
    white = 10 + rng.normal(0, 1, 200_000)
    walk = 1000 + np.cumsum(rng.normal(0, 1, 200_000))
    assert hurst(white) == pytest.approx(0.5, abs=0.05)
    assert hurst(walk) > 1.3
    m = estimate({"white": white, "walk": walk}, "calibrated")
    # white noise: 12-second peaks exceed the minute's mean by sqrt(5) times the measured 1-in-5 excess;
    # a random walk's H > 1 is capped at 1 (no smoother inside the minute than at minutes)
    assert m.factor("white") == pytest.approx(5 ** (1 - hurst(white)))
    assert m.factor("walk") == 1.0
    assert estimate({"walk": walk}, "high").factor("walk") == pytest.approx(5 ** 0.5)
    assert estimate({"walk": walk}, "none").factor("walk") == 0.0
    with pytest.raises(ValueError, match="burst setting"):
        estimate({}, "extreme")


def _two_services(limit: float = 100.0) -> tuple[list[Service], np.ndarray]:
    services = [Service("a", 0, 0, 2.0, limit, 1.0), Service("b", 1, 0, 2.0, limit, 1.0)]
    return services, np.array([[4.0] * 1000, [3.0] * 1000])


def test_node_peak_is_the_root_sum_of_squares_of_independent_service_bursts():
    services, shapes = _two_services()
    online = shapes.sum(axis=0)[None, :]
    model = BurstModel("calibrated", {"a": np.array([0.5]), "b": np.array([0.5])}, {"a": 1.0, "b": 1.0})
    peak = node_peaks(online, services, ["a", "b"], lambda s: shapes[s.trace], model, seed=0)
    np.testing.assert_allclose(peak, 7.0 + np.hypot(4 * 0.5, 3 * 0.5))
    none = node_peaks(online, services, ["a", "b"], lambda s: shapes[s.trace], BurstModel("none"), seed=0)
    np.testing.assert_array_equal(none, online)
    # a service's peak never goes over its limit
    capped, _ = _two_services(limit=4.5)
    peak = node_peaks(online, capped, ["a", "b"], lambda s: shapes[s.trace], model, seed=0)
    np.testing.assert_allclose(peak, 7.0 + np.hypot(0.5, 1.5))


def test_bursts_are_drawn_from_each_traces_samples_seeded_and_pooled_for_coarse_traces():
    services, shapes = _two_services()
    online = shapes.sum(axis=0)[None, :]
    x = excess_samples(np.tile([1, 1, 1, 1, 2.0], 50))  # 2/1.2 - 1 in every window
    model = BurstModel("calibrated", {"a": x}, {"a": 1.0}, pooled=x)
    names = ["a", "coarse"]  # "coarse" has no 1-minute history: it draws from the pooled samples
    one = node_peaks(online, services, names, lambda s: shapes[s.trace], model, seed=1)
    again = node_peaks(online, services, names, lambda s: shapes[s.trace], model, seed=1)
    np.testing.assert_array_equal(one, again)
    np.testing.assert_allclose(one, 7.0 + np.hypot(4, 3) * (2 / 1.2 - 1))


@needs_shared_data
def test_calibrated_model_from_the_real_traces_has_bursts_and_finite_numbers():
    from studies.simulation.harness.traces import load_traces

    traces = load_traces(SHARED_DATA, days=1, names=["ccc/cluster2", "web/nasa95", "aiops/cpu4"])
    model = estimate({t.name: t.history_1min for t in traces if t.history_1min is not None}, "calibrated")
    assert set(model.samples) == {"ccc/cluster2", "web/nasa95"}  # aiops is a 5-minute trace
    summary = model.summary()
    assert summary["pooled"]["mean_excess"] > 0.05 and summary["pooled"]["p99_excess"] > summary["pooled"]["p50_excess"]
    assert all(np.isfinite(v["hurst"]) and v["factor"] >= 1.0 for v in summary["traces"].values())


# --- tidewise's policy ----------------------------------------------------------------------------

def obs(t, demand, peak, system=1.0):
    d = np.asarray(demand, float)
    return Observation(t, d, d, np.full(len(d), system), np.zeros(len(d)), np.asarray(peak, float))


def test_reserve_is_the_quantile_of_each_nodes_one_minute_ahead_errors():
    cluster = hand_cluster(np.zeros((2, 5000)))
    p = Tidewise(flat_forecasts(2, 4, {0.5: 5.0}), risk=0.01, window=1000, node_min=500)
    p.reset(cluster)
    rng = np.random.default_rng(0)
    q = p.decide(obs(0, [5.0, 5.0], [5.0, 5.0]))
    np.testing.assert_allclose(q, 32 - 6 - START_RESERVE)  # nothing measured yet: Katalyst's 4 cores
    # node 0 is quiet (peaks 0.5 core over the last minute's mean), node 1 bursty (up to 6 cores)
    bursts = np.stack([np.full(1200, 0.5), rng.uniform(0.0, 6.0, 1200)])
    for t in range(1, 1201):
        q = p.decide(obs(t, [5.0, 5.0], 5.0 + bursts[:, t - 1]))
    # refreshed at minute 1200 (every 15): the 990th smallest of each node's last 1000 errors
    want = np.sort(bursts[:, -1000:], axis=1)[:, 989]
    np.testing.assert_allclose(p.reserve(), want)
    assert p.reserve()[0] == pytest.approx(0.5) and p.reserve()[1] > 5.5
    np.testing.assert_allclose(q, np.minimum(30.0, 32 - 6 - p.reserve()))


def test_forward_max_and_the_forecast_ahead_past_its_horizon():
    rng = np.random.default_rng(2)
    x = rng.normal(size=(3, 200))
    for w in (1, 2, 5, 15, 16, 37):
        brute = np.stack([x[:, i:i + w].max(axis=1) for i in range(200 - w + 1)], axis=1)
        np.testing.assert_array_equal(forward_max(x, w), brute)
    f = np.zeros((1, 1500))
    f[0, 100] = 9.0  # 01:40 in the forecast: past its 25 h, the tide repeats that a day later
    nf = NodeForecasts((0.5,), [{0.5: f}])
    ahead = nf.ahead_max(0.5, 120)
    assert ahead[0, 99] == 9.0 and ahead[0, 100] == 0.0  # minutes t+1 .. t+120
    assert ahead[0, 1439] == 9.0 and ahead[0, 1419] == 0.0  # 1440 + 100 is within 1420 + 1 .. 1420 + 120


def test_placement_sends_a_long_job_only_where_the_forecast_says_its_cores_last():
    cluster = hand_cluster(np.zeros((2, 1440)))
    values = np.full((2, 1500), 4.0)
    values[0, 400:] = 16.0  # node 0's online demand is forecast to rise by 12 cores from 06:40
    p = Tidewise(NodeForecasts((0.5,), [{0.5: values}]))
    p.reset(cluster)
    for t in range(300):
        p.decide(obs(t, [4.0, 4.0], [4.5, 4.5]))
    free = [12.0, 6.0]  # node 0 has more room now
    p.begin_placement(299, free)
    assert p.place(free, 4.0, 30) == 0  # a 30-minute job ends before the rise: where most room lasts
    assert p.place(free, 4.0, 240) == 1  # a 4-hour job would be squeezed out on node 0
    assert p.place([12.0, 2.0], 4.0, 240) == -1  # nowhere lasts: it waits
    assert p.counters["deferred"] == 1
