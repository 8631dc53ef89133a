"""Serve's HPA decision-time forecasts made for every series at once (issue 24's serving cost): run after
run — the same origin twice, one step on, a skipped step, a series that appears — the views give the
very quantiles of the one-series-at-a-time walk over `raw_from_history` they replaced."""
from __future__ import annotations

import numpy as np
import pandas as pd

from autoscaler.routines.decision_time import CONTEXT, DecisionTimeServing
from autoscaler.settings import LoopSettings
from predictor import registry
from predictor.history import History
from predictor.models.decision_time import DecisionTimeGBM
from predictor.pipeline.decision import DecisionWalk, actual_from_history, raw_from_history
from studies.replay.decisions import QUANTILES, DailyChoiceForecaster
from tests.predictor.test_decision_origin import spoiled
from tests.predictor.test_decision_time import STEP, fleet

HPA = LoopSettings(decision_time_vpa=False, decision_time_hpa=True)


def reference(model: DecisionTimeGBM, walk: DecisionWalk | None, y: pd.Series, origin: pd.Timestamp
              ) -> tuple[DecisionWalk, np.ndarray | None]:
    """The walk as serve stepped it before: one series, raw_from_history over its last 9 days (none
    when the sample before the origin is missing: stale features, the walk left as it was)."""
    if y.last_valid_index() is None or y.last_valid_index() < origin - STEP:
        return walk, None  # type: ignore[return-value]
    if walk is None or walk.done is None or walk.done < origin - CONTEXT:
        walk = DecisionWalk(model.quantiles, int(model.span), STEP)
    y = y[y.index >= origin - CONTEXT]
    todo = [origin] if walk.done is None else list(pd.date_range(walk.done + STEP, origin, freq=STEP))
    raw = raw_from_history(model, y, todo)
    return walk, walk.advance(origin, raw.get, actual_from_history(y, int(model.span), STEP))


def test_batched_views_walk_as_each_series_alone():
    series = spoiled(4)
    model = DecisionTimeGBM(QUANTILES, 2, max_iter=15, max_rows=4000, min_samples_leaf=20).fit_many(fleet(), STEP)
    end = min(series[k].index[-1] for k in ("s0", "s1", "s2"))
    reg = registry.RegistryVersion("/models/v1", "v1", {"data_window": {"end": end.isoformat()}}, {},
                                   decision_models={"hpa": model})
    start = end - 12 * STEP
    origins = [start, start, start + STEP, start + 2 * STEP, start + 5 * STEP, start + 6 * STEP, start + 7 * STEP]
    serve, walks, served = DecisionTimeServing(), {}, 0
    for k, origin in enumerate(origins):
        keys = ["s0", "s1", "s2"] + (["late"] if k >= 3 else [])  # a series appears
        past = {s: series[s][series[s].index < origin] for s in keys}
        base = {s: DailyChoiceForecaster(s, model="seasonal_naive_daily").forecast(y, origin, pd.Timedelta("1h"))
                for s, y in past.items()}
        _, hpa = serve.views(reg, HPA, "10s", "1m", base, History(past, STEP), origin, STEP)
        for s in keys:
            walks[s], want = reference(model, walks.get(s), past[s], origin)
            got = hpa[s]
            if want is None:
                assert "day-ahead" in got.model, (s, origin)
                continue
            assert got.model.startswith("decision_time_lightgbm"), got.model
            np.testing.assert_array_equal(got.values[0], want)  # to the bit
            served += 1
    assert served >= 20
