"""serve's tide margin (issue 17): the same calibrated margin as the tide simulator's default, from
one `ErrorLedger`. A cold ledger (a serve just started) plans with the fixed stack and says so;
after enough runs (the loop's injectable clock, one loop) a steady pool is planned with the
calibrated margin, smaller than the fixed stack, so more nodes are lent; a run's forecast is scored
only by later runs; bad settings are refused."""
from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from autoscaler.input.cluster import ApiCluster
from autoscaler.settings import TideSettings
from autoscaler.logic.tide_calibration import ErrorLedger
from autoscaler.output.sinks import DryRunSink
from autoscaler.routines.loop import ServingLoop
from contracts.errors import InputError
from predictor.history import history_from_frame
from tests.autoscaler.conftest import fast_settings, source_of
from tests.autoscaler.test_tide_serve import HPA, POOL, STEP, deployment, node, pod
from tests.conftest import run_cli

START = pd.Timestamp("2026-11-01T23:00:00Z")


def steady_history(end):
    """Three days of web at a flat 2.2 cores (3 replicas at 80% of 1000m) and api at 0.3."""
    idx = pd.date_range(end - pd.Timedelta(days=3), end, freq=STEP, inclusive="left")
    rows = [("shop/Deployment/web/app/cpu", 2.2), ("shop/Deployment/web/app/memory", 2.0**29),
            ("shop/Deployment/api/app/cpu", 0.3)]
    frame = pd.concat([pd.DataFrame({"series": sid, "timestamp": idx, "value": v}) for sid, v in rows])
    return history_from_frame(frame, STEP, "test")


def steady_objects():
    """3400m of online requests on n0 (4 cores): x 1.25 needs 2 nodes, x 1.1 one."""
    return [POOL, HPA, deployment("web", "1000m", 3), deployment("api", "400m", 1),
            node("n0"), node("n1"), node("n2"), node("n3"),
            pod("web-0", "web", "n0", "1000m"), pod("web-1", "web", "n0", "1000m"),
            pod("web-2", "web", "n0", "1000m"), pod("api-0", "api", "n0", "400m")]


def steady_loop(kube, clock):
    s = fast_settings()
    s.reclaim.enabled = False
    s.tide.enabled = True
    s.tide.max_moves = 3
    s.tide.lead, s.tide.min_dwell, s.tide.error_min = "15m", "15m", "30m"
    s.loop.apply = False  # dry-run: the cluster stays as it is, every run plans the same steady pool
    hist = steady_history(START + 20 * STEP)
    return ServingLoop(s, source_of(hist), ApiCluster(kube, ("TideNodePool", "PodDisruptionBudget")),
                       DryRunSink(), clock=clock)


def test_a_cold_ledger_plans_with_the_fixed_stack_then_the_calibrated_margin_lends_more(api_factory):
    fake, kube = api_factory(steady_objects())
    now = [START]
    loop = steady_loop(kube, lambda: now[0])
    entries = []
    for i in range(12):
        now[0] = START + i * STEP
        rep = loop.run_once()
        assert rep.outcome == "ok", rep.reason
        entries.append(rep.sections["tide"].pools[0])
    cold, warm = entries[0], entries[-1]
    assert cold["margin"].startswith("fixed margin: forecast q0.9 x 1.25 (calibration not ready")
    assert "a restart starts again" in cold["margin"]
    assert sorted(m["node"] for m in cold["moves"]) == ["n1", "n2"]  # 2 nodes needed: n0 + one tide node
    assert all("fixed margin" in m["reason"] for m in cold["moves"])
    assert warm["margin"].startswith("calibrated margin: median forecast + q0.99 of its errors over 3d")
    assert max(warm["needed_nodes"]) < max(cold["needed_nodes"])
    assert sorted(m["node"] for m in warm["moves"]) == ["n1", "n2", "n3"]  # the steady need fits on n0
    assert all("calibrated margin" in m["reason"] and "+0 to +0 mCPU" in m["reason"] for m in warm["moves"])
    assert fake.writes() == []


def test_a_runs_forecast_is_scored_only_by_later_runs(api_factory):
    fake, kube = api_factory(steady_objects())
    now = [START]
    loop = steady_loop(kube, lambda: now[0])
    counts = []
    for i in range(3):
        now[0] = START + i * STEP
        loop.run_once()
        counts.append(loop.feature("tide").tide.margins.ledgers["pool-a"][0].counts())
    # run 0's forecast is not scored against run 0's own measurement; run 2 scores runs 0 and 1
    assert counts == [[0], [1], [3]]
    loop.run_once()  # another run on the same forecast origin (serve runs every minute on 5-minute steps)
    assert loop.feature("tide").tide.margins.ledgers["pool-a"][0].counts() == [3]  # reads the step's margins, scores nothing


def test_the_ledger_scores_a_forecast_only_with_times_observed_after_it_was_made():
    led = ErrorLedger(bucket=60, buckets=2, window=1000, reaction=4)
    led.forecast(10, 1, np.full(100, 5.0))
    for t in range(10):
        led.observe(t, 99.0)  # before the forecast's origin: nothing to score
    assert led.counts() == [0, 0]
    for t in range(10, 80):
        led.observe(t, 6.0)
    assert led.counts() == [60, 10]
    assert led.margins(0.5, 10).tolist() == [1.0, 1.0]
    assert np.isnan(led.margins(0.5, [10, 11])[1])  # too few errors in the second lead hour
    future = ErrorLedger(bucket=60, buckets=2, window=1000, reaction=4)
    future.forecast(10, 1, np.full(100, 5.0))
    for t in range(10, 80):
        future.observe(t, 6.0)
    future.observe(80, 500.0)  # a different future changes what is read after it, not before
    assert future.margins(0.99, 1)[1] > led.margins(0.99, 1)[1]


def test_errors_older_than_the_window_are_dropped():
    led = ErrorLedger(bucket=60, buckets=1, window=30, reaction=4)
    led.forecast(0, 1, np.zeros(60))
    for t in range(50):
        led.observe(t, float(t))
    assert led.counts() == [30] and led.margins(0.0001, 1)[0] == pytest.approx(20.0, abs=0.01)


@pytest.mark.parametrize("field,value,says", [("margin", "tight", "margin 'tight'"),
                                              ("error_quantile", 1.0, "error_quantile 1.0"),
                                              ("error_quantile", "high", "error_quantile 'high' must be a number"),
                                              ("error_days", 0, "error_days must be > 0"),
                                              ("return_slack", 1.5, "return_slack 1.5 must be a whole number"),
                                              ("error_min", "soon", "serve.tide.error_min")])
def test_a_bad_margin_setting_is_refused_with_its_name(field, value, says):
    with pytest.raises((ValueError, InputError)) as exc:
        TideSettings(**{field: value}).check()
    assert says in str(exc.value)


def test_serve_refuses_a_bad_margin_in_one_line(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("serve:\n  tide:\n    margin: tight\n")
    proc = run_cli("--config", str(bad), "serve", "--once", "--tide", "--source", "file",
                   "--input", str(tmp_path / "history.parquet"))
    assert proc.returncode == 2 and "serve.tide" in proc.stderr and "margin 'tight'" in proc.stderr
    assert "Traceback" not in proc.stderr and len(proc.stderr.strip().splitlines()) == 1
