"""Issue 22, the low items seen from the command line: a one-value series in `train`, absurd scales
in `replay vpa`, prices files with duplicate keys or absurd prices, and messages free of NumPy and
pandas reprs."""
import argparse
import os

import numpy as np
import pandas as pd
import pytest

from tests.conftest import run_cli
from tests.tidewise.test_bad_inputs import history_csv, one_line_error

NUMPY_OR_PANDAS_REPR = ("np.", "days 00:", "Timedelta(", "Timestamp(", "dtype")


# --- train: a series too short to fit any model -----------------------------------------------------

def test_train_refuses_a_one_value_series_from_a_file(tmp_path):
    inp = tmp_path / "one.csv"
    good = pd.read_csv(history_csv(tmp_path / "h.csv"))
    pd.concat([good, pd.DataFrame({"series": ["b"], "timestamp": ["2024-03-01T00:00:00Z"], "value": [1.0]})]).to_csv(
        inp, index=False)
    reg = tmp_path / "models"
    one_line_error(run_cli("train", "--input", str(inp), "--registry", str(reg), "--no-decision-time"), 2,
                   "one.csv", "series 'b' has 1 value(s)", "at least 2")
    assert not reg.exists()  # no version built on it


def test_train_skips_a_short_series_from_prometheus_and_says_so(capsys):
    from predictor.history import History
    from tidewise.commands.train import without_short_series

    idx = pd.date_range("2024-03-01", periods=10, freq="5min", tz="UTC")
    history = History({"a": pd.Series(1.0, index=idx), "new": pd.Series([np.nan] * 9 + [1.0], index=idx)},
                      pd.Timedelta("5min"))
    kept = without_short_series(history, argparse.Namespace(source="prometheus", input=None))
    assert list(kept.series) == ["a"]
    assert "skipped 1 series with fewer than 2 values (e.g. 'new')" in capsys.readouterr().err


# --- replay vpa: the scale check replay hpa already had ----------------------------------------------

@pytest.mark.parametrize("series,scale,needle", [("ns/Deployment/w/c/cpu", 1.1e300, "1,000,000 cores"),
                                                  ("ns/Deployment/w/c/memory", 1e18, "(1 PiB)")])
def test_replay_vpa_refuses_absurd_scales(tmp_path, series, scale, needle):
    inp = tmp_path / "huge.csv"
    frame = pd.read_csv(history_csv(tmp_path / "h.csv", value=lambda i: (2 + np.sin(i / 40)) * scale))
    frame.assign(series=series).to_csv(inp, index=False)
    out = tmp_path / "vpa.csv"
    line = one_line_error(run_cli("replay", "vpa", "--input", str(inp), "--output", str(out)), 2,
                          "huge.csv", f"series {series!r}", needle, "check the units")
    assert not out.exists() and not any(r in line for r in NUMPY_OR_PANDAS_REPR)


def test_one_scale_check_for_both_kinds():
    from autoscaler.logic.hpa import TooManyReplicas
    from contracts.quantity import AbsurdScale, usage_scale_problem

    assert issubclass(TooManyReplicas, AbsurdScale)
    assert usage_scale_problem("cpu", 2048.0) is None
    assert usage_scale_problem("memory", float(24 * 2**40)) is None  # 24 TiB: the largest machines sold
    assert usage_scale_problem(None, 1e12) is None  # any unit: a business metric, replicas
    for resource, value in (("cpu", 3.3e300), ("cpu", float("nan")), ("memory", float("inf")), ("cpu", -2e6),
                            (None, 1e300)):
        assert "check the units" in (usage_scale_problem(resource, value) or "")


# --- prices: duplicate keys, exponent floats, absurd prices ------------------------------------------

PRICES = 'currency: EUR\npeak_hours: "08:00-22:00"\ncpu: {cpu}\nmemory: {{peak: 0.005, offpeak: 0.001}}\n'


@pytest.mark.parametrize("text,needle", [
    (PRICES.format(cpu="{peak: 0.04, offpeak: 0.01}") + "cpu: {peak: 9, offpeak: 9}\n", "cpu: given twice (lines 3 and 5)"),
    (PRICES.format(cpu="{peak: 0.04, offpeak: 0.01, peak: 0.05}"), "peak: given twice"),
    (PRICES.format(cpu="{peak: 1.0e308, offpeak: 0.01}"), "cpu.peak: 1e+308 per core-hour is above 1,000,000"),
    (PRICES.format(cpu="{peak: 2000000, offpeak: 0.01}"), "cpu.peak: 2e+06 per core-hour is above 1,000,000"),
])
def test_prices_refused_with_the_key_named(tmp_path, text, needle):
    from contracts.errors import InputError
    from studies.cost.prices import load_prices

    path = tmp_path / "prices.yaml"
    path.write_text(text)
    with pytest.raises(InputError, match=f"--cost {path}: ") as exc:
        load_prices(str(path))
    assert needle in str(exc.value)


def test_exponent_prices_are_numbers(tmp_path):
    from studies.cost.prices import load_prices

    path = tmp_path / "prices.yaml"
    path.write_text(PRICES.format(cpu="{peak: 4e-2, offpeak: 1.0e-2}"))
    prices = load_prices(str(path))
    assert (prices.cpu_peak, prices.cpu_offpeak, prices.memory_peak) == (0.04, 0.01, 0.005)


def test_duplicate_price_key_from_the_command_line_is_one_line(tmp_path):
    from tests.studies.cost_fixtures import write_inputs

    f = write_inputs(tmp_path)
    with open(f["--cost"], "a") as fh:
        fh.write("cpu: {peak: 400, offpeak: 100}\n")
    out = tmp_path / "cost.html"
    one_line_error(run_cli("report", "--cost", f["--cost"], "--history", f["--history"], "--out", str(out)), 2,
                   "cpu: given twice", "keep one")
    assert not out.exists()


# --- messages: plain numbers and durations, no NumPy or pandas reprs ------------------------------

@pytest.mark.parametrize("command,rows,needle", [
    (["forecast"], "series,timestamp,value\na,1709251,1\na,1709551,2\n", "value 1709251 is outside 1990..2200"),
    (["replay", "hpa"], "series,timestamp,value,per_replica\na,2024-03-01T00:00:00Z,1,1\na,2024-03-01T00:05:00Z,1,2\n",
     "(found [1, 2])"),
    (["replay", "vpa", "--every", "1m"], None, "--every 1m: at least 5m (the history step)"),
])
def test_messages_show_plain_values(tmp_path, command, rows, needle):
    inp = tmp_path / "in.csv"
    if rows is None:
        history_csv(inp)
    else:
        inp.write_text(rows)
    line = one_line_error(run_cli(*command, "--input", str(inp), "--output", str(tmp_path / "o.csv")), 2, needle)
    assert not any(r in line for r in NUMPY_OR_PANDAS_REPR), line


def test_plain():
    from predictor.plain import plain

    assert plain(np.int64(1709251)) == "1709251" and plain(np.float64(0.5)) == "0.5"
    assert plain(pd.Timedelta("5min")) == "5m" and plain(np.timedelta64(2, "h")) == "2h"
    assert plain([np.int64(1), np.float64(2.5)]) == "[1, 2.5]" and plain("a ") == "'a '"
    assert plain(pd.Timestamp("2024-03-01", tz="UTC")) == "2024-03-01T00:00:00+00:00"


def test_backtest_reasons_show_durations_plainly():
    from predictor.models import MODELS
    from predictor.pipeline.selection import Candidate, backtest

    idx = pd.date_range("2024-03-01", periods=3 * 288, freq="5min", tz="UTC")
    y = pd.Series(1 + np.sin(np.arange(len(idx)) / 40), index=idx)
    weekly = Candidate("weekly", MODELS["seasonal_naive_daily"], min_history=pd.Timedelta("14D"))
    *_, errors = backtest(y, idx[-1] + pd.Timedelta("5min"), pd.Timedelta("5min"), (0.5, 0.9), [weekly], folds=1)
    assert errors["weekly"] == "2d of history before 2024-03-03T00:00:00+00:00, needs 2w"
