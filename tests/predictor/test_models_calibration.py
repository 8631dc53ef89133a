"""Conformal calibration and the backtest choice."""
import numpy as np
import pandas as pd
import pytest

from predictor.pipeline.calibration import apply_shifts, conformal_shifts, coverage, pinball
from predictor.pipeline.selection import ENSEMBLE, SHIFT_WEIGHT, backtest, choose, cross_fitted, default_candidates

QS = (0.5, 0.9, 0.95, 0.99)


def test_conformal_shifts_restore_coverage_of_a_biased_forecast():
    rng = np.random.default_rng(0)
    actual = rng.normal(0, 1, 5000)
    # a forecast whose quantiles are far too narrow and too low
    fc = np.tile(np.array([-0.5, -0.2, -0.1, 0.0]), (5000, 1))
    assert coverage(actual, fc[:, 2]) < 0.6
    sh = conformal_shifts(actual, fc, QS)
    fresh = rng.normal(0, 1, 20000)
    cal = apply_shifts(np.tile(fc[0], (20000, 1)), sh, QS)
    for j, q in enumerate(QS):
        assert coverage(fresh, cal[:, j]) == pytest.approx(q, abs=0.015)
    # calibration lowers the pinball loss at every quantile
    assert (pinball(fresh, cal, QS) < pinball(fresh, np.tile(fc[0], (20000, 1)), QS)).all()


def test_too_few_points_means_no_shift_and_shifts_never_cross():
    assert (conformal_shifts(np.arange(10.0), np.zeros((10, 4)), QS) == 0).all()
    out = apply_shifts(np.zeros((5, 4)), np.array([0.0, 3.0, -2.0, 1.0]), QS)
    assert (np.diff(out, axis=1) >= 0).all()


def test_cross_fitting_never_uses_a_folds_own_errors():
    pred = np.zeros((3, 100, 4))
    actual = np.zeros((3, 100))
    actual[1] = 10.0  # only fold 1 runs high
    cal = cross_fitted(pred, actual, QS)
    # fold 1 is calibrated on folds 0 and 2 (no error there): unchanged
    assert np.allclose(cal[1], 0.0)
    # folds 0 and 2 learn from fold 1's error (shrunk by SHIFT_WEIGHT)
    assert cal[0][:, 3].min() > 0 and cal[0][0, 3] == pytest.approx(SHIFT_WEIGHT * 10.0)


def test_choice_prefers_the_ensemble_and_scores_skill_against_seasonal_naive():
    rng = np.random.default_rng(1)
    idx = pd.date_range("2024-07-01", periods=10 * 288, freq="5min", tz="UTC")
    y = pd.Series(3 + np.sin(np.arange(len(idx)) * 2 * np.pi / 288) + rng.normal(0, 0.2, len(idx)), index=idx)
    origin = idx[-1] + pd.Timedelta("5min")
    cands = default_candidates()
    origins, preds, actual, errors = backtest(y, origin, pd.Timedelta("5min"), QS, cands, folds=3)
    assert len(origins) == 3 and actual.shape == (3, 288)
    assert "seasonal_naive_weekly" in errors  # 10 days are too few for two weeks
    ch = choose("s", y, pd.Timedelta("5min"), origins, preds, actual, QS, cands, errors)
    assert ch.acf_day > 0.5
    assert ENSEMBLE in ch.scores and set(ch.members or ["x"]) <= {"seasonal_median", "stl", "gbm_global", "x"}
    # on a clean daily tide with noise, the chosen model beats yesterday's copy in the backtest
    assert ch.skill is not None and ch.skill < 1.0
    assert len(ch.shifts) == 4
