"""The hour-peak features (issue 24): past only, and the serving path (one origin, many series at once)
equal to the full computation replay and training use."""
import warnings

import numpy as np
import pandas as pd
import pytest

from predictor.features.hour_peak import HOUR_PEAK_NAMES, hour_peak_features, hour_peak_features_at, row_quantile
from predictor.models.decision_time import DecisionTimeGBM
from predictor.pipeline.calibration import PEAK_LEVELS
from predictor.pipeline.decision import raw_at_origin, raw_from_history

STEP = pd.Timedelta("5min")


def series(days=10, seed=0, start="2024-01-01"):
    idx = pd.date_range(start, periods=days * 288, freq="5min", tz="UTC")
    rng = np.random.default_rng(seed)
    y = pd.Series(5 + 2 * np.sin(2 * np.pi * np.arange(len(idx)) / 288) + rng.gamma(2, 0.3, len(idx)), idx)
    y.iloc[400:460] = np.nan  # a gap
    return y


def test_features_read_only_the_past():
    y = series()
    x, _, _ = hour_peak_features(y, STEP, 12)
    assert x.shape == (len(y), len(HOUR_PEAK_NAMES))
    cut = 2000
    later = y.copy()
    later.iloc[cut:] *= 9
    x2, _, _ = hour_peak_features(later, STEP, 12)
    assert np.allclose(x[: cut + 1], x2[: cut + 1], equal_nan=True)
    assert not np.allclose(x[cut + 1:], x2[cut + 1:], equal_nan=True)


def test_one_origin_equals_the_full_computation():
    y = series()
    x, level, scale = hour_peak_features(y, STEP, 12)
    rows = np.array([0, 1, 7, 100, 420, 900, 2017, len(y) - 1])
    xa, la, sa = hour_peak_features_at(y, rows, STEP, 12)
    assert np.allclose(la, level[rows], equal_nan=True) and np.allclose(sa, scale[rows])
    assert np.allclose(xa, x[rows], equal_nan=True, rtol=1e-8, atol=1e-9)


def test_row_quantile_is_numpys():
    a = np.random.default_rng(2).random((300, 7))
    a[a < 0.25] = np.nan
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        for q in (0.5, 0.75):
            assert np.allclose(row_quantile(a, q), np.nanquantile(a, q, axis=1), equal_nan=True)


def test_many_series_at_one_origin_equal_each_alone():
    ys = {f"s{k}": series(days=12, seed=k) for k in range(4)}
    ys["short"] = ys["s0"].iloc[-3 * 288:]
    ys["late"] = ys["s1"].iloc[:-5]  # its newest samples missing: the gap is NaN in its window
    model = DecisionTimeGBM(PEAK_LEVELS, 12, features="hour_peak", max_iter=20).fit_many(ys, STEP)
    origin = ys["s0"].index[-1] + STEP
    batch = raw_at_origin(model, ys, origin, chunk=2)
    whole = raw_at_origin(model, ys, origin)  # one chunk: the rows' numbers do not depend on their chunk
    assert batch.keys() == whole.keys() and all(np.array_equal(batch[k][0], whole[k][0]) for k in batch)
    for k, y in ys.items():
        alone = raw_from_history(model, y, [origin]).get(origin)
        assert (k in batch) == (alone is not None)
        if alone is not None:
            assert np.allclose(batch[k][0], alone[0]) and batch[k][1] == pytest.approx(alone[1])
    with pytest.raises(ValueError, match="hour-peak"):
        raw_at_origin(DecisionTimeGBM(PEAK_LEVELS, 12, max_iter=5).fit_many(ys, STEP), ys, origin)


def test_a_model_saved_with_one_feature_set_is_refused_by_another():
    ys = {"a": series(days=9)}
    m = DecisionTimeGBM(PEAK_LEVELS, 12, features="hour_peak", max_iter=5).fit_many(ys, STEP)
    meta, arrays = m.to_arrays()
    back = DecisionTimeGBM.from_arrays(meta, arrays)
    assert back.features == "hour_peak"
    x, _, _ = hour_peak_features(ys["a"], STEP, 12)
    assert np.allclose(back.predict_scaled(x[-5:]), m.predict_scaled(x[-5:]))
    meta["params"]["features"] = "recent"
    with pytest.raises(ValueError, match="other features"):
        DecisionTimeGBM.from_arrays(meta, arrays)
