"""Issue 17, the tide policy's calibrated margin and the oracle bound: the margin is read from past
errors only (changing the future changes no earlier decision), the oracle is never late and no
policy that is never late lends more, and `forecast_margin` is the quantile it says."""
from __future__ import annotations

import numpy as np
import pytest

from autoscaler.logic.tide import forecast_margin
from studies.simulation.tide.calibration import ForecastErrors
from studies.simulation.tide.engine import simulate_tide
from studies.simulation.tide.forecasts import PoolForecasts
from studies.simulation.tide.model import PoolSettings
from studies.simulation.tide.policies import Oracle, TidewiseTide
from studies.simulation.tide.study import run_tide_study
from tests.conftest import needs_shared_data
from tests.studies.test_tide import ALLOC, _small, hand_pool


def test_forecast_margin_is_the_quantile_of_each_leads_errors_and_nan_when_too_few():
    errors = [np.arange(101.0), np.array([1.0, np.nan, 2.0]), np.array([])]
    m = forecast_margin(errors, 0.9, min_count=3)
    assert m[0] == pytest.approx(90.0) and np.isnan(m[1]) and np.isnan(m[2])  # NaN is not an error
    with pytest.raises(ValueError, match="quantile"):
        forecast_margin(errors, 1.0, 3)


def flat_forecasts(T: int, level: float) -> PoolForecasts:
    origins = np.arange(0, T, 60)
    return PoolForecasts(origins, (0.5, 0.9), np.full((len(origins), 2, 420), level), "flat")


def test_errors_are_recorded_per_lead_hour_only_for_minutes_observed():
    e = ForecastErrors(flat_forecasts(600, 10.0), window=1000, reaction=4)
    for t in range(130):
        e.observe(t, 10.0 + t)
    # minute 125 is lead 125 of origin 0 (bucket 2), 65 of origin 60 (bucket 1), 5 of origin 120 (bucket 0)
    counts = e.ledger.counts()
    assert counts[:3] == [130, 70, 10]
    assert sum(counts[3:]) == 0  # nothing is recorded for leads no observed minute had
    assert max(err for _, err in e.ledger.errors[0]) == pytest.approx(129.0)
    assert e.rise(0.5, 10) == pytest.approx(4.0)  # the requests rose 1 core a minute: 4 in a hand-back's time


def _rising_pool(after: int | None, T: int = 2000):
    """Need ~3 nodes with a one-node wiggle, then (from `after`) a different future."""
    rng = np.random.default_rng(3)
    need = 3 + (rng.random(T) < 0.2).astype(int)
    if after is not None:
        need[after:] = 6
    return hand_pool(need, nodes=8, settings=PoolSettings(pack_headroom=0.0))


def test_the_calibrated_policy_decides_from_the_past_only_changing_the_future_changes_no_earlier_move():
    T, cut = 2000, 1500
    fc = flat_forecasts(T, 3 * ALLOC)
    runs = []
    for after in (None, cut):
        tw = TidewiseTide(fc, error_min=60, error_window=600)
        runs.append(simulate_tide(_rising_pool(after, T), tw, seed=0, batch_load=1.0))
        assert tw.counters["minutes_calibrated"] > 1000  # the calibrated margin did decide
    a, b = runs
    assert np.array_equal(a.lent_nodes[:cut + 1], b.lent_nodes[:cut + 1])
    assert not np.array_equal(a.lent_nodes, b.lent_nodes)  # the new future did matter, after it came
    # the oracle reads the future: the same change moves it earlier (what the test above would catch)
    o = [simulate_tide(_rising_pool(after, T), Oracle(), seed=0, batch_load=1.0) for after in (None, cut)]
    assert not np.array_equal(o[0].lent_nodes[:cut + 1], o[1].lent_nodes[:cut + 1])


def test_the_oracle_lends_every_node_not_needed_before_a_hand_back_could_return_it():
    need = np.array([2] * 40 + [5] * 20 + [1] * 40)
    pool = hand_pool(need, nodes=6)
    run = simulate_tide(pool, Oracle(), seed=0, batch_load=1.0)
    R = pool.settings.return_minutes
    bound = [6 - need[m:m + R + 1].max() for m in range(1, len(need) - R)]
    assert run.late_minutes == 0
    assert run.lent_nodes[1:len(need) - R].tolist() == bound


@needs_shared_data
def test_no_policy_without_late_minutes_lends_more_than_the_oracle():
    s = _small(5)
    s.sweeps = True
    study = run_tide_study(s)
    by = {r.label: r for r in study.runs}
    oracle = by.pop("oracle")
    assert oracle.late_minutes == 0
    never_late = [r for r in by.values() if r.late_minutes == 0]
    assert len(never_late) >= 5
    assert all(r.node_hours_lent <= oracle.node_hours_lent + 1e-9 for r in never_late)
    assert study.verdict()["oracle_node_hours_lent"] == oracle.node_hours_lent
