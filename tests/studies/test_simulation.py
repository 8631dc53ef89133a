"""The colocation simulator (issues 6 and 13): the engine's accounting and the baselines' rules on
hand-made clusters, then determinism and the no-colocation identity on real traces. The burst model
and tidewise's policy are in test_simulation_policy.py."""
from __future__ import annotations

import math
import os

import numpy as np
import pandas as pd
import pytest

from studies.simulation.colocation.catalogue import policy_set
from studies.simulation.colocation.engine import EngineSettings, simulate
from studies.simulation.colocation.policies import FirstFit, Katalyst, Koordinator, NoColocation, NodeForecasts, Observation
from studies.simulation.harness.batch import SIZES, draw_jobs, mean_work
from studies.simulation.harness.cluster import Cluster, ClusterSettings, build_cluster
from studies.simulation.harness.traces import SIM_EPOCH, load_traces, make_trace
from tests.conftest import SHARED_DATA, needs_shared_data

TRACES = ["aiops/cpu4", "ccc/cluster14", "web/nasa95"]
# hand-made clusters are one to four nodes for minutes: a queue this loaded fills any quota at once
SATURATED = 20.0


def hand_cluster(online: np.ndarray, system: float | np.ndarray = 1.0, cores: float = 32.0,
                 peak: np.ndarray | None = None) -> Cluster:
    online = np.atleast_2d(np.asarray(online, dtype=float))
    sys_arr = np.broadcast_to(np.asarray(system, dtype=float), online.shape).copy()
    return Cluster(ClusterSettings(nodes=online.shape[0], cores=cores), [], [], online, sys_arr,
                   np.zeros(online.shape[0]), peak)


class Fixed(FirstFit):
    """A policy that offers the same quota every minute."""

    name = "fixed"

    def __init__(self, quota):
        self.quota = quota

    @property
    def label(self):
        return self.name

    def reset(self, cluster):
        self.n = cluster.nodes

    def decide(self, obs):
        q = self.quota(obs.t) if callable(self.quota) else self.quota
        return np.full(self.n, float(q))


# --- the engine on hand-made clusters -----------------------------------------------------------

def test_batch_fills_what_is_offered_and_cpu_is_conserved_every_node_minute():
    rng = np.random.default_rng(3)
    online = np.clip(10 + np.cumsum(rng.normal(0, 0.8, size=(3, 600)), axis=1), 0, 40)
    cluster = hand_cluster(online, system=rng.uniform(0.3, 1.5, size=(3, 600)))
    r = simulate(cluster, Katalyst(), seed=1, settings=EngineSettings(keep_series=True, batch_load=SATURATED))
    s = r.series
    total = s["online"] + s["batch"] + s["system"] + s["idle"]
    np.testing.assert_allclose(total, cluster.capacity, atol=1e-9)
    for k in ("online", "batch", "system", "idle"):
        assert (s[k] >= -1e-9).all(), k
    assert (s["batch"] <= s["quota"] + 1e-9).all()
    assert (s["online"] <= s["demand"] + 1e-9).all()
    # the queue never runs dry: after the first minutes, batch uses (nearly) all of its quota
    used = s["batch"][:, 10:].sum() / s["quota"][:, 10:].sum()
    assert used > 0.9
    np.testing.assert_allclose(r.utilisation, ((s["online"] + s["batch"] + s["system"]) / 32).mean())


def test_a_policy_that_offers_nothing_gives_the_no_colocation_figures():
    rng = np.random.default_rng(0)
    online = rng.uniform(2, 12, size=(4, 300))
    cluster = hand_cluster(online, system=0.8)
    none = simulate(cluster, NoColocation(), seed=0)
    zero = simulate(cluster, Fixed(0.0), seed=0)
    # a koordinator threshold below what online already uses offers nothing either
    koord = simulate(cluster, Koordinator(threshold=0.0), seed=0)
    expected = (online + 0.8).mean() / 32
    for r in (none, zero, koord):
        assert r.utilisation == pytest.approx(expected, abs=1e-12)
        assert r.metrics()["shortfall"] == 0.0 and r.batch_core_hours == 0.0 and r.evictions == 0


def test_demand_jump_is_short_for_exactly_the_delay_minute():
    # a node at 5 cores of online demand jumps to 20 at minute 100; koordinator's quota follows one
    # minute later, so minute 100 (and only it) is short, while batch held the CPU
    online = np.where(np.arange(200) < 100, 5.0, 20.0)[None, :]
    cluster = hand_cluster(online, system=1.0)
    r = simulate(cluster, Koordinator(), seed=0, settings=EngineSettings(keep_series=True, batch_load=SATURATED))
    s = r.series
    short = np.flatnonzero(s["demand"][0] - s["online"][0] > 1e-6)
    assert short.tolist() == [100]
    assert r.shortfall == pytest.approx(1 / 200)
    # quota at minute 100 was decided on minute 99 (5 cores); at 101 on minute 100's measurements
    assert s["quota"][0, 100] == pytest.approx(32 * 0.65 - 5 - 1, abs=1e-6)
    assert s["quota"][0, 101] < s["quota"][0, 100] - 5
    assert r.online_unserved_core_hours > 0


def test_throttling_then_eviction_newest_first():
    # 20 cores offered for an hour (jobs fill it), then 12 (throttled: 12 >= 0.5 x 20), then 4 (evicted)
    quota = lambda t: 20.0 if t < 60 else (12.0 if t < 70 else 4.0)  # noqa: E731
    cluster = hand_cluster(np.full((1, 100), 2.0), system=0.5)
    r = simulate(cluster, Fixed(quota), seed=5, settings=EngineSettings(keep_series=True, batch_load=SATURATED))
    b = r.series["batch"][0]
    assert b[30] == pytest.approx(20.0, abs=1.0)
    assert b[65] == pytest.approx(12.0)  # throttled, nobody evicted yet
    assert b[75] <= 4.0 + 1e-9
    assert r.evictions > 0
    # the work the evicted jobs had done is lost: goodput is below the CPU spent on batch
    assert r.batch_core_hours == pytest.approx(r.series["batch"].sum() / 60)
    assert 0 < r.lost_core_hours and r.goodput_core_hours == pytest.approx(r.batch_core_hours - r.lost_core_hours)


def test_eviction_removes_only_what_does_not_fit_newest_first():
    cluster = hand_cluster(np.full((1, 40), 1.0), system=0.5)
    quota = lambda t: 16.0 if t < 20 else 6.0  # noqa: E731  6 < 0.5 x 16: evict
    es = EngineSettings(keep_series=True, batch_load=SATURATED)
    r = simulate(cluster, Fixed(quota), seed=2, settings=es)
    # the survivors fill at most the new quota, and the first jobs admitted are kept
    assert r.series["batch"][0, 25] <= 6.0 + 1e-9
    assert r.series["batch"][0, 25] > 6.0 - 4.0  # no more evicted than needed (largest job is 4 cores)


def test_cluster_arrivals_are_seeded_with_the_stated_rate_and_mix():
    a, b, c = draw_jobs(2000, 4, 30.0, seed=7), draw_jobs(2000, 4, 30.0, seed=7), draw_jobs(2000, 4, 30.0, seed=8)
    np.testing.assert_array_equal(a.size, b.size)
    np.testing.assert_array_equal(a.arrival, b.arrival)
    assert not np.array_equal(a.arrival[:50], c.arrival[:50])
    assert set(np.unique(a.size)) <= set(SIZES) and (a.duration >= 5).all() and (a.duration <= 720).all()
    assert (np.diff(a.arrival) >= 0).all()  # in order of arrival
    # 0.8 x 4 nodes x 30 cores of work a minute, on average
    assert a.work.sum() / 2000 == pytest.approx(0.8 * 4 * 30, rel=0.1)
    assert mean_work() == pytest.approx(1.575 * 49.0, rel=0.05)


def test_shortfall_counts_the_minutes_peak_not_its_mean():
    # 20 cores of mean demand and a fixed 8-core quota: the mean fits (1 + 20 + 8 <= 32), a 24-core
    # peak inside minute 50 does not; the same cluster without bursts has no shortfall
    online = np.full((1, 100), 20.0)
    peak = online.copy()
    peak[0, 50] = 24.0
    flat = simulate(hand_cluster(online), Fixed(8.0), seed=0, settings=EngineSettings(batch_load=SATURATED))
    bursty = simulate(hand_cluster(online, peak=peak), Fixed(8.0), seed=0,
                      settings=EngineSettings(keep_series=True, batch_load=SATURATED))
    assert flat.shortfall == 0.0
    assert bursty.shortfall == pytest.approx(1 / 100)
    assert bursty.series["online"][0, 50] == pytest.approx(20.0)  # the mean was served
    assert bursty.utilisation == pytest.approx(flat.utilisation)


def test_evicted_jobs_go_back_to_the_queue_and_restart_and_slowdown_counts_it():
    # 25 cores, but nothing for the last 10 minutes of every 100 (every running job evicted)
    quota = lambda t: 0.0 if t % 100 >= 90 else 25.0  # noqa: E731
    r = simulate(hand_cluster(np.full((1, 1440), 2.0)), Fixed(quota), seed=3)
    assert r.evictions > 0 and r.lost_core_hours > 0
    assert r.jobs_completed > 0 and r.slowdown_p50 >= 1.0
    # a restarted job's runtime counts from its first start: some slowdown well above 1
    assert r.slowdown_p95 > 1.05
    steady = simulate(hand_cluster(np.full((1, 1440), 2.0)), Fixed(25.0), seed=3)
    assert steady.evictions == 0 and steady.slowdown_p95 == pytest.approx(1.0)
    assert steady.jobs_completed > r.jobs_completed


# --- each policy's rule on a hand-made case ------------------------------------------------------

def obs(t, usage, demand=None, system=1.0, batch=0.0):
    u = np.atleast_1d(np.asarray(usage, float))
    return Observation(t, u, np.atleast_1d(np.asarray(demand if demand is not None else usage, float)),
                       np.full(len(u), system), np.full(len(u), batch))


def test_katalyst_rule():
    cluster = hand_cluster(np.zeros((2, 5)))
    p = Katalyst()
    p.reset(cluster)
    # usage 8 (x1.25 = 10) and a demand of 8: load1 after one minute is 8 x (1 - 1/e) = 5.06 < 10
    q = p.decide(obs(0, [8.0, 8.0], [8.0, 8.0]))
    np.testing.assert_allclose(q, 30 - 4 - 10)
    # a starved service: usage 8 but 40 cores runnable -> the load term dominates
    q = p.decide(obs(1, [8.0, 8.0], [40.0, 8.0]))
    load = 8 * (1 - math.exp(-1)) * math.exp(-1) + 40 * (1 - math.exp(-1))
    assert q[0] == pytest.approx(max(0.0, 30 - 4 - max(10.0, load)))
    assert q[1] == pytest.approx(30 - 4 - 10)
    p2 = Katalyst(reserve=0.0, factor=2.0, knob="factor")
    p2.reset(cluster)
    np.testing.assert_allclose(p2.decide(obs(0, [20.0, 1.0])), [0.0, 28.0])
    assert p2.label == "katalyst@factor=2"


def test_koordinator_rule():
    cluster = hand_cluster(np.zeros((2, 5)))
    p = Koordinator()
    p.reset(cluster)
    np.testing.assert_allclose(p.decide(obs(0, [6.0, 25.0], system=1.5)), [32 * 0.65 - 6 - 1.5, 0.0])
    p = Koordinator(threshold=0.8, knob="threshold")
    p.reset(cluster)
    np.testing.assert_allclose(p.decide(obs(0, [6.0, 6.0], system=1.0)), [32 * 0.8 - 7] * 2)
    assert p.label == "koordinator@threshold=0.8"


def flat_forecasts(nodes: int, days: int, values: dict[float, float], extra: int = 60) -> NodeForecasts:
    return NodeForecasts(tuple(values), [{q: np.full((nodes, 1440 + extra), v) for q, v in values.items()}
                                         for _ in range(days)])


def test_policy_set_and_labels():
    nf = flat_forecasts(1, 1, {0.5: 1.0, 0.9: 1.0, 0.95: 1.0, 0.99: 1.0})
    labels = [p.label for p in policy_set("all", nf)]
    assert labels[:2] == ["none", "katalyst"]
    assert "koordinator@threshold=0.85" in labels and "katalyst@reserve=0" in labels
    assert "tidewise" in labels and "tidewise@risk=0.001" in labels and "katalyst@reserve=1" in labels
    assert len(labels) == len(set(labels))
    with pytest.raises(ValueError):
        policy_set("tidewise", None)
    with pytest.raises(ValueError, match="unknown policy"):
        policy_set("greedy", nf)


# --- real traces ---------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def traces():
    if not os.path.isdir(SHARED_DATA):
        pytest.skip(f"needs the real traces in {SHARED_DATA} (../shared/data beside the checkout)")
    return load_traces(SHARED_DATA, days=2, names=TRACES)


def test_traces_are_aligned_non_negative_and_keep_their_time_of_day(traces):
    assert [t.name for t in traces] == sorted(TRACES)
    for t in traces:
        assert len(t.eval_1min) == 2 * 1440
        assert (t.eval_1min >= 0).all() and np.isfinite(t.eval_1min).all()
        assert t.history.index[-1] < SIM_EPOCH <= t.grid_series.index[-1]
        assert np.nanquantile(t.history.to_numpy(), 0.99) == pytest.approx(1.0, rel=0.35)
    assert next(t for t in traces if t.name == "aiops/cpu4").signed
    # a 1-minute trace is replayed minute by minute: same values, same time of day, one scale factor
    raw = pd.read_csv(f"{SHARED_DATA}/web_request_rates/nasa_http_1995_requests_per_minute.csv.gz")
    raw = pd.Series(raw.iloc[:, 1].to_numpy(float), index=pd.to_datetime(raw.iloc[:, 0]).dt.tz_localize("UTC"))
    t = make_trace("web/nasa95", raw, days=2)
    end = raw.index[-1].floor("1D")
    window = raw[(raw.index >= end - pd.Timedelta("2D")) & (raw.index < end)].resample("1min").mean()
    assert len(window) == 2 * 1440
    ok = window.notna().to_numpy() & (window.to_numpy() > 0)
    ratio = t.eval_1min[ok] / window.to_numpy()[ok]
    assert ok.sum() > 2000 and np.std(ratio) < 1e-9


def test_same_seed_same_results_other_seed_other_cluster(traces):
    cs = ClusterSettings(nodes=3)
    a = build_cluster(traces, cs, seed=11)
    b = build_cluster(traces, cs, seed=11)
    c = build_cluster(traces, cs, seed=12)
    np.testing.assert_array_equal(a.online, b.online)
    assert not np.array_equal(a.online, c.online)
    ra, rb = simulate(a, Katalyst(), seed=11), simulate(b, Katalyst(), seed=11)
    assert ra.metrics() == rb.metrics()
    np.testing.assert_array_equal(ra.util_by_minute, rb.util_by_minute)
    assert simulate(a, Katalyst(), seed=12).metrics() != ra.metrics()  # another batch queue


def test_cluster_requests_near_peak_and_no_colocation_utilisation(traces):
    c = build_cluster(traces, ClusterSettings(nodes=4), seed=0)
    alloc = c.allocatable
    assert (c.requested <= alloc + 1e-9).all()
    assert c.requested.sum() >= 0.85 * alloc * 4
    for s in c.services:
        peak = float(np.nanmax(c.traces[s.trace].history.to_numpy())) * s.scale
        assert s.request / 1.3 - 1e-9 <= peak <= s.request + 1e-9
    util = (c.online + c.system).mean() / c.capacity
    assert 0.05 < util < 0.6


def test_forecasts_see_only_the_past_and_are_cached(traces, tmp_path):
    from studies.simulation.harness.forecasts import forecast_series

    series = {t.name: t.grid_series for t in traces[:2]}
    base, models = forecast_series(series, 2, model="seasonal_naive_daily", cache_dir=str(tmp_path))
    assert base.shape == (2, 2, 4, 25 * 60) and set(models.values()) == {"seasonal_naive_daily"}
    assert (np.diff(base, axis=2) >= 0).all()  # quantiles never cross
    # a change inside day 1 leaves both days' forecasts alone (day 1's is made at its midnight)
    day1 = SIM_EPOCH + pd.Timedelta("1D")
    later = {k: y.where(y.index < day1, y * 3) for k, y in series.items()}
    np.testing.assert_array_equal(forecast_series(later, 2, model="seasonal_naive_daily")[0], base)
    # a change inside day 0 moves day 1's forecast only
    earlier = {k: y.where(y.index < SIM_EPOCH, y * 3) for k, y in series.items()}
    moved = forecast_series(earlier, 2, model="seasonal_naive_daily")[0]
    np.testing.assert_array_equal(moved[:, 0], base[:, 0])
    assert not np.array_equal(moved[:, 1], base[:, 1])
    # the second call reads the cache file instead of forecasting again
    (cached,) = list(tmp_path.iterdir())
    assert cached.suffix == ".npz"
    again, _ = forecast_series(series, 2, model="seasonal_naive_daily", cache_dir=str(tmp_path))
    np.testing.assert_array_equal(again, base)


def test_node_series_sum_the_services_where_all_have_data(traces):
    from studies.simulation.colocation.forecasts import node_series

    c = build_cluster(traces, ClusterSettings(nodes=2), seed=4)
    series = node_series(c)
    assert list(series) == ["node/node-000/cpu", "node/node-001/cpu"]
    for n, y in enumerate(series.values()):
        mine = [s for s in c.services if s.node == n]
        start = max(c.traces[s.trace].grid_series.index[0] for s in mine)
        assert y.index[0] == start and y.notna().all()
        at = y.index[len(y) // 2]
        expected = sum(min(c.traces[s.trace].grid_series[at] * s.scale, s.limit) for s in mine)
        assert y[at] == pytest.approx(expected)


def test_held_back_is_what_the_quota_leaves_beyond_online_demand():
    cluster = hand_cluster(np.full((2, 50), 6.0), system=1.0)
    r = simulate(cluster, Fixed(10.0), seed=0)
    # minute 0 runs on the initial quota of 0, the other 49 on 10 cores
    assert r.held_back == pytest.approx((30 - 6) / 50 + (30 - 10 - 6) * 49 / 50)


def test_verdict_compares_goodput_within_the_budget():
    from studies.simulation.colocation.engine import RunResult
    from studies.simulation.colocation.study import Study

    def run(label, util, short, batch, evictions, p95):
        z = np.zeros(1)
        return RunResult(label, util, short, batch, evictions, 0.0, 0.0, z, z, z, lost_core_hours=10.0,
                         slowdown_p95=p95)

    results = [run("none", 0.2, 0.0, 0, 0, np.nan), run("tidewise", 0.70, 0.0003, 1100, 40, 1.1),
               run("tidewise@risk=0.002", 0.78, 0.002, 1300, 30, 1.1), run("katalyst", 0.80, 0.0005, 1000, 100, 1.2),
               run("katalyst@reserve=0", 0.90, 0.02, 1500, 10, 1.0), run("koordinator", 0.6, 0.0, 900, 50, 1.0)]
    v = Study(None, None, results, None, [], {}).verdict()
    assert v["tidewise_best"]["label"] == "tidewise"  # risk=0.002 is over the 0.1% budget
    assert v["best_baseline"]["label"] == "katalyst"  # reserve=0 is over it too
    assert v["goodput_ratio"] == pytest.approx(1090 / 990)
    assert v["targets"] == {"goodput": True, "slowdown_p95": True, "evictions": True, "utilisation": True}
    results[1] = run("tidewise", 0.70, 0.0003, 1030, 60, 1.3)
    v = Study(None, None, results, None, [], {}).verdict()
    assert v["targets"] == {"goodput": False, "slowdown_p95": False, "evictions": False, "utilisation": True}
    assert v["meets_all"] is False


@needs_shared_data
def test_study_at_service_level_forecasts_every_trace():
    from studies.simulation.colocation.runner import run_study
    from studies.simulation.colocation.study import StudySettings

    s = StudySettings(traces=SHARED_DATA, nodes=2, days=1, policy="tidewise", sweeps=False,
                      forecast_model="seasonal_naive_daily", forecast_level="service", trace_names=TRACES)
    study = run_study(s)
    assert [r.label for r in study.results] == ["tidewise"]
    assert sorted(row["series"] for row in study.coverage) == sorted(TRACES)
    assert study.forecasts is not None and study.forecasts.at(0.95).shape == (2, 1440)
    assert 0.2 < study.results[0].utilisation <= 1.0
