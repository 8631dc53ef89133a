"""Decision-time forecasts (issue 12): the estimator contract, no look-ahead, serialisation without
pickle, and adaptive-conformal calibration on a drifting series."""
import argparse
import json
import sys

import numpy as np
import pandas as pd
import pytest

from contracts.errors import InputError
from predictor.features.decision import decision_features, next_max, training_rows
from predictor.models.base import NotFittedError
from predictor.models.decision_time import DecisionTimeGBM, backend_problem
from predictor.pipeline.calibration import AdaptiveConformal
from predictor.pipeline.decision import calibrated_series
from tidewise.cli import build_parser
from tidewise.commands.replay import settings_from
from tidewise.commands.train import decision_settings

STEP = pd.Timedelta("5min")
QS = (0.5, 0.9, 0.95, 0.99)


def tidal(days=8, seed=0, amp=1.0, noisier_from=None):
    """A daily tide with 15% noise, or (from day `noisier_from`) 5% noise turning into 50%."""
    idx = pd.date_range("2024-03-01", periods=days * 288, freq="5min", tz="UTC")
    rng = np.random.default_rng(seed)
    t = np.arange(len(idx))
    base = amp * (2 + np.sin(2 * np.pi * t / 288))
    noise = 0.15 if noisier_from is None else np.where(t < noisier_from * 288, 0.05, 0.5)
    return pd.Series(base * (1 + noise * rng.standard_normal(len(idx))), index=idx)


def fleet(days=8):
    return {f"s{i}": tidal(days, seed=i, amp=10.0 ** i) for i in range(3)}  # one and two orders of magnitude apart


def small(**kw):
    return DecisionTimeGBM(max_iter=15, max_rows=4000, min_samples_leaf=20, **kw)


def test_estimator_contract():
    m = small(span=6, random_state=3)
    assert m.get_params()["span"] == 6 and m.get_params()["random_state"] == 3  # __init__ stores kwargs only
    with pytest.raises(NotFittedError):
        m.predict_series(tidal())
    series = fleet()
    assert m.fit_many(series, STEP) is m
    learned = set(vars(m)) - set(m.get_params())
    assert learned and all(k.endswith("_") for k in learned)
    q, scale = m.predict_series(series["s1"])
    ok = np.all(np.isfinite(q), axis=1)
    assert ok.sum() > len(q) // 2 and (np.diff(q[ok], axis=1) >= 0).all()  # quantiles never cross
    again, _ = small(span=6, random_state=3).fit_many(series, STEP).predict_series(series["s1"])
    np.testing.assert_array_equal(q, again)  # deterministic given the seed
    # level-dependent bands: the same shape 100x larger has a 100x wider band in its own units
    q2, _ = m.predict_series(series["s2"])
    w1, w2 = np.nanmedian(q[:, 3] - q[:, 0]), np.nanmedian(q2[:, 3] - q2[:, 0])
    assert 3 < w2 / w1 < 30


def test_bad_parameters_are_refused_in_fit():
    with pytest.raises(ValueError, match="backend"):
        small(backend="xgb").fit_many(fleet(), STEP)
    with pytest.raises(ValueError, match="training rows"):
        small().fit_many({"a": tidal(days=1)}, STEP)


@pytest.mark.parametrize("backend", ["hgb", "lightgbm"])
def test_round_trip_through_json_and_arrays(backend, tmp_path):
    m = small(backend=backend).fit_many(fleet(), STEP)
    meta, arrays = m.to_arrays()
    (tmp_path / "meta.json").write_text(json.dumps(meta))
    np.savez(tmp_path / "a.npz", **arrays)
    with np.load(tmp_path / "a.npz", allow_pickle=False) as z:
        back = DecisionTimeGBM.from_arrays(json.loads((tmp_path / "meta.json").read_text()), dict(z))
    y = tidal(seed=9)
    np.testing.assert_array_equal(m.predict_series(y)[0], back.predict_series(y)[0])
    with pytest.raises(ValueError, match="format"):
        DecisionTimeGBM.from_arrays({**meta, "format": "other/9"}, arrays)
    if backend == "lightgbm":  # the default's text models are checked on load as the global GBM's are
        with pytest.raises(ValueError, match="not a LightGBM text model"):
            DecisionTimeGBM.from_arrays({**meta, "lightgbm_models": ["import os"] * len(m.quantiles)}, arrays)


def test_features_and_targets_read_no_future():
    y = tidal()
    cut = 5 * 288 + 17
    changed = y.copy()
    changed.iloc[cut:] *= 5.0
    a, la, sa = decision_features(y, STEP, 12)
    b, lb, sb = decision_features(changed, STEP, 12)
    np.testing.assert_array_equal(a[: cut + 1], b[: cut + 1])  # origin `cut` reads y[:cut] only
    assert not np.array_equal(a[cut + 1], b[cut + 1])
    # targets: the max of the next 12 samples, from the origin on
    assert next_max(y, 12)[100] == y.iloc[100:112].max()
    before = y.index[cut]
    x1, t1 = training_rows(y, STEP, 12, before)
    x2, t2 = training_rows(changed, STEP, 12, before)
    np.testing.assert_array_equal(x1, x2)
    np.testing.assert_array_equal(t1, t2)  # no training target reaches into `before` or later


def test_a_model_fitted_before_a_day_ignores_that_day():
    series = fleet()
    day = series["s0"].index[6 * 288]
    changed = {k: v.where(v.index < day, v * 3.0) for k, v in series.items()}
    m1 = small().fit_many(series, STEP, day)
    m2 = small().fit_many(changed, STEP, day)
    y = series["s1"]
    np.testing.assert_array_equal(m1.predict_series(y)[0], m2.predict_series(y)[0])


def test_adaptive_conformal_moves_coverage_toward_target():
    cal = AdaptiveConformal(QS, rate=0.05)
    rng = np.random.default_rng(0)
    raw = np.array([0.0, 0.5, 0.7, 1.0])  # far too low for actuals around 2: every quantile misses
    hits = []
    for i in range(4000):
        out = cal.apply(raw, 1.0)
        actual = 2.0 + 0.3 * rng.standard_normal()
        hits.append(actual <= out[1])
        cal.update(out, actual)
    assert np.mean(hits[:50]) < 0.5  # uncalibrated start: q0.9 mostly missed
    assert 0.85 < np.mean(hits[-2000:]) < 0.95  # the running coverage of q0.9 reaches ~0.9
    assert (np.diff(cal.apply(raw, 1.0)) >= 0).all()


def test_calibration_tracks_a_drifting_series():
    """A model fitted on calm days under-forecasts a series that turns noisy (its scale, a week's
    mean deviation, lags behind); the per-series calibration brings q0.9's coverage on the noisy
    days back toward 0.9."""
    y = tidal(days=14, noisier_from=5, seed=4)
    m = small(span=12).fit_many({"y": y}, STEP, y.index[4 * 288])
    raw, _ = m.predict_series(y)
    cal = calibrated_series(m, y, rate=0.05, start=4 * 288)
    actual = next_max(y, 12)
    late = slice(6 * 288, len(y) - 12)
    cov_raw = np.mean(actual[late] <= raw[late, 1])
    cov_cal = np.mean(actual[late] <= cal[late, 1])
    assert cov_raw < 0.7  # drift: the raw model misses far more often than 10%
    assert abs(cov_cal - 0.9) < abs(cov_raw - 0.9) and cov_cal > 0.8


def test_an_unloadable_lightgbm_is_named_with_its_fix_before_any_work(monkeypatch):
    """LightGBM is a dependency, but its library needs the system's libgomp.so.1 (an OSError on import
    where it is missing, as on a bare slim image): both commands refuse in one line, naming the fix."""
    assert backend_problem("lightgbm") is None and backend_problem("hgb") is None
    monkeypatch.setitem(sys.modules, "lightgbm", None)  # import lightgbm now raises ImportError
    assert backend_problem("hgb") is None
    assert backend_problem("lightgbm").startswith("lightgbm cannot be loaded (")
    args = argparse.Namespace(decision_backend="lightgbm", vpa_interval="1h", no_decision_time=False)
    with pytest.raises(InputError, match=r"^--decision-backend lightgbm: lightgbm cannot be loaded .*libgomp1.* use hgb$"):
        decision_settings(args, pd.Timedelta("5min"))
    assert decision_settings(argparse.Namespace(decision_backend="hgb", vpa_interval="1h", no_decision_time=False),
                             pd.Timedelta("5min")).backend == "hgb"
    replay = build_parser().parse_args(["replay", "vpa", "--input", "in.csv", "--output", "out.csv"])  # the default
    with pytest.raises(InputError, match=r"^--decision-model lightgbm: lightgbm cannot be loaded .*--decision-model gbm$"):
        settings_from(replay)
    gbm = build_parser().parse_args(["replay", "--decision-model", "gbm", "vpa", "--input", "in.csv", "--output", "o.csv"])
    assert settings_from(gbm).decision_model == "gbm"
