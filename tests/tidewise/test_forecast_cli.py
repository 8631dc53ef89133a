"""The `tidewise forecast` contract, run as a real process, on synthetic and real traces."""
import os

import numpy as np
import pandas as pd
import pytest

from tests.conftest import run_cli, run_main

QCOLS = ["q0.5", "q0.9", "q0.95", "q0.99"]


def tidal_csv(path, days=4, series=("a", "b"), epoch=False):
    ts = pd.date_range("2024-03-01", periods=days * 288, freq="5min", tz="UTC")
    rows = []
    for i, s in enumerate(series):
        v = 2 + np.sin(2 * np.pi * (ts.hour * 60 + ts.minute) / 1440 + i) + 0.05 * np.random.default_rng(i).random(len(ts))
        stamp = ts.as_unit("s").asi8 if epoch else ts.strftime("%Y-%m-%dT%H:%M:%SZ")  # asi8 is µs on pandas 3
        rows.append(pd.DataFrame({"series": s, "timestamp": stamp, "value": v, "cluster": "c1"}))
    pd.concat(rows).to_csv(path, index=False)
    return ts


def check_contract(out: str, series: list[str], steps: int, first: pd.Timestamp, quantile_cols=QCOLS):
    f = pd.read_csv(out)
    assert list(f.columns) == ["series", "timestamp", *quantile_cols, "model"]
    assert sorted(f["series"].unique()) == sorted(series)
    assert (f.groupby("series").size() == steps).all()
    ts = pd.to_datetime(f["timestamp"], utc=True)
    assert ts.min() == first
    assert f["timestamp"].str.endswith("Z").all()
    q = f[quantile_cols].to_numpy()
    assert np.isfinite(q).all()
    assert (np.diff(q, axis=1) >= -1e-12).all(), "quantiles cross"
    return f


def test_contract_on_synthetic_tide(tmp_path):
    inp, out = tmp_path / "h.csv", tmp_path / "f.csv"
    ts = tidal_csv(inp, epoch=True)
    r = run_main("forecast", "--input", str(inp), "--output", str(out), "--horizon", "24h", "--step", "5m",
                 "--quantiles", "0.5,0.9,0.95,0.99")
    assert r.returncode == 0, r.stderr
    f = check_contract(str(out), ["a", "b"], 288, ts[-1] + pd.Timedelta("5min"))
    # a clean daily sine: the forecast median must follow it (seasonal, not flat)
    a = f[f.series == "a"]["q0.5"].to_numpy()
    assert a.max() - a.min() > 1.5


def test_other_quantiles_horizon_and_step(tmp_path):
    inp, out = tmp_path / "h.csv", tmp_path / "f.csv"
    ts = tidal_csv(inp, days=3)
    r = run_main("forecast", "--input", str(inp), "--output", str(out), "--horizon", "6h", "--step", "15m",
                 "--quantiles", "0.1,0.5,0.8")
    assert r.returncode == 0, r.stderr
    check_contract(str(out), ["a", "b"], 24, ts[-1].floor("15min") + pd.Timedelta("15min"), ["q0.1", "q0.5", "q0.8"])


@pytest.mark.parametrize("name,content,args,message", [
    ("no-value", "series,timestamp,v\na,2024-01-01T00:00:00Z,1\n", [], "no column 'value'"),
    ("bad-ts", "series,timestamp,value\na,2024-01-01T00:00:00Z,1\na,not-a-time,1\n", [], "line 3: timestamp 'not-a-time' does not parse"),
    ("dup-ts", "series,timestamp,value\na,2024-01-01T00:00:00Z,1\na,2024-01-01T00:00:00Z,5\n", [], "duplicate timestamp"),
    ("negative", "series,timestamp,value\na,2024-01-01T00:00:00Z,1\na,2024-01-01T00:05:00Z,-2\n", [], "line 3 (series 'a'): value -2 is negative"),
    ("empty", "", [], "is empty"),
    ("horizon", "series,timestamp,value\na,2024-01-01T00:00:00Z,1\n", ["--horizon", "tomorrow"], "--horizon 'tomorrow' does not parse"),
    ("quantiles", "series,timestamp,value\na,2024-01-01T00:00:00Z,1\n", ["--quantiles", "0.5,1.5"], "--quantiles"),
])
def test_bad_input_clear_error_and_no_output(tmp_path, name, content, args, message):
    inp = tmp_path / f"{name}.csv"
    inp.write_text(content)
    out = tmp_path / "out" / "f.csv"
    out.parent.mkdir()  # a missing output folder is an error of its own (test_bad_inputs)
    r = run_cli("forecast", "--input", str(inp), "--output", str(out), *args)
    assert r.returncode == 2
    assert message in r.stderr
    assert "Traceback" not in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1
    assert not out.exists()
    assert not (out.parent.exists() and os.listdir(out.parent))


def _write_history(path, kind: str, unit: str) -> pd.Timestamp:
    """Two days of a 5-minute daily tide with timestamps as `kind` (epoch CSV, ISO with offsets,
    Parquet naive or UTC) in `unit`; returns the expected forecast origin."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    ts = pd.date_range("2024-03-01", periods=2 * 288, freq="5min", tz="UTC")
    ns = (ts - pd.Timestamp("1970-01-01", tz="UTC")) // pd.Timedelta("1ns")  # epoch ns on any pandas
    per = {"s": 10**9, "ms": 10**6, "us": 10**3, "ns": 1}[unit]
    value = 2 + np.sin(2 * np.pi * np.arange(len(ts)) / 288)
    if kind == "epoch-csv":
        pd.DataFrame({"series": "a", "timestamp": ns // per, "value": value}).to_csv(path, index=False)
    elif kind == "iso-offsets-csv":  # the same instants written in three offsets, as a mixed export would
        local = [t.tz_convert(["UTC", "Europe/Berlin", "America/New_York"][i % 3]).isoformat() for i, t in enumerate(ts)]
        pd.DataFrame({"series": "a", "timestamp": local, "value": value}).to_csv(path, index=False)
    else:
        col = pa.array(np.asarray(ns // per), pa.timestamp(unit, tz="UTC" if kind == "parquet-utc" else None))
        pq.write_table(pa.table({"series": ["a"] * len(ts), "timestamp": col, "value": value}), path)
    return ts[-1] + pd.Timedelta("5min")


@pytest.mark.parametrize("kind,unit", [
    *[("epoch-csv", u) for u in ("s", "ms", "us", "ns")], ("iso-offsets-csv", "s"),
    *[(k, u) for k in ("parquet-naive", "parquet-utc") for u in ("s", "ms", "us", "ns")],
])
def test_every_timestamp_unit_forecasts_from_the_right_date(tmp_path, kind, unit):
    """pandas 3 keeps s/ms/µs resolutions: each must give the real origin, not 1970 (issue 10)."""
    inp = tmp_path / ("h.parquet" if kind.startswith("parquet") else "h.csv")
    out = tmp_path / "f.csv"
    origin = _write_history(str(inp), kind, unit)
    r = run_main("forecast", "--input", str(inp), "--output", str(out), "--horizon", "1h", "--step", "5m",
                 "--model", "seasonal_naive_daily", "--quantiles", "0.5,0.9,0.95,0.99")
    assert r.returncode == 0, r.stderr
    f = check_contract(str(out), ["a"], 12, origin)
    # the daily tide continues: the first forecast step repeats the value one day earlier
    assert abs(f["q0.5"].iloc[0] - 2.0) < 1e-6


def test_timestamps_outside_1990_2200_exit_2(tmp_path):
    inp, out = tmp_path / "h.csv", tmp_path / "f.csv"
    inp.write_text("series,timestamp,value\na,2300-01-01T00:00:00Z,1\na,2300-01-01T00:05:00Z,1\n")
    r = run_cli("forecast", "--input", str(inp), "--output", str(out))
    assert r.returncode == 2
    assert f"{inp} line 2: column 'timestamp' value '2300-01-01T00:00:00Z' is outside 1990..2200" in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1 and "Traceback" not in r.stderr
    assert not out.exists()


def test_existing_output_kept_when_input_is_bad(tmp_path):
    inp = tmp_path / "bad.csv"
    inp.write_text("series,timestamp,value\na,2024-01-01T00:00:00Z,-1\n")
    out = tmp_path / "f.csv"
    out.write_text("last good forecast\n")
    assert run_main("forecast", "--input", str(inp), "--output", str(out)).returncode == 2
    assert out.read_text() == "last good forecast\n"


def test_real_traces_with_gaps_signed_values_and_ragged_ends(tmp_path, shared_data):
    """NAB RDS CPU (tidal), Donut cpu4 (standardised, negative) and NASA-1995 requests (outage gap)."""
    nab = pd.read_csv(os.path.join(shared_data, "nab/realAWSCloudwatch/rds_cpu_utilization_cc0c53.csv"))
    kpi = pd.read_csv(os.path.join(shared_data, "aiops_kpi_samples/cpu4.csv.gz"))
    nasa = pd.read_csv(os.path.join(shared_data, "web_request_rates/nasa_http_1995_requests_per_minute.csv.gz"))
    # shift all three onto one calendar so that they share the forecast origin
    end = pd.Timestamp("2024-08-01", tz="UTC")
    parts = []
    for name, ts, v in [("nab/rds_cc0c53", pd.to_datetime(nab["timestamp"]), nab["value"]),
                        ("aiops/cpu4", pd.to_datetime(kpi["timestamp"], unit="s"), kpi["value"]),
                        ("web/nasa95", pd.to_datetime(nasa.iloc[:, 0]), nasa.iloc[:, 1])]:
        ts = ts.dt.tz_localize(None) if ts.dt.tz is not None else ts
        keep = ts >= ts.max() - pd.Timedelta("14D")
        shifted = ts[keep] - ts.max() + end.tz_localize(None)
        parts.append(pd.DataFrame({"series": name, "timestamp": shifted.dt.strftime("%Y-%m-%dT%H:%M:%SZ"), "value": v[keep]}))
    inp, out = tmp_path / "real.csv", tmp_path / "f.csv"
    pd.concat(parts).dropna().to_csv(inp, index=False)
    r = run_main("forecast", "--input", str(inp), "--output", str(out))
    assert r.returncode == 0, r.stderr
    check_contract(str(out), ["aiops/cpu4", "nab/rds_cc0c53", "web/nasa95"], 288, end + pd.Timedelta("5min"))


def test_help_and_version():
    r = run_cli("--help")
    assert r.returncode == 0 and "forecast" in r.stdout and "demo" in r.stdout and "fetch" in r.stdout
    r = run_cli("forecast", "--help")
    assert "series,timestamp,q<quantile>" in r.stdout and "--registry" in r.stdout
    r = run_cli("--version")
    assert r.returncode == 0 and r.stdout.startswith("tidewise ")
