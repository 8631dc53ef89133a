"""Each model declares the history it needs; training never chooses a model that serving cannot
feed; a stored choice the history cannot feed falls back to one it can, and says so."""
from types import SimpleNamespace

import numpy as np
import pandas as pd
import pytest

from predictor.pipeline.fallback import choose_baseline
from predictor.pipeline.forecasting import ForecastRequest, forecast_from_choice, select_series
from predictor.models import MODELS
from predictor.pipeline.choice import history_needed
from predictor.types import Choice

QS = (0.5, 0.9, 0.95, 0.99)
SERVING = pd.Timedelta(days=8)


def weekly_series(days: float, step: str = "5min", seed: int = 0) -> pd.Series:
    """A daily tide whose weekends are much quieter: a clear weekly cycle."""
    idx = pd.date_range("2024-07-01", periods=int(pd.Timedelta(days=days) / pd.Timedelta(step)), freq=step, tz="UTC")
    hours = (idx - idx[0]) / pd.Timedelta("1h")
    weekend = np.isin(idx.day_of_week, (5, 6))
    rng = np.random.default_rng(seed)
    v = (10 + 4 * np.sin(hours.to_numpy() * 2 * np.pi / 24)) * np.where(weekend, 0.3, 1.0)
    return pd.Series(v + rng.normal(0, 0.2, len(idx)), index=idx)


def test_every_model_declares_a_need_that_is_enough_to_fit_it():
    needs = {name: make().history_needed() for name, make in MODELS.items()}
    assert needs["seasonal_naive_weekly"] == pd.Timedelta(days=14) and needs["mstl"] == pd.Timedelta(days=15)
    assert needs["seasonal_naive_daily"] == pd.Timedelta(days=2) and needs["decaying_histogram"] == pd.Timedelta("6h")
    for name, need in needs.items():
        if name == "gbm_global":  # fitted on a fleet; two days of a series are enough to predict it
            continue
        y = weekly_series(need / pd.Timedelta(days=1))
        m = MODELS[name]()
        assert m.fit(y).predict(12, QS).shape == (12, len(QS)), name
    with pytest.raises(ValueError, match="two seasons"):
        MODELS["seasonal_naive_weekly"]().fit(weekly_series(13))
    assert MODELS["mstl"]().fit(weekly_series(15)).weekly_used_
    assert not MODELS["mstl"]().fit(weekly_series(14)).weekly_used_


def test_training_never_chooses_a_model_serving_cannot_feed():
    y = weekly_series(28, step="1h")
    req = ForecastRequest(pd.Timedelta(days=1), pd.Timedelta("1h"), QS, folds=2, use_global=False)
    origin = y.index[-1] + req.step
    free = select_series("s", y, req, origin)
    assert "seasonal_naive_weekly" in free.scores  # a candidate when history is unlimited ...
    capped = select_series("s", y, ForecastRequest(**{**req.__dict__, "max_history": SERVING}), origin)
    assert "seasonal_naive_weekly" not in capped.scores  # ... never one when serving fetches 8 days
    assert capped.model != "seasonal_naive_weekly"
    # the no-backtest default respects it too
    assert choose_baseline(y, req.step)[0].label == "seasonal_naive_weekly"
    assert choose_baseline(y, req.step, SERVING)[0].label != "seasonal_naive_weekly"


def test_a_stored_choice_the_history_cannot_feed_falls_back_and_says_which_model_ran():
    y = weekly_series(8)  # what serving fetches
    req = ForecastRequest(pd.Timedelta(days=1), pd.Timedelta("5min"), QS)
    choice = Choice("s", "seasonal_naive_weekly", QS, [0.0] * 4, 3, 0.5, 0.8, reason="stored")
    fc = forecast_from_choice("s", y, req, choice, version="v1")
    assert fc.model == "seasonal_naive_daily"  # the best model 8 days feed, not a flat histogram
    assert fc.to_frame()["model"].unique().tolist() == ["seasonal_naive_daily"]
    note = " ".join(fc.notes)
    assert "seasonal_naive_weekly needs 14 days" in note and "fell back to seasonal_naive_daily" in note
    # with enough history the stored choice runs as chosen
    assert forecast_from_choice("s", weekly_series(15), req, choice).model == "seasonal_naive_weekly"
    assert history_needed("ensemble", ["seasonal_median", "stl", "gbm_global"]) == pd.Timedelta(days=2)


def test_a_carried_choice_serving_cannot_feed_is_refitted():
    from predictor.history import History
    from training.pipeline import TrainSettings, plan_refits

    y = weekly_series(10)
    prev = SimpleNamespace(manifest={"data_window": {"end": y.index[-1].isoformat()}}, global_model=None,
                           series={"s": {"model": "seasonal_naive_weekly", "fitted_end": y.index[-1].isoformat()}},
                           version="v0")
    refit, carry, why = plan_refits(History({"s": y}, pd.Timedelta("5min")), prev, TrainSettings(), y.index[-1])
    assert refit == ["s"] and carry == []
    assert "needs 14 days" in why["s"] and "serving fetches 8 days" in why["s"]
