"""Decision-time forecasts in serve (issue 12, item 1): the registry's models drive VPA and HPA
decisions when present and fresh, the day-ahead forecast is the fallback and the reason says which
served, and serve computes exactly the replay's (`tidewise replay --decision-model`) HPA quantiles.
The VPA's hour-peak model (issue 24) is tested in test_vpa_hour_peak_serve.py."""
from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from autoscaler.output.sinks import DryRunSink
from autoscaler.routines.decision_time import DecisionTimeServing
from autoscaler.routines.loop import OK, ServingLoop
from autoscaler.settings import LoopSettings
from predictor import registry
from predictor.history import History
from predictor.models.decision_time import DecisionTimeGBM
from predictor.pipeline.calibration import PEAK_LEVELS
from studies.replay.decision_time import DecisionTimeForecaster, DecisionTimeTrainer
from studies.replay.decisions import QUANTILES, DailyChoiceForecaster
from tests.autoscaler.conftest import StaticCluster, fast_settings, source_of
from tests.predictor.test_decision_time import fleet

STEP = pd.Timedelta("5min")
BOTH = LoopSettings(decision_time_vpa=True, decision_time_hpa=True)


def quick(span: int, features: str = "recent") -> DecisionTimeGBM:
    levels = PEAK_LEVELS if features == "hour_peak" else QUANTILES
    return DecisionTimeGBM(levels, span, max_iter=15, max_rows=4000, min_samples_leaf=20, features=features)


def write(reg_dir, history: History, models: dict, end: pd.Timestamp | None = None) -> str:
    series = {k: {"model": "seasonal_naive_daily", "shifts": [0.0] * 4} for k in history.series}
    end = end if end is not None else history.end
    return registry.write_version(str(reg_dir), quantiles=QUANTILES, series=series, step_seconds=300,
                                  data_window=((end - pd.Timedelta("9D")).isoformat(), end.isoformat()), decision_models=models)


def run(objects, history, reg_dir, decision_time=True):
    s = fast_settings()
    s.loop.forecast_refresh = None
    s.loop.decision_time_vpa = s.loop.decision_time_hpa = decision_time
    rep = ServingLoop(s, source_of(history), StaticCluster(objects), DryRunSink(), registry_dir=str(reg_dir)).run_once()
    assert rep.outcome == OK, rep.reason
    vpa = [r.reason.model for d in rep.vpa for c in d.containers for r in c.resources.values()]
    hpa = [d.reason.model for d in rep.hpa]
    assert vpa and hpa
    return vpa, hpa


@pytest.fixture(scope="module")
def models(small):
    hist = small[2]
    return {"vpa": quick(12, "hour_peak").fit_many(hist.series, STEP), "hpa": quick(2).fit_many(hist.series, STEP)}


def test_serve_decides_from_the_registry_decision_time_models(objects, history, tmp_path, models):
    write(tmp_path, history, models)
    vpa, hpa = run(objects, history, tmp_path)
    assert all(m == "day_plan" for m in vpa), vpa[:2]  # updateMode unset: the restart regime's day plan
    assert all(m.startswith("decision_time_lightgbm [hpa: peak of the next 10m") for m in hpa), hpa[:2]
    off_vpa, off_hpa = run(objects, history, tmp_path, decision_time=False)
    assert not any("decision_time" in m or "day-ahead" in m for m in off_vpa + off_hpa)


def test_by_default_both_read_decision_time(objects, history, tmp_path, models):
    """The defaults the dev replay chose: HPA on (issue12-results.md), VPA on with the hour-peak model (issue 24)."""
    write(tmp_path, history, models)
    s = fast_settings()
    s.loop.forecast_refresh = None
    rep = ServingLoop(s, source_of(history), StaticCluster(objects), DryRunSink(), registry_dir=str(tmp_path)).run_once()
    assert rep.hpa and all(d.reason.model.startswith("decision_time_lightgbm") for d in rep.hpa)
    assert rep.vpa and all(r.reason.model.startswith(("hour_peak_lightgbm@", "day_plan")) for d in rep.vpa
                           for c in d.containers for r in c.resources.values())


def test_missing_or_stale_models_fall_back_to_the_day_ahead_forecast_and_say_why(objects, history, tmp_path, models):
    write(tmp_path / "hpa-only", history, {"hpa": models["hpa"]})
    vpa, hpa = run(objects, history, tmp_path / "hpa-only")
    assert all("[day-ahead; decision-time vpa: no model in registry" in m for m in vpa), vpa[:2]
    assert all(m.startswith("decision_time_lightgbm") for m in hpa)
    write(tmp_path / "stale", history, models, end=history.end - pd.Timedelta("3D"))
    vpa, hpa = run(objects, history, tmp_path / "stale")
    assert all("[day-ahead; decision-time" in m and "model stale" in m for m in vpa + hpa), (vpa + hpa)[:2]


def test_stale_features_fall_back_for_that_series_only(small, models):
    hist = small[2]
    sid, other = sorted(hist.series)[:2]
    origin = hist.end + STEP
    cut = dict(hist.series)
    cut[sid] = cut[sid][cut[sid].index < origin - pd.Timedelta("30min")]  # its last half hour is missing
    base = {k: DailyChoiceForecaster(k, model="seasonal_naive_daily").forecast(y, origin, pd.Timedelta("2h"))
            for k, y in cut.items()}
    reg = registry.RegistryVersion("/models/v1", "v1", {"data_window": {"end": hist.end.isoformat()}}, {},
                                   decision_models=models)
    _, hpa = DecisionTimeServing().views(reg, BOTH, "2m", "1m", base, History(cut, STEP), origin, STEP)
    assert "features stale" in hpa[sid].model and hpa[sid].model.startswith(base[sid].model)
    np.testing.assert_array_equal(hpa[sid].values, base[sid].values)
    assert hpa[other].model.startswith("decision_time_lightgbm")


@pytest.mark.parametrize("kind", ["hpa"])
def test_serve_computes_the_replay_quantiles(kind):
    """Replay's decision-time forecaster and serve's views, given the same model and history, give
    the same forecast at every origin (serve walking origin by origin as its runs do)."""
    series = fleet(days=10)
    span = 12 if kind == "vpa" else 2
    model = quick(span).fit_many(series, STEP)
    y = series["s1"]
    days = {d.floor("D") for d in y.index}
    trainer = DecisionTimeTrainer(series, span, models={d: model for d in days})
    fallback = DailyChoiceForecaster("s1", model="seasonal_naive_daily")
    replay = DecisionTimeForecaster("s1", trainer, fallback)
    serve = DecisionTimeServing()
    reg = registry.RegistryVersion("/models/v1", "v1", {"data_window": {"end": y.index[-1].isoformat()}}, {},
                                   decision_models={kind: model})
    horizon = pd.Timedelta("3h")
    origins = pd.date_range(y.index[9 * 288 - 6], periods=30, freq=STEP)
    for origin in origins:
        want = replay.forecast(y, origin, horizon)
        past = {"s1": y[y.index < origin]}
        base = {"s1": fallback.forecast(y, origin, horizon)}
        views = serve.views(reg, BOTH, "10s", "1m", base, History(past, STEP), origin, STEP)
        got = views[0 if kind == "vpa" else 1]["s1"]
        assert got.model.startswith("decision_time_lightgbm") and want.model == "decision_time_lightgbm"
        assert got.quantiles == want.quantiles
        np.testing.assert_allclose(got.values, want.values, rtol=1e-9)
