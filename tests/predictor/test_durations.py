"""One set of calendar spans, and stored durations read without pandas' deprecated lowercase "d"."""
import warnings

import numpy as np
import pandas as pd
import pytest

from predictor.decaying_histogram import cdf_quantiles, decaying_cdf
from predictor.durations import DAY, HOUR, WEEK, to_timedelta


@pytest.mark.parametrize("text,expected", [("1d", DAY), ("7d", WEEK), ("2w", 2 * WEEK), ("1d12h", 36 * HOUR),
                                           ("90s", pd.Timedelta(seconds=90)), ("15min", pd.Timedelta(minutes=15)),
                                           ("1D", DAY), (DAY, DAY)])
def test_stored_durations_read_as_before_without_a_deprecation_warning(text, expected):
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # pandas 3 raises Pandas4Warning for pd.Timedelta("1d")
        assert to_timedelta(text) == expected
    assert DAY == pd.Timedelta(hours=24) and WEEK == 7 * DAY


def test_to_timedelta_still_refuses_what_pandas_refuses():
    with pytest.raises(ValueError):
        to_timedelta("tomorrow")


def test_decaying_histogram_halves_a_sample_weight_per_half_life():
    values = np.array([1.0, 2.0])
    # the 2.0 sample is one half-life old: weights 1 and 1/2, so the cumulative weights are 2/3 and 1
    ordered, cumulative = decaying_cdf(values, np.array([0.0, 24.0]), 24.0)
    assert ordered.tolist() == [1.0, 2.0] and cumulative == pytest.approx([2 / 3, 1.0])
    assert cdf_quantiles(ordered, cumulative, np.array([0.5, 0.66, 0.7])).tolist() == [1.0, 1.0, 2.0]
