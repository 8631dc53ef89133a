"""Replay applies the VPA updater's rule: the scored `target` is the request in force, which a
smooth tide changes about twice a day; an `oom` column bumps memory after a kill."""
from __future__ import annotations

import numpy as np
import pandas as pd

from autoscaler.settings import VpaSettings
from studies.replay.decisions import DailyChoiceForecaster, replay_vpa_decisions
from studies.replay.inputs import load_replay_input
from studies.replay.runner import ReplaySettings, replay_vpa_series
from tests.studies.test_replay import tidal

STEP = pd.Timedelta("5min")
HOLD = VpaSettings(window="8h", follow_bounds=True)  # what `tidewise replay vpa --hold 8h` replays


def changes_per_day(request: pd.Series) -> float:
    """The reference scorer's churn: changes of more than 10% per day."""
    r = request.to_numpy()
    days = (request.index[-1] - request.index[0]) / pd.Timedelta("1D")
    return float((np.abs(np.diff(r)) > 0.1 * np.abs(r[:-1])).sum() / days)


def test_a_tidal_request_changes_about_twice_a_day_and_stays_safe():
    y = tidal(days=6)
    start, end = y.index[0] + pd.Timedelta("3D"), y.index[0] + pd.Timedelta("6D")
    d = replay_vpa_decisions(y, start, end, HOLD, DailyChoiceForecaster(model="seasonal_naive_daily"))
    in_force = d.set_index("timestamp")["target"]
    assert changes_per_day(in_force) <= 3
    # the recommendation itself moves every hour of the tide; the request in force does not
    assert changes_per_day(d.set_index("timestamp")["recommended"]) > 6
    use = y[start:end]
    served = in_force.reindex(use.index, method="ffill")
    assert float(np.mean(use > served)) < 0.05


def test_the_request_moves_only_when_it_leaves_the_bounds():
    y = tidal(days=5, seed=1)
    start, end = y.index[0] + pd.Timedelta("3D"), y.index[0] + pd.Timedelta("5D")
    d = replay_vpa_decisions(y, start, end, HOLD, DailyChoiceForecaster(model="seasonal_naive_daily"))
    before = d["target"].shift()
    moved = d["target"] != before
    moved.iloc[0] = False
    rows = d[moved]
    assert len(rows)
    outside = (before[moved] < rows["lower_bound"] - 1e-9) | (before[moved] > rows["upper_bound"] + 1e-9)
    assert outside.all()


def test_oom_column_bumps_memory_above_the_usage_at_the_kill(tmp_path):
    idx = pd.date_range("2026-01-01", periods=3 * 288, freq="5min", tz="UTC")
    usage = np.full(len(idx), 1.0e9)
    kill = len(idx) - 60  # five hours before the end
    oom = np.zeros(len(idx), dtype=int)
    oom[kill] = 1
    frame = pd.DataFrame({"series": "ns/app/memory", "timestamp": idx.strftime("%Y-%m-%dT%H:%M:%SZ"),
                          "value": usage, "oom": oom, "start": "2026-01-03T12:00:00Z"})
    path = tmp_path / "mem.csv"
    frame.to_csv(path, index=False)
    data = load_replay_input(str(path), STEP)
    assert int(data.oom["ns/app/memory"].sum()) == 1
    s = ReplaySettings("vpa", model="seasonal_naive_daily")
    _, out = replay_vpa_series("ns/app/memory", data.history.series["ns/app/memory"], data, s)
    after = out[out["timestamp"] > idx[kill]]["target"]
    before = out[out["timestamp"] <= idx[kill]]["target"]
    assert (after >= 1.2e9).all()  # the stock bump: 20% above the usage at the kill
    assert (before < 1.2e9).all()


def test_oom_column_rejects_other_values(tmp_path):
    import pytest
    from contracts.errors import InputError
    path = tmp_path / "bad.csv"
    pd.DataFrame({"series": ["a/memory"] * 2, "timestamp": ["2026-01-01T00:00:00Z", "2026-01-01T00:05:00Z"],
                  "value": [1.0, 1.0], "oom": [0, "yes"]}).to_csv(path, index=False)
    with pytest.raises(InputError, match="oom value"):
        load_replay_input(str(path), STEP)


def test_follow_bounds_off_applies_every_recommendation():
    y = tidal(days=4, seed=2)
    start, end = y.index[0] + pd.Timedelta("3D"), y.index[0] + pd.Timedelta("4D")
    d = replay_vpa_decisions(y, start, end, VpaSettings(follow_bounds=False),
                             DailyChoiceForecaster(model="seasonal_naive_daily"))
    assert (d["target"] == d["recommended"]).all()


def test_hold_flag_opts_in_to_the_updater_rule():
    import argparse
    import pytest
    from contracts.errors import InputError
    from tidewise.commands.replay import settings_from
    args = argparse.Namespace(kind="vpa", model="auto", every="1h", hold="8h", decision_model=None)
    vpa = settings_from(args).vpa
    assert vpa.follow_bounds and vpa.window == "8h"
    default = settings_from(argparse.Namespace(**{**vars(args), "hold": None})).vpa
    assert not default.follow_bounds and default.window == "1h"
    with pytest.raises(InputError, match="--hold 30m"):
        settings_from(argparse.Namespace(**{**vars(args), "hold": "30m"}))
