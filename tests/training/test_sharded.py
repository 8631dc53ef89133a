"""Training and batch forecasting sharded over Dask (issue 14), on a real `LocalCluster` (threads
in this process, and a TCP scheduler that the `tidewise` command, run as a real process, joins)."""
from __future__ import annotations

import dataclasses

import numpy as np
import pandas as pd
import pytest

from predictor.pipeline.forecasting import ForecastRequest, forecast_history
from predictor.registry import load_version
from tests.conftest import run_cli
from training.pipeline import TrainSettings, train
from training.sharded import ShardReport, forecast_sharded, split_history, synthetic_shards, train_sharded

from .conftest import small_history

distributed = pytest.importorskip("dask.distributed")
CHEAP = ("seasonal_naive_daily", "seasonal_median")


def settings(**kw) -> TrainSettings:
    s = TrainSettings(folds=1, use_global=False, candidates=CHEAP, **kw)
    if hasattr(s, "decision_time"):  # the day-ahead choice only: a sharded run fits no decision-time models
        s = dataclasses.replace(s, decision_time=dataclasses.replace(s.decision_time, enabled=False))
    return s


@pytest.fixture(scope="module")
def client():
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=False, dashboard_address=":0",
                                  protocol="tcp", host="127.0.0.1") as cluster, distributed.Client(cluster) as c:
        yield c


def test_sharded_training_chooses_what_one_process_chooses_and_reports_every_shard(tmp_path, client):
    hist = small_history(workloads=5)
    one = train(hist, str(tmp_path / "one"), settings())
    reports: list[ShardReport] = []
    shards = split_history(hist, 2)
    res = train_sharded(shards, str(tmp_path / "sharded"), settings(), client, step=hist.step,
                        progress=reports.append)
    assert len(shards) == 3 and sorted(r.index for r in reports) == [0, 1, 2]
    assert sum(r.series for r in reports) == len(hist.series) and all(r.worker.startswith("tcp://") for r in reports)
    a, b = load_version(str(tmp_path / "one")), load_version(str(tmp_path / "sharded"))
    assert {k: e["model"] for k, e in a.series.items()} == {k: e["model"] for k, e in b.series.items()}
    for k in a.series:
        np.testing.assert_allclose(a.series[k]["shifts"], b.series[k]["shifts"])
    assert sorted(res.refitted) == sorted(hist.series) == sorted(one.refitted)
    assert b.manifest["training"]["shards"] == 3 and b.manifest["data_window"] == a.manifest["data_window"]


def test_a_sharded_rerun_refits_only_the_series_whose_data_changed(tmp_path, client):
    hist = small_history(workloads=4)
    first = train_sharded(split_history(hist, 3), str(tmp_path), settings(), client, step=hist.step)
    again = train_sharded(split_history(hist, 3), str(tmp_path), settings(), client, step=hist.step)
    assert len(first.refitted) == len(hist.series) and again.refitted == [] and len(again.carried) == len(hist.series)
    changed = sorted(hist.series)[1]
    y = hist.series[changed].copy()
    y.iloc[-5:] = y.iloc[-5:] * 3  # a late correction inside the window the last version saw
    hist.series[changed] = y
    third = train_sharded(split_history(hist, 3), str(tmp_path), settings(), client, step=hist.step)
    assert third.refitted == [changed] and third.reasons[changed] == "data seen by the last version changed"
    assert load_version(str(tmp_path)).series[sorted(hist.series)[0]]["carried_from"] == again.version


def test_synthetic_shards_are_generated_on_the_workers_without_colliding(tmp_path, client):
    shards = synthetic_shards(12, size=4, days=4)
    res = train_sharded(shards, str(tmp_path), settings(serving_history=pd.Timedelta(days=2)), client,
                        step=pd.Timedelta("5min"))
    keys = res.refitted
    assert len(shards) == 3 and len(keys) == 12 and len(set(keys)) == 12
    assert {k.split("/")[0] for k in keys} == {"s00000", "s00001", "s00002"}


def test_sharded_forecast_equals_the_one_process_forecast(client):
    hist = small_history(workloads=3)
    req = ForecastRequest(horizon=pd.Timedelta("2h"), step=hist.step, model="seasonal_naive_daily",
                          origin=hist.end + hist.step)
    one = {f.series: f for f in forecast_history(hist, req)}
    sharded = forecast_sharded(split_history(hist, 2), req, client)
    assert [f.series for f in sharded] == sorted(one)
    for f in sharded:
        np.testing.assert_allclose(f.values, one[f.series].values)


def test_train_and_forecast_commands_on_a_dask_scheduler(tmp_path, client):
    address = client.scheduler.address
    reg = tmp_path / "models"
    r = run_cli("train", "--source", "synthetic", "--workloads", "3", "--last", "4d", "--folds", "1",
                "--no-global", "--serving-history", "2d", "--registry", str(reg), "--dask-scheduler", address,
                "--shard-size", "2", *(["--no-decision-time"] if "--no-decision-time" in _train_help() else []))
    assert r.returncode == 0, r.stderr
    assert r.stderr.count("series (") == 3 and "shard 3/3" in r.stderr  # 6 series in shards of 2
    hist_csv = tmp_path / "h.csv"
    frame = pd.concat([pd.DataFrame({"series": k, "timestamp": y.index.strftime("%Y-%m-%dT%H:%M:%SZ"), "value": y.values})
                       for k, y in small_history(workloads=2).series.items()])
    frame.dropna().to_csv(hist_csv, index=False)
    outs = []
    for extra in ([], ["--dask-scheduler", address, "--shard-size", "1"]):
        out = tmp_path / f"f{len(outs)}.csv"
        r = run_cli("forecast", "--input", str(hist_csv), "--output", str(out), "--horizon", "1h",
                    "--model", "seasonal_naive_daily", *extra)
        assert r.returncode == 0, r.stderr
        outs.append(pd.read_csv(out).sort_values(["series", "timestamp"], ignore_index=True))
    pd.testing.assert_frame_equal(outs[0], outs[1])
    bad = run_cli("train", "--source", "synthetic", "--registry", str(reg), "--dask-scheduler", address,
                  "--shard-size", "0")
    assert bad.returncode == 2 and bad.stderr.strip().splitlines()[-1].count("--shard-size 0") == 1


def _train_help() -> str:
    return run_cli("train", "--help").stdout
