"""The one shared contract test: every model in MODELS through the same checks (STYLE.md)."""
import pickle

import numpy as np
import pandas as pd
import pytest
from sklearn.base import clone

from predictor.models import MODELS, NotFittedError
from predictor.models.gbm import GlobalGBM

QS = (0.5, 0.9, 0.95, 0.99)
SMALL = dict(max_iter=15, max_origins=4, max_rows=5000)  # keep the GBMs fast in tests


def _series(days: int = 16, seed: int = 0, signed: bool = False) -> pd.Series:
    rng = np.random.default_rng(seed)
    idx = pd.date_range("2024-07-01", periods=days * 288, freq="5min", tz="UTC")
    t = np.arange(len(idx))
    y = 2 + np.sin(2 * np.pi * t / 288) + 0.3 * (idx.day_of_week >= 5) + rng.normal(0, 0.1, len(idx))
    if signed:
        y = y - 2.5  # standardised KPIs live around zero
    y[500:530] = np.nan  # a gap
    return pd.Series(y, index=idx)


def _make(name):
    m = MODELS[name]()
    if isinstance(m, GlobalGBM):
        m.set_params(**SMALL)
    return m


@pytest.fixture(scope="module")
def y():
    return _series()


@pytest.mark.parametrize("name", sorted(MODELS))
def test_contract(name, y):
    m = _make(name)
    # __init__ stores its parameters only: a clone is an equal, unfitted estimator
    c = clone(m)
    assert c.get_params() == m.get_params()
    with pytest.raises(NotFittedError):
        c.predict(3, QS)
    assert m.fit(y) is m
    out = m.predict(300, QS)
    assert out.shape == (300, len(QS))
    assert np.isfinite(out).all()
    # quantiles never cross
    assert (np.diff(out, axis=1) >= -1e-12).all()
    # the median follows the tide: within the range the history spans
    assert np.nanmin(y) - 1 < out[:, 0].mean() < np.nanmax(y) + 1
    # deterministic: a fresh fit with the same seed gives the same forecast
    again = _make(name).fit(y).predict(300, QS)
    np.testing.assert_allclose(out, again)
    # stateless forecast == fit + predict
    np.testing.assert_allclose(_make(name).forecast(y, 300, QS), out)
    # pickling round trip
    back = pickle.loads(pickle.dumps(m))
    np.testing.assert_allclose(back.predict(300, QS), out)
    # forecast index continues the history
    assert m.future_index(3)[0] == y.index[-1] + pd.Timedelta("5min")


@pytest.mark.parametrize("name", sorted(MODELS))
def test_contract_signed_series(name):
    """Standardised KPIs are negative half of the time: every model must still forecast them."""
    y = _series(days=15, seed=3, signed=True)
    out = _make(name).forecast(y, 288, QS)
    assert np.isfinite(out).all() and (np.diff(out, axis=1) >= -1e-12).all()
    assert out[:, 0].mean() < 0


@pytest.mark.parametrize("name", sorted(MODELS))
def test_contract_bad_input_is_clear(name):
    m = _make(name)
    with pytest.raises(ValueError, match="at least"):
        m.fit(_series().iloc[:1])
    with pytest.raises(TypeError):
        m.fit(np.arange(10.0))
    m.fit(_series(days=15))
    with pytest.raises(ValueError, match="horizon"):
        m.predict(0, QS)
    with pytest.raises(ValueError, match="quantiles"):
        m.predict(5, (0.5, 1.0))


def test_seasonal_models_need_two_days():
    short = _series(days=16).iloc[:300]
    for name in ("seasonal_naive_daily", "seasonal_median", "stl"):
        with pytest.raises(ValueError, match="(?i)two|2"):
            MODELS[name]().fit(short)


def test_global_gbm_serves_unseen_series_without_refit():
    train = {f"s{i}": _series(days=12, seed=i) * (10 ** i) for i in range(3)}
    g = GlobalGBM(**SMALL).fit_many(train)
    # a series 1,000x larger than any seen: scaled features make the forecast follow its level
    new = _series(days=8, seed=9) * 1e5
    out = g.predict_series(new, 288, QS)
    assert out.shape == (288, 4)
    assert 1e5 < out[:, 0].mean() < 4e5
    with pytest.raises(ValueError, match="fitted for quantiles"):
        g.predict_series(new, 10, (0.5, 0.8))


def test_stl_tracks_the_daily_cycle():
    y = _series(days=10)
    out = MODELS["stl"]().forecast(y, 288, QS)
    t = np.arange(len(y), len(y) + 288)
    truth = 2 + np.sin(2 * np.pi * t / 288)
    assert np.corrcoef(out[:, 0], truth)[0, 1] > 0.9
