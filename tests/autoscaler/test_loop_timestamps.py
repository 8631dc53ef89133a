"""The serving loop's cached-forecast arithmetic is unit-safe (issue 10).

pandas 3 builds a forecast index in the unit of its origin: microseconds when the origin comes from
`Timestamp.now()`, seconds from `--now 2024-...`. The loop compares those indexes with
`Timestamp.value` (always nanoseconds); reading `.asi8` made every cached forecast look 10^3 times
too far away, so the cache never served and stale checks saw 1970.
"""
import numpy as np
import pandas as pd
import pytest

from autoscaler.routines.forecast_cache import cache_state, covers
from predictor.types import Forecast

STEP = pd.Timedelta("5min")
MADE = pd.Timestamp("2024-03-01T12:00:00Z")


def _forecast(unit: str) -> Forecast:
    index = pd.date_range(MADE, periods=48, freq=STEP).as_unit(unit)
    return Forecast("s", index, (0.5, 0.99), np.tile([1.0, 2.0], (48, 1)), "m")


@pytest.mark.parametrize("unit", ["s", "ms", "us", "ns"])
def test_a_cached_forecast_of_any_unit_serves_the_next_runs(unit):
    fc = _forecast(unit)
    origin = (MADE + 3 * STEP).as_unit("us")  # a later run's clock, as pandas 3's Timestamp.now() gives it
    y = pd.Series(1.5, index=pd.date_range(MADE - 12 * STEP, origin - STEP, freq=STEP).as_unit("ns"))
    assert covers(fc, origin, need_steps=12, step=STEP)
    assert not covers(fc, MADE + 40 * STEP, need_steps=12, step=STEP)  # too few steps left
    assert cache_state(fc, y, origin, 12, STEP, pd.Timedelta("1h")) == "fresh"
    assert cache_state(fc, y, origin, 12, STEP, pd.Timedelta("10min")) == "aged"
    y.iloc[-1] = 5.0  # above the top quantile since the forecast was made
    assert cache_state(fc, y, origin, 12, STEP, pd.Timedelta("1h")) == "surprised"
