"""The rebalancing study (`studies/simulation/rebalance/study.py`, `tidewise simulate rebalance`) on a few
real traces: the results' shape, determinism by seed, forecasts that never see the future, moves
that actually cool hot nodes, and bad input exiting 2 with one line."""
from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

from tests.conftest import SHARED_DATA, needs_shared_data, run_cli

TRACES = ["aiops/cpu4", "ccc/cluster14", "web/nasa95", "nab/realKnownCause/nyc_taxi"]
KEYS = {"node_minutes_hot", "hot_share", "node_minutes_saturated", "pods_moved", "moves_per_day"}


def settings(**kw):
    from studies.simulation.rebalance.study import RebalanceStudySettings

    base = dict(traces=SHARED_DATA, nodes=4, days=1, seed=1, forecast_model="seasonal_naive_daily",
                trace_names=TRACES, headroom=(0.4, 0.6))
    return RebalanceStudySettings(**{**base, **kw})


@needs_shared_data
def test_every_policy_runs_and_rebalancing_cools_hot_nodes():
    from studies.simulation.rebalance.study import run_rebalance_study

    r = run_rebalance_study(settings(), sweeps=False)
    assert list(r["policies"]) == ["none", "reactive", "tidewise"]
    assert all(set(m) == KEYS for m in r["policies"].values())
    none, reactive, tide = (r["policies"][k] for k in ("none", "reactive", "tidewise"))
    assert none["pods_moved"] == 0 and none["node_minutes_hot"] > 0
    for moved in (reactive, tide):
        assert 0 < moved["pods_moved"] and moved["node_minutes_hot"] < none["node_minutes_hot"]
    assert r["node_minutes"] == 4 * 1440


@needs_shared_data
def test_the_same_seed_gives_the_same_result_and_another_seed_another_cluster():
    from studies.simulation.rebalance.study import run_rebalance_study

    a = run_rebalance_study(settings(), policy="reactive", sweeps=False)
    b = run_rebalance_study(settings(), policy="reactive", sweeps=False)
    c = run_rebalance_study(settings(seed=2), policy="reactive", sweeps=False)
    assert a == b and a["policies"] != c["policies"]


@needs_shared_data
def test_forecasts_made_at_an_hour_never_see_what_follows_it(tmp_path):
    """Changing every value from 07:00 of day 0 on leaves the 00:00 and 06:00 forecasts as they were
    and changes the 12:00 one (which has seen it)."""
    from studies.simulation.rebalance.study import intraday_forecasts
    from studies.simulation.harness.traces import SIM_EPOCH, load_traces

    s = settings(refresh_hours=6)
    traces = load_traces(SHARED_DATA, days=1, names=TRACES)
    before = intraday_forecasts(traces, s)
    for t in traces:
        later = t.grid_series.index >= SIM_EPOCH + pd.Timedelta("7h")
        t.grid_series = t.grid_series.where(~later, t.grid_series * 3.0 + 1.0)
    after = intraday_forecasts(traces, s)
    assert np.array_equal(before[0], after[0]) and np.array_equal(before[6], after[6])
    assert not np.array_equal(before[12], after[12])


@needs_shared_data
def test_the_command_writes_results_json(tmp_path):
    out = tmp_path / "reb"
    proc = run_cli("simulate", "rebalance", "--traces", SHARED_DATA, "--nodes", "3", "--days", "1", "--no-sweeps",
                   "--policy", "reactive", "--forecast-model", "seasonal_naive_daily", "--out", str(out))
    assert proc.returncode == 0, proc.stderr
    doc = json.loads((out / "results.json").read_text())
    assert list(doc["policies"]) == ["reactive"] and doc["settings"]["nodes"] == 3
    assert "reactive" in proc.stderr and "wrote" in proc.stderr
    # progress off a terminal: the one setting's one day, then the end
    assert "simulating 1 policy settings x 1 days: 1 ..." in proc.stderr
    assert "simulating 1 policy settings x 1 days: 1/1 (" in proc.stderr


@pytest.mark.parametrize("flags,names", [(["--headroom", "half"], "--headroom"), (["--nodes", "1"], "--nodes"),
                                         (["--traces", "/nonexistent"], "--traces"), (["--days", "30"], "--days")])
def test_bad_input_is_one_line_and_exit_2(tmp_path, flags, names):
    proc = run_cli("simulate", "rebalance", *flags, "--out", str(tmp_path / "o"))
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1 and names in proc.stderr, proc.stderr
    assert "Traceback" not in proc.stderr and not (tmp_path / "o").exists()
