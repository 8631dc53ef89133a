"""Features are leakage-free: nothing after the forecast origin changes any of them."""
import numpy as np
import pandas as pd
import pytest

from predictor.features import FEATURE_NAMES, calendar_features, context_of, direct_features, level_and_scale, training_rows

STEP = pd.Timedelta("5min")


def _y(days=10, seed=0):
    rng = np.random.default_rng(seed)
    idx = pd.date_range("2024-07-01", periods=days * 288, freq="5min", tz="UTC")
    return pd.Series(3 + np.sin(np.arange(len(idx)) * 2 * np.pi / 288) + rng.normal(0, 0.2, len(idx)), index=idx)


@pytest.mark.parametrize("horizon", [1, 288, 600])
def test_changing_the_future_changes_no_feature(horizon):
    y = _y()
    origin_pos = 8 * 288 + 17  # an origin that is not at midnight
    v = y.to_numpy().copy()
    origin = y.index[origin_pos]
    a = direct_features(v[:origin_pos], origin, STEP, horizon)
    # the full array, with everything from the origin on replaced by garbage, cut at the origin the
    # way every caller does: identical features
    w = v.copy()
    w[origin_pos:] = 1e6
    b = direct_features(w[:origin_pos], origin, STEP, horizon)
    np.testing.assert_array_equal(a, b)
    assert a.shape == (horizon, len(FEATURE_NAMES))


def test_training_rows_only_see_the_past_of_each_origin():
    y = _y(days=12)
    origins = [y.index[0] + pd.Timedelta(days=d) for d in (5, 7, 9)]
    x1, t1 = training_rows(y, origins, 288, min_past=2 * 288, max_past=28 * 288)
    # perturb everything after the last origin's target window: rows are unchanged
    z = y.copy()
    z[z.index >= origins[-1] + pd.Timedelta(days=1)] = -50.0
    x2, t2 = training_rows(z, origins, 288, min_past=2 * 288, max_past=28 * 288)
    np.testing.assert_array_equal(x1, x2)
    np.testing.assert_array_equal(t1, t2)
    # and perturbing the target day of the first origin changes only targets, not its features
    z = y.copy()
    z[(z.index >= origins[0]) & (z.index < origins[0] + pd.Timedelta(days=1))] += 10
    x3, t3 = training_rows(z, origins[:1], 288, min_past=2 * 288, max_past=28 * 288)
    x0, t0 = training_rows(y, origins[:1], 288, min_past=2 * 288, max_past=28 * 288)
    np.testing.assert_array_equal(x0, x3)
    assert not np.allclose(t0, t3)


def test_lags_point_at_the_right_past_values():
    y = _y()
    n = 8 * 288
    past = y.to_numpy()[:n]
    ctx = context_of(past, 288)
    x = direct_features(past, y.index[n], STEP, 300, ctx)
    z = (past - ctx.level) / ctx.scale
    col = {name: i for i, name in enumerate(FEATURE_NAMES)}
    # h = 0: one day back; h = 287: the last value before the origin; h = 288 (one day ahead):
    # two days back, so still before the origin
    assert x[0, col["lag_1d"]] == pytest.approx(z[n - 288])
    assert x[287, col["lag_1d"]] == pytest.approx(z[n - 1])
    assert x[288, col["lag_1d"]] == pytest.approx(z[n + 288 - 576])
    assert x[0, col["lag_1w"]] == pytest.approx(z[n - 7 * 288])


def test_scale_makes_series_of_any_unit_comparable():
    y = _y().to_numpy()
    l1, s1 = level_and_scale(y, 288)
    l2, s2 = level_and_scale(y * 1e9, 288)
    assert l2 == pytest.approx(l1 * 1e9) and s2 == pytest.approx(s1 * 1e9)
    o = pd.Timestamp("2024-07-09", tz="UTC")
    np.testing.assert_allclose(direct_features(y, o, STEP, 10), direct_features(y * 1e9, o, STEP, 10), rtol=1e-9)
    # standardised, negative series work too; a constant series has a positive scale
    _, s3 = level_and_scale(y - 10, 288)
    assert s3 == pytest.approx(s1)
    assert level_and_scale(np.full(500, 4.0), 288)[1] > 0


def test_calendar_is_cyclic_and_starts_weeks_on_monday():
    idx = pd.DatetimeIndex([pd.Timestamp("2024-07-01 00:00", tz="UTC"), pd.Timestamp("2024-07-08 00:00", tz="UTC"),
                            pd.Timestamp("2024-07-06 12:00", tz="UTC")])  # Mon, next Mon, Sat
    x, names = calendar_features(idx)
    np.testing.assert_allclose(x[0], x[1], atol=1e-9)
    assert x[2, names.index("weekend")] == 1 and x[0, names.index("weekend")] == 0
    assert x[0, names.index("week_sin1")] == pytest.approx(0.0, abs=1e-9)
