"""Choice by cost in the VPA replay (`tidewise replay --choose-by-cost`): on a workload the forecast
serves badly the cheaper candidate serves and the reason says so; decisions read only the past."""
from __future__ import annotations

import numpy as np
import pandas as pd

from autoscaler.logic.choice_by_cost import candidate_cost
from autoscaler.settings import VpaSettings
from studies.replay.decisions import DailyChoiceForecaster, replay_vpa_decisions
from tests.studies.test_replay import tidal


def spiky(days: int = 10, seed: int = 3) -> pd.Series:
    """A flat 1-core workload with 3% of 5-minute steps at 3 cores, at random times: yesterday's
    spikes say nothing about today's, so a daily forecast's hourly peak is mostly wrong."""
    idx = pd.date_range("2026-01-01", periods=days * 288, freq="5min", tz="UTC")
    rng = np.random.default_rng(seed)
    y = pd.Series(1.0 + rng.normal(0, 0.02, len(idx)), index=idx)
    y[rng.random(len(idx)) < 0.03] = 3.0
    return y


def replayed(y: pd.Series, settings: VpaSettings, start: pd.Timestamp, end: pd.Timestamp) -> pd.DataFrame:
    return replay_vpa_decisions(y, start, end, settings, DailyChoiceForecaster(key="x", model="seasonal_naive_daily"))


def test_a_cheaper_candidate_serves_where_the_forecast_is_poor_and_the_reason_says_which():
    y = spiky()
    start, end = y.index[0] + pd.Timedelta("7D"), y.index[0] + pd.Timedelta("9D")
    use = y[start:end]
    costs = {}
    for choose in (False, True):
        s = VpaSettings(window="1h", choose_by_cost=choose)
        d = replayed(y, s, start, end)
        req = d.set_index("timestamp")["target"].reindex(use.index, method="ffill")
        costs[choose] = candidate_cost("x", use.to_numpy(), req.to_numpy(), 2.0, s)
        reasons = d["reason"]
    assert costs[True].cost < 0.7 * costs[False].cost
    # the first replayed day already has a scored past (the ledger is filled from before start)
    assert reasons.str.contains(" chosen by cost ").all() and not reasons.str.contains("warming up").any()
    assert reasons.str.contains("over the last 2d").all()
    assert not reasons.str.startswith("q0.9 of seasonal_naive_daily").all()  # not the forecast that served


def test_choice_reads_only_the_past():
    y = tidal(days=9)
    start, end = y.index[0] + pd.Timedelta("7D"), y.index[0] + pd.Timedelta("9D")
    s = VpaSettings(window="1h", choose_by_cost=True)
    base = replayed(y, s, start, end)
    cut = start + pd.Timedelta("1D") + pd.Timedelta("5h")
    bent = y.copy()
    bent[bent.index >= cut] *= 5.0
    after = replayed(bent, s, start, end)
    before = base["timestamp"] <= cut
    pd.testing.assert_frame_equal(base[before], after[after["timestamp"] <= cut])
    assert not base[~before]["target"].equals(after[~before]["target"])
