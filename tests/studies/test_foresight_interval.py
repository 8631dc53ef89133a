"""The foresight-at-its-own-interval benchmark (benchmarks/foresight_interval.py) that BENCHMARKS.md's
"Deciding more often" table quotes: its hourly foresight is the reference scorer's, a finer interval
never asks for more, and a bad point exits 2 in one line."""
import numpy as np
import pandas as pd

from tests.conftest import needs_shared_eval


def usage() -> pd.Series:
    idx = pd.date_range("2026-01-01", periods=3 * 288, freq="5min")
    rng = np.random.default_rng(3)
    tide = 2 + np.sin(2 * np.pi * np.arange(len(idx)) / 288)
    return pd.Series(tide + rng.gamma(2.0, 0.2, len(idx)), index=idx)


@needs_shared_eval
def test_hourly_foresight_is_the_scorers_and_a_finer_interval_never_asks_more():
    from benchmarks.foresight_interval import foresight
    from benchmarks.tidal import scorer

    use = usage()
    for v in (0.0, 0.05):
        hourly = foresight(use, pd.Timedelta("1h"), v)
        pd.testing.assert_series_equal(hourly, scorer().vpa_foresight(use, 24, v), check_names=False)
    hourly, half = foresight(use, pd.Timedelta("1h"), 0.0), foresight(use, pd.Timedelta("30m"), 0.0)
    assert (half <= hourly).all() and (half < hourly).mean() > 0.3
    assert (half >= use).all()  # at violation 0 foresight never lets usage pass


@needs_shared_eval
def test_a_malformed_point_exits_2_in_one_line(capsys):
    from benchmarks.foresight_interval import main

    assert main(["--point", "30x", "0.38", "0.05"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("--point") and "\n" not in err and "30m" in err
