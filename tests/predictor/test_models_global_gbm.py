"""The day-ahead global GBM: the LightGBM backend (fit, plain-data round trip through the
registry), training origins more than once a day, and the floor at zero for series never below it."""
import numpy as np
import pandas as pd
import pytest

from predictor.models.gbm import GlobalGBM
from predictor.registry import load_version, write_version

QS = (0.5, 0.9, 0.95, 0.99)


def _daily(days=9, seed=0, level=5.0):
    idx = pd.date_range("2024-08-01", periods=days * 288, freq="5min", tz="UTC")
    rng = np.random.default_rng(seed)
    return pd.Series(level + 3 * np.sin(np.arange(len(idx)) * 2 * np.pi / 288) + rng.normal(0, 0.3, len(idx)),
                     index=idx)


def _dropped(seed=0):
    """34 % CPU for eleven days, then the instance goes idle: ~0.3 % for the last day and a half
    (the shape of the dev suite's grok_asg_anomaly). Values are never below zero."""
    y = _daily(days=12, seed=seed, level=34.0)
    y.iloc[-432:] = np.abs(np.random.default_rng(seed + 1).normal(0.3, 0.2, 432))
    return y


@pytest.fixture(scope="module")
def fleet():
    return {f"s{i}": _daily(seed=i) * (1 + i) for i in range(3)}


def test_a_series_never_below_zero_is_never_forecast_below_zero():
    # rows from the drop day teach the trees "fall by ~20 scales"; the scale (a week's deviation
    # from a level near zero) is large, so without the floor the forecast is far below zero
    series = {"idle": _dropped(), "steady": _daily(days=12, seed=3, level=34.0)}
    gm = GlobalGBM(quantiles=QS, max_iter=30, max_origins=10, min_samples_leaf=20).fit_many(series)
    values = gm.predict_series(series["idle"], 288, QS)
    assert values.min() >= 0.0
    assert np.all(np.diff(values, axis=1) >= 0)  # still non-crossing


def test_a_series_with_negative_values_keeps_negative_forecasts():
    y = _daily(days=9, seed=4, level=-10.0)  # a standardised KPI, mostly below zero
    gm = GlobalGBM(quantiles=QS, max_iter=20, max_origins=5).fit_many({"kpi": y})
    assert gm.predict_series(y, 288, QS)[:, 0].max() < 0


def test_training_origins_every_six_hours_give_four_times_the_rows(fleet):
    daily = GlobalGBM(quantiles=(0.5,), max_iter=5, max_origins=4).fit_many(fleet)
    quarter = GlobalGBM(quantiles=(0.5,), max_iter=5, max_origins=4, origin_every="6h").fit_many(fleet)
    assert quarter.n_rows_ == 4 * daily.n_rows_
    with pytest.raises(ValueError, match="origin_every"):
        GlobalGBM(quantiles=(0.5,), origin_every="2d").fit_many(fleet)


def test_unknown_backend_is_a_clear_error(fleet):
    with pytest.raises(ValueError, match="backend 'xgb'"):
        GlobalGBM(backend="xgb").fit_many(fleet)


def test_lightgbm_backend_round_trips_through_the_registry_bit_identically(tmp_path, fleet):
    pytest.importorskip("lightgbm")  # a core dependency; absent only in a broken install
    gm = GlobalGBM(quantiles=QS, backend="lightgbm", max_iter=20, max_origins=4).fit_many(fleet)
    items = [(_daily(8, seed=s), None) for s in (5, 6)]
    before = gm.predict_many(items, 288, QS)
    assert all(np.all(np.diff(v, axis=1) >= 0) for v in before)
    assert before[0][:, 0].std() > 1.0  # it learned the daily cycle (amplitude 3)
    write_version(str(tmp_path), quantiles=QS, series={"a": {"model": "gbm_global", "shifts": [0.0] * 4}},
                  data_window=("2024-08-01T00:00:00+00:00", "2024-08-09T00:00:00+00:00"), step_seconds=300,
                  global_model=gm)
    reg = load_version(str(tmp_path))
    assert reg.global_model is not None and reg.global_model.backend == "lightgbm"
    with np.load(tmp_path / reg.version / "global_gbm.npz", allow_pickle=False) as z:
        assert {z[k].dtype for k in z.files} == {np.dtype(np.uint8)}  # text dumps as bytes, nothing else
    after = reg.global_model.predict_many(items, 288, QS)
    for a, b in zip(before, after):
        assert a.tobytes() == b.tobytes()


def test_a_lightgbm_text_that_is_not_a_model_is_refused(fleet):
    pytest.importorskip("lightgbm")
    gm = GlobalGBM(quantiles=(0.5,), backend="lightgbm", max_iter=5, max_origins=4).fit_many(fleet)
    meta, arrays = gm.to_arrays()
    bad = dict(arrays)
    bad["q0.lightgbm"] = np.frombuffer(b"import os; os.system('touch /tmp/x')", dtype=np.uint8)
    with pytest.raises(ValueError, match="not a LightGBM text model"):
        GlobalGBM.from_arrays(meta, bad)
    with pytest.raises(ValueError, match="missing"):
        GlobalGBM.from_arrays(meta, {})


def test_a_forecast_request_fits_the_global_model_with_its_global_params(monkeypatch, fleet):
    pytest.importorskip("lightgbm")
    from predictor.pipeline import forecasting
    from predictor.history import History

    fitted = []
    real = forecasting.fit_global

    def spy(series, req, before=None, params=None):
        gm = real(series, req, before=before, params=params)
        fitted.append(gm)
        return gm

    monkeypatch.setattr(forecasting, "fit_global", spy)
    req = forecasting.ForecastRequest(pd.Timedelta(hours=6), pd.Timedelta("5min"), QS,
                                      global_params={"backend": "lightgbm", "max_iter": 5, "max_origins": 3})
    out = forecasting.forecast_history(History(fleet, pd.Timedelta("5min")), req)
    assert len(out) == 3 and all(np.isfinite(f.values).all() for f in out)
    assert [gm.backend for gm in fitted] == ["lightgbm"]
