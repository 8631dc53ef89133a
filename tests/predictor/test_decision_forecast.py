"""The decision-time path serve and replay share (predictor.pipeline.decision): the walk reproduces
the reference calibration, raw forecasts read only the past, the overlay keeps the day-ahead tail."""
import numpy as np
import pandas as pd
import pytest

from predictor.pipeline.decision import (DecisionWalk, actual_from_history, calibrated_series, hpa_span,
                                         overlay, raw_from_history)
from predictor.types import Forecast
from tests.predictor.test_decision_time import QS, STEP, fleet, small


@pytest.fixture(scope="module")
def fitted():
    series = fleet(days=10)
    return small(span=3).fit_many(series, STEP), series["s1"]


def test_walk_reproduces_the_reference_calibration(fitted):
    model, y = fitted
    start = 9 * 288
    ref = calibrated_series(model, y, start=start)
    walk = DecisionWalk(QS, 3, STEP)
    raw = raw_from_history(model, y, list(y.index[start:]))
    actual = actual_from_history(y, 3, STEP)
    for i in range(start, len(y) - 3, 7):  # asked every 7 steps: the walk fills the steps between
        got = walk.advance(y.index[i], raw.get, actual)
        np.testing.assert_allclose(got, ref[i], rtol=1e-12)
    assert not np.allclose(ref[-10], raw[y.index[-10]][0])  # the calibration moved the raw quantiles


def test_raw_forecast_reads_only_the_samples_before_the_origin(fitted):
    model, y = fitted
    origin = y.index[9 * 288 + 40]
    past = y[y.index < origin]
    from_past = raw_from_history(model, past, [origin])[origin][0]
    spoiled = y.copy()
    spoiled[spoiled.index >= origin] *= 9.0
    np.testing.assert_allclose(raw_from_history(model, spoiled, [origin])[origin][0], from_past, rtol=1e-12)
    full, _ = model.predict_series(y)
    np.testing.assert_allclose(from_past, full[9 * 288 + 40], rtol=1e-9)  # the same rows as predict_series


def test_overlay_carries_the_decision_quantiles_throughout():
    idx = pd.date_range("2024-03-01", periods=10, freq=STEP, tz="UTC")
    q = np.array([100.0, 110.0, 120.0, 130.0])
    flat = overlay("s", q, QS, idx[0], STEP, 5, "decision_time_hgb")
    assert flat.quantiles == QS and (flat.values == q).all()


def test_hpa_span_covers_startup_and_one_look_ahead():
    assert hpa_span(pd.Timedelta("2min"), pd.Timedelta("1min"), STEP) == 2
    assert hpa_span(pd.Timedelta("5min"), pd.Timedelta("1min"), STEP) == 3
    assert hpa_span(pd.Timedelta("10min"), pd.Timedelta("6min"), STEP) == 5
