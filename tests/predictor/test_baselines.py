"""The seasonal naive model's gap filling: a season at a time, equal to the value-by-value rule."""
import numpy as np
import pandas as pd
import pytest

from predictor.durations import to_timedelta
from predictor.history import fill_short_gaps
from predictor.models.baselines import SeasonalNaive

STEP = pd.Timedelta("5min")


def _reference_last_season(y: pd.Series, m: int) -> np.ndarray:
    """The rule as it read before it was vectorised: each missing value takes the (filled) value one
    season earlier, one value at a time, then the median."""
    filled = fill_short_gaps(y, STEP).to_numpy(copy=True)
    for k in range(m, len(filled)):
        if np.isnan(filled[k]):
            filled[k] = filled[k - m]
    filled = np.where(np.isnan(filled), float(np.nanmedian(filled)), filled)
    return filled[-m:]


@pytest.mark.parametrize("season", ["1d", "7d"])
def test_gaps_filled_from_the_season_before_as_value_by_value(season):
    rng = np.random.default_rng(3)
    idx = pd.date_range("2024-07-01", periods=16 * 288 + 37, freq=STEP, tz="UTC")  # a partial last season
    y = pd.Series(1 + rng.random(len(idx)), index=idx)
    m = int(to_timedelta(season) / STEP)
    v = y.to_numpy(copy=True)
    v[5:40] = np.nan  # inside the first season: stays NaN until the median
    v[m + 10: 3 * m + 20] = np.nan  # over two whole seasons: filled from a fill
    v[-30:] = np.nan  # in the partial last block
    v[len(v) // 2: len(v) // 2 + 20] = np.nan  # over an hour: a long gap
    y = pd.Series(v, index=idx)
    model = SeasonalNaive(season=season).fit(y)
    expected = _reference_last_season(y, m)
    assert np.isfinite(expected).all()
    np.testing.assert_array_equal(model.last_season_, expected)
