"""Serve and replay set the same HPA floor from the same forecasts and history: replay_hpa's floor at
minute equals decide_hpa's minReplicas built from what serve would hold at that minute (the
forecast shifted to the decision, the forecast as made for the level ratio, the history before it)."""
from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from autoscaler.logic.decide_hpa import HpaInputs, decide_hpa
from autoscaler.logic.hpa import Stabilizer
from autoscaler.model.views import HpaView, WorkloadSeries
from autoscaler.settings import HpaSettings
from predictor.history import History
from predictor.types import Forecast
from studies.replay.decisions import DailyChoiceForecaster, replay_hpa

STEP = pd.Timedelta("5min")
SID = "shop/Deployment/web/app/cpu"
QS = (0.5, 0.9, 0.95, 0.99)
IDX = pd.date_range("2026-01-01", periods=3 * 288, freq=STEP, tz="UTC")
HOURS = (IDX.hour + IDX.minute / 60).to_numpy()
# observed: a tide with noise; the forecast's median misses its level by 20% (the level ratio's job)
Y = pd.Series(6 + 4 * np.sin(2 * np.pi * (HOURS - 9) / 24) + np.random.default_rng(1).normal(0, 0.4, len(IDX)),
              index=IDX)
MEDIAN = pd.Series(0.8 * (6 + 4 * np.sin(2 * np.pi * (HOURS - 9) / 24)), index=IDX)


class FixedForecaster(DailyChoiceForecaster):
    """The same known forecast from any origin (median and fixed ratios for the upper quantiles)."""

    def _forecast(self, y: pd.Series, origin: pd.Timestamp, horizon: pd.Timedelta) -> Forecast:
        return forecast_from(origin, int(np.ceil(horizon / STEP)))


def forecast_from(origin: pd.Timestamp, n: int) -> Forecast:
    med = MEDIAN[origin:].iloc[:n].to_numpy()
    return Forecast(SID, MEDIAN[origin:].index[:n], QS, np.outer(med, [1.0, 1.3, 1.4, 1.6]), model="fixed")


def serve_floor(now: pd.Timestamp, made_at: pd.Timestamp, s: HpaSettings, stab: Stabilizer) -> int:
    at = now.floor(STEP)  # serve's origin: the step after the newest sample
    obj = {"kind": "HorizontalPodAutoscaler", "metadata": {"name": "web", "namespace": "shop"},
           "spec": {"scaleTargetRef": {"kind": "Deployment", "name": "web"}, "minReplicas": 1, "maxReplicas": 1000,
                    "metrics": [{"type": "Resource", "resource": {"name": "cpu", "target": {
                        "type": "Utilization", "averageUtilization": 50}}}]}}
    history = History({SID: Y[Y.index < at]}, STEP)
    inp = HpaInputs(HpaView(obj), {"cpu": 1000}, WorkloadSeries({"app": {"cpu": SID}}), {SID: forecast_from(at, 24)},
                    {SID: forecast_from(made_at, 24)}, history, at, now, STEP)
    return decide_hpa(inp, s, stab).decision.min_replicas


@pytest.mark.parametrize("band_steps", [0, 24])
def test_serve_and_replay_set_the_same_floor(band_steps):
    s = HpaSettings(quantile=0.8, level_steps=3, band_steps=band_steps, band_min_steps=3)
    start, end = IDX[0] + pd.Timedelta("1D") + pd.Timedelta("6h"), IDX[0] + pd.Timedelta("1D") + pd.Timedelta("8h")
    # one core per replica at 50% utilisation: serve's 500m of a 1000m request
    _, floor, _, _ = replay_hpa(Y, start, end, per=1.0, settings=s, target_utilization=0.5,
                                forecaster=FixedForecaster(key=SID))
    stab = Stabilizer(pd.Timedelta(s.stabilization))
    # serve decides every minute on 5-minute data, from forecasts the replay refreshes hourly
    for i, now in enumerate(pd.date_range(start, end, freq="1min", inclusive="left")):
        assert serve_floor(now, now.floor("1h"), s, stab) == floor[i], now
    if band_steps:  # the band was in force, and it moved the floor away from the day-ahead quantile's
        assert len(stab.band.errors) >= s.band_min_steps
        _, plain, _, _ = replay_hpa(Y, start, end, per=1.0, settings=HpaSettings(quantile=0.8, level_steps=3),
                                    target_utilization=0.5, forecaster=FixedForecaster(key=SID))
        assert (plain != floor).any()
