"""The HPA's decision-time features at chosen origins of many series at once (issue 24's serving cost):
equal to the bit to `decision_features`' rows at those origins and to `raw_from_history` per series, on
series with gaps, NaN runs, short histories and off-grid origins; the levels kept between runs
(RecentLevels) give what a fresh computation gives, and a changed sample in the past is noticed."""
from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from predictor.features.decision import decision_features
from predictor.features.decision import next_max
from predictor.features.decision_origin import features_at, levels, min_row, new_levels, rolling_rows
from predictor.models.decision_time import DecisionTimeGBM
from predictor.pipeline.decision import RecentLevels, actual_from_history, raw_from_history, raw_recent, recent_row
from tests.predictor.test_decision_time import STEP, fleet

CONTEXT = pd.Timedelta("9D")


def spoiled(seed: int, days: int = 10) -> dict[str, pd.Series]:
    """The test fleet with NaN runs, dropped samples and a short series."""
    rng = np.random.default_rng(seed)
    out = {}
    for k, y in fleet(days).items():
        y = y.copy()
        y[rng.random(len(y)) < 0.08] = np.nan
        y.iloc[1500:1700] = np.nan
        out[k] = y.drop(y.index[rng.random(len(y)) < 0.03])
    out["short"] = fleet(2)["s0"].iloc[:400]  # under a day and a half
    out["late"] = fleet(days)["s2"].iloc[2000:]  # starts a week in
    return out


@pytest.fixture(scope="module")
def model() -> DecisionTimeGBM:
    m = DecisionTimeGBM((0.1, 0.5, 0.9, 0.98), 2, max_iter=15, max_rows=4000, min_samples_leaf=20)
    return m.fit_many(fleet(), STEP)


def test_features_at_an_origin_are_the_full_computation_rows():
    series = spoiled(1)
    for key, y in series.items():
        grid = y.asfreq(STEP)
        x, level, scale = decision_features(grid, STEP, 2)
        positions = [p for p in (len(grid) - 1, len(grid) - 300, 2500, 290, 100, 5) if 0 <= p < len(grid)]
        origins = grid.index[positions]
        n = max(min_row(STEP), len(grid) + 1)
        past = np.array([recent_row(y, o, STEP, n) for o in origins])
        got, lv, sc = features_at(past, levels(past, 288), origins, STEP, 2)
        np.testing.assert_array_equal(lv, level[positions])
        np.testing.assert_array_equal(sc, scale[positions])
        np.testing.assert_array_equal(got, x[positions], err_msg=key)  # to the bit: the trees need it


def test_rolling_rows_are_each_row_on_its_own():
    rng = np.random.default_rng(7)
    a = np.round(rng.gamma(2, 1, (4, 700)), 2)
    a[rng.random(a.shape) < 0.2] = np.nan
    a[1] = 3.0  # constant: pandas returns the value itself
    for width, least, how in ((3, 1, "mean"), (12, 1, "mean"), (500, 72, "mean"), (288, 72, "median")):
        want = np.array([getattr(pd.Series(r).rolling(width, min_periods=least), how)().to_numpy() for r in a])
        np.testing.assert_array_equal(rolling_rows(a, width, least, how), want)


def test_the_public_rolling_path_gives_the_same_bits_as_the_kernels(monkeypatch):
    """A pandas that moved its private kernels takes the public rolling() over a custom indexer: each
    row to the bit as pandas rolls it on its own (also under the previous pandas major: this module is a
    data-path test)."""
    import predictor.features.decision_origin as origin

    rng = np.random.default_rng(11)
    a = np.round(rng.gamma(2, 1, (5, 600)), 3)
    a[rng.random(a.shape) < 0.15] = np.nan
    monkeypatch.setattr(origin, "KERNELS", {})
    for w, m, how in ((3, 1, "mean"), (500, 72, "mean"), (288, 72, "median")):
        want = np.array([getattr(pd.Series(r).rolling(w, min_periods=m), how)().to_numpy() for r in a])
        np.testing.assert_array_equal(rolling_rows(a, w, m, how), want)  # each row on its own, as the kernels


def test_new_levels_are_pandas_rolling_medians():
    rng = np.random.default_rng(4)
    tails = np.round(rng.gamma(2, 1, (300, 288)), 1)
    tails[rng.random(tails.shape) < 0.3] = np.nan
    tails[:5, 10:] = np.nan  # under a quarter of a day: NaN
    want = np.array([pd.Series(t).rolling(288, min_periods=72).median().iloc[-1] for t in tails])
    np.testing.assert_array_equal(new_levels(tails, 288), want)


def test_raw_recent_equals_raw_from_history_per_series(model):
    series = spoiled(2)
    end = max(y.index[-1] for y in series.values())
    todo = {k: list(pd.date_range(end - 3 * STEP, end + STEP, freq=STEP)) for k in series}
    todo["s1"] = [end + STEP]
    todo["off"] = [end + pd.Timedelta("1min")]  # off the grid: left out, as raw_from_history leaves it
    series["off"] = series["s0"]
    got = raw_recent(model, series, todo)
    for k, y in series.items():
        want = raw_from_history(model, y, todo[k])
        assert set(got[k]) == set(want), k
        for o, (q, sc) in want.items():
            np.testing.assert_array_equal(got[k][o][0], q)
            assert got[k][o][1] == sc
    assert not got["off"]
    one_by_one = raw_recent(model, series, todo, chunk=1)  # a row's numbers do not depend on its chunk
    assert all(np.array_equal(one_by_one[k][o][0], got[k][o][0]) for k in got for o in got[k])


def test_levels_kept_between_runs_are_the_fresh_ones_and_notice_a_changed_past(model, monkeypatch):
    from predictor.features import decision_origin

    widths = []  # the rows' lengths each time levels are computed (the first day's alone: ~288)
    full = decision_origin.levels
    monkeypatch.setattr(decision_origin, "levels", lambda w, day: widths.append(w.shape[1]) or full(w, day))
    y = spoiled(3)["s1"]
    cache = RecentLevels()
    origins = pd.date_range(y.index[-1] - 20 * STEP, y.index[-1] + STEP, freq=STEP)
    for k, o in enumerate(origins):
        past = y[(y.index < o) & (y.index >= o - CONTEXT)].copy()
        if k >= 12:  # a sample two hours back corrected: the week of levels is computed again, once
            past.iloc[-30 - (k - 12)] = 1e6
        for _ in range(1 + (k == 5)):  # twice at one origin (a loop running every minute)
            kept = raw_recent(model, {"s": past}, {"s": [o]}, cache, CONTEXT)["s"]
        fresh = raw_from_history(model, past, [o])
        assert set(kept) == set(fresh)
        for t, (q, _) in fresh.items():
            np.testing.assert_array_equal(kept[t][0], q)
    # whole rows: the first origin and the corrected sample; each other step its first day and one median
    assert len([w for w in widths if w > 2 * 288]) == 2 and len(widths) == len(origins)
    cache.keep_only(set())
    assert not cache.tracks


def test_the_actual_peak_lookup_is_next_max_on_the_grid():
    y = spoiled(5)["s0"]
    grid = y.asfreq(STEP)
    want = pd.Series(next_max(grid, 3), index=grid.index)
    at = actual_from_history(y, 3, STEP)
    edges = [grid.index[-1], grid.index[-2], grid.index[0] - STEP, grid.index[5] + pd.Timedelta("1min")]
    for t in list(grid.index[::37]) + edges:
        assert at(t) == pytest.approx(float(want.get(t, np.nan)), nan_ok=True), t


def test_a_row_holds_every_sample_before_the_origin():
    y = fleet(9)["s0"]
    o = y.index[-1] + STEP
    n = len(y) + 1
    row = recent_row(y, o, STEP, n)
    assert row is not None and np.isnan(row[0]) and np.array_equal(row[1:], y.to_numpy())
    assert recent_row(y, y.index[0] - STEP, STEP, n) is None
    assert recent_row(y, o + pd.Timedelta("1min"), STEP, n) is None
