"""Seasonal naive as one array for many series (issue 14): the same numbers as fitting each series,
and the per-series path only for the series that need its care."""
from dataclasses import replace

import numpy as np
import pandas as pd
import pytest

import predictor.pipeline.forecasting as forecasting
from predictor.pipeline.forecasting import ForecastRequest, forecast_history, forecast_series, series_requests
from predictor.history import History

STEP = pd.Timedelta("5min")


def _history() -> History:
    rng = np.random.default_rng(3)
    idx = pd.date_range("2024-03-01", periods=4 * 288, freq=STEP, tz="UTC")
    series = {}
    for i in range(12):
        y = 2 + np.sin(np.arange(len(idx)) * 2 * np.pi / 288 + i) + rng.random(len(idx))
        series[f"s{i:02d}"] = pd.Series(y, index=idx)
    series["s03"].iloc[500:520] = np.nan  # a gap: bridged per series
    series["s04"] = series["s04"].iloc[-300:]  # under two days: falls back per series
    series["s05"] = series["s05"].iloc[:-6]  # ends earlier: its own group, forecast through the lead
    series["s06"] = series["s06"].iloc[:-400]  # silent for long: forecast from its own end
    return History(series, STEP)


@pytest.mark.parametrize("model", ["seasonal_naive_daily", "seasonal_naive_weekly"])
def test_batched_equals_one_by_one(model):
    hist = _history()
    req = ForecastRequest(pd.Timedelta("1D"), STEP, (0.5, 0.9, 0.95, 0.99), model)
    got = forecast_history(hist, req)
    reqs = series_requests(hist, replace(req, origin=hist.end + STEP))
    want = [forecast_series(k, y, reqs[k]) for k, y in hist.series.items()]
    assert [f.series for f in got] == [f.series for f in want]
    for a, b in zip(got, want):
        assert (a.model, a.notes, a.quantiles) == (b.model, b.notes, b.quantiles)
        assert a.index.equals(b.index)
        np.testing.assert_array_equal(a.values, b.values)


def test_only_the_series_needing_care_go_one_by_one(monkeypatch):
    one_by_one = []

    def counting(key, y, req):
        one_by_one.append(key)
        return forecast_series(key, y, req)

    monkeypatch.setattr(forecasting, "forecast_series", counting)
    hist = _history()
    forecast_history(hist, ForecastRequest(pd.Timedelta("1D"), STEP, model="seasonal_naive_daily"))
    # the gap, the short series and the two that end alone (each a group of one)
    assert sorted(one_by_one) == ["s03", "s04", "s05", "s06"]
