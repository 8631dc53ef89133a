"""Training: a registry version per run, incremental refits, joblib and Dask fan-out."""
import json
import os

import numpy as np
import pandas as pd
import pytest

from predictor.pipeline.forecasting import ForecastRequest
from predictor.history import History
from predictor.registry import load_version
from predictor.pipeline.serving import forecast_with_registry
from training.pipeline import TrainSettings, train

from .conftest import FAST_GLOBAL, NO_DECISION_TIME, small_history

QS = (0.5, 0.9, 0.95, 0.99)


def _settings(**kw):
    return TrainSettings(folds=2, global_params=FAST_GLOBAL, decision_time=NO_DECISION_TIME, **kw)


def test_train_writes_a_verified_version_with_scores(tmp_path):
    hist = small_history()
    res = train(hist, str(tmp_path), _settings())
    reg = load_version(str(tmp_path))
    assert reg.version == res.version
    assert set(reg.series) == set(hist.series)
    assert reg.global_model is not None and res.global_refit
    for key, e in reg.series.items():
        assert e["folds"] == 2
        assert len(e["shifts"]) == 4
        assert e["model"] in e["scores"]
        # the reference is always backtested, so skill is defined
        assert e["skill"] is not None and e["skill"] > 0
        assert 0 <= e["coverage"] <= 1
    man = reg.manifest
    assert man["data_window"]["end"] == hist.end.isoformat()
    assert man["training"]["refitted"] == len(hist.series)
    # a registry forecast needs no refit of the global model and follows the contract
    fcs = forecast_with_registry(str(tmp_path), hist, ForecastRequest(pd.Timedelta(days=1), pd.Timedelta("5min"), QS))
    assert len(fcs) == len(hist.series)
    for f in fcs:
        assert f.values.shape == (288, 4) and np.isfinite(f.values).all()
        assert (np.diff(f.values, axis=1) >= 0).all()
        assert f.version == res.version
        assert f.index[0] == hist.end + pd.Timedelta("5min")


def test_incremental_carries_unchanged_series_and_refits_changed(tmp_path):
    hist = small_history()
    first = train(hist, str(tmp_path), _settings())
    # the same data again: nothing changed, nothing drifted -> everything carried forward
    second = train(hist, str(tmp_path), _settings())
    assert second.refitted == [] and sorted(second.carried) == sorted(hist.series)
    assert not second.global_refit
    reg2 = load_version(str(tmp_path))
    assert reg2.version == second.version != first.version
    assert all(e.get("carried_from") == first.version for e in reg2.series.values())
    # a correction in data the last version saw -> only that series is refitted
    changed = sorted(hist.series)[0]
    series = dict(hist.series)
    y = series[changed].copy()
    y.iloc[-10:] = y.iloc[-10:] * 3
    series[changed] = y
    # plus a brand-new series
    series["new/Deployment/x/app/cpu"] = hist.series[changed] * 0.5
    third = train(History(series, hist.step), str(tmp_path), _settings())
    assert sorted(third.refitted) == sorted([changed, "new/Deployment/x/app/cpu"])
    assert third.reasons[changed] == "data seen by the last version changed"
    assert third.reasons["new/Deployment/x/app/cpu"] == "new series"
    assert len(third.carried) == len(hist.series) - 1


def test_drift_triggers_a_refit(tmp_path):
    hist = small_history(days=8)
    cut = hist.end - pd.Timedelta("12h")
    train(hist.window(None, cut), str(tmp_path), _settings())
    key = sorted(hist.series)[0]
    series = dict(hist.series)
    y = series[key].copy()
    y[y.index >= cut] = y[y.index >= cut] * 4  # a new level the stored model has not seen
    series[key] = y
    res = train(History(series, hist.step), str(tmp_path), _settings())
    assert key in res.refitted and "recent error" in res.reasons[key]
    assert set(res.carried) == set(hist.series) - {key}


def test_joblib_fan_out_matches_in_process(tmp_path):
    hist = small_history(workloads=4)
    a = train(hist, str(tmp_path / "a"), _settings(chunk=2))
    b = train(hist, str(tmp_path / "b"), _settings(chunk=2, jobs=2))
    ra, rb = load_version(str(tmp_path / "a")), load_version(str(tmp_path / "b"))
    assert {k: e["model"] for k, e in ra.series.items()} == {k: e["model"] for k, e in rb.series.items()}
    for k in ra.series:
        np.testing.assert_allclose(ra.series[k]["shifts"], rb.series[k]["shifts"])
    assert a.models == b.models


def test_dask_local_cluster_fan_out(tmp_path):
    distributed = pytest.importorskip("dask.distributed")
    hist = small_history(workloads=3)
    ref = train(hist, str(tmp_path / "ref"), _settings(chunk=1))
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None) as cluster, \
            distributed.Client(cluster) as client:
        with distributed.get_task_stream(client) as ts:
            res = train(hist, str(tmp_path / "dask"), _settings(chunk=1), dask_client=client)
        # one backtest task per chunk (one series each) ran on the cluster's worker processes
        tasks = [t for t in ts.data if "select_chunk" in str(t["key"])]
        assert len(tasks) == len(hist.series)
        assert {t["worker"] for t in tasks} <= set(client.scheduler_info()["workers"])
    a, b = load_version(str(tmp_path / "ref")), load_version(str(tmp_path / "dask"))
    assert {k: e["model"] for k, e in a.series.items()} == {k: e["model"] for k, e in b.series.items()}
    assert sorted(res.refitted) == sorted(hist.series)


def test_seasonality_gate_keeps_daily_models_off_a_noise_series(tmp_path):
    hist = small_history(workloads=2)
    rng = np.random.default_rng(0)
    idx = next(iter(hist.series.values())).index
    series = dict(hist.series)
    series["noise/Deployment/n/app/cpu"] = pd.Series(5 + rng.normal(0, 1, len(idx)), index=idx)
    train(History(series, hist.step), str(tmp_path), _settings())
    e = load_version(str(tmp_path)).series["noise/Deployment/n/app/cpu"]
    assert e["acf_day"] < 0.3
    assert e["model"] not in ("seasonal_naive_daily", "seasonal_median", "stl", "seasonal_naive_weekly")
    assert e["scores"]["seasonal_naive_daily"]["eligible"] is False
