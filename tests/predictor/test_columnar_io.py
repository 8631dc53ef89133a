"""The columnar forecast writer and history reader (issue 14): same bytes and same History as the
pandas path they replace, and the pandas path still runs where something must be reported."""
import gzip
import re

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from predictor.errors import InputError
from predictor.forecast_output import float_text, write_forecasts
from predictor.history import _signed_series, load_history, read_long_file, regularize, validate_long
from predictor.sources.columnar import load_columnar
from predictor.types import Forecast

STEP = pd.Timedelta("5min")


def test_float_text_is_python_repr():
    rng = np.random.default_rng(1)
    v = np.concatenate([rng.random(20000) * 10.0 ** rng.integers(-8, 20, 20000), -rng.random(500) * 1e12,
                        np.round(rng.random(500) * 1e12),
                        [0.0, -0.0, 1e-4, 9.999999999999999e-5, 1e15, 1e16, 9999999999999998.0, 123.0, 1e22, 5e-324,
                         1.7976931348623157e308, 0.1, 1 / 3, 2.0 ** 53, 77668311434.2298, 1.5e-7, np.nan]])
    assert float_text(v).to_pylist() == [None if np.isnan(x) else repr(float(x)) for x in v]


def _forecasts() -> list[Forecast]:
    rng = np.random.default_rng(2)
    idx = pd.date_range("2024-09-02", periods=12, freq="5min", tz="UTC")
    out = []
    for i, name in enumerate(["ns/Deployment/a/app/cpu", 'odd,"id"', "ns/Deployment/b/app/memory"]):
        values = np.sort(rng.random((12, 4)) * 10.0 ** (9 * (i == 2)), axis=1)
        out.append(Forecast(name, idx + i * STEP, (0.5, 0.9, 0.95, 0.99), values, f"model{i}"))
    out[0].values[:3] = [[1e-05, 2.0, -0.0, 1.5e-07], [1e15, 2.5e16, 123456789.0, 0.0], [np.nan, 1.0, 3.0, 4.0]]
    return out


def _pandas_frame(fcs: list[Forecast]) -> pd.DataFrame:
    return pd.concat([f.to_frame() for f in fcs], ignore_index=True)


@pytest.mark.parametrize("suffix", [".csv", ".csv.gz"])
def test_forecast_csv_is_byte_for_byte_the_pandas_file(tmp_path, suffix):
    fcs = _forecasts()
    old, new = tmp_path / f"old{suffix}", tmp_path / f"new{suffix}"
    _pandas_frame(fcs).to_csv(old, index=False, date_format="%Y-%m-%dT%H:%M:%SZ",
                              compression="gzip" if suffix.endswith(".gz") else None)
    write_forecasts(fcs, str(new))
    read = gzip.open if suffix.endswith(".gz") else open
    with read(old, "rb") as a, read(new, "rb") as b:
        assert a.read() == b.read()


def test_forecast_parquet_reads_back_as_the_frame(tmp_path):
    fcs = _forecasts()
    write_forecasts(fcs, str(tmp_path / "f.parquet"))
    got = pd.read_parquet(tmp_path / "f.parquet")
    want = _pandas_frame(fcs)
    assert list(got.columns) == list(want.columns)
    assert (got["timestamp"] == want["timestamp"]).all()
    np.testing.assert_array_equal(got[["q0.5", "q0.9", "q0.95", "q0.99"]].to_numpy(),
                                  want[["q0.5", "q0.9", "q0.95", "q0.99"]].to_numpy())
    assert got["series"].tolist() == want["series"].tolist() and got["model"].tolist() == want["model"].tolist()


def _long(stamps, series=(" a", "b,c", "d")) -> pd.DataFrame:
    """Shuffled rows of three series with a gap (empty values) and missing rows, plus a label."""
    rng = np.random.default_rng(0)
    parts = []
    for i, s in enumerate(series):
        f = pd.DataFrame({"series": s, "timestamp": stamps, "value": 2 + rng.random(len(stamps)), "cluster": f"c{i}"})
        f.loc[100:130, "value"] = np.nan
        parts.append(f.drop(index=range(300, 340)))
    return pd.concat(parts).sample(frac=1, random_state=1)


def _pandas_history(path: str, step: pd.Timedelta):
    frame = validate_long(read_long_file(path), path, parquet=path.endswith(".parquet"))
    hist = regularize(frame, step)
    hist.signed = _signed_series(frame)
    return hist


def _same_history(a, b) -> None:
    assert list(a.series) == list(b.series)
    for k in a.series:
        pd.testing.assert_series_equal(a.series[k], b.series[k])
    assert {k: g.gaps for k, g in a.gaps.items()} == {k: g.gaps for k, g in b.gaps.items()}
    assert a.signed == b.signed
    pd.testing.assert_frame_equal(a.labels, b.labels, check_dtype=False)


TS = pd.date_range("2024-03-01", periods=3 * 288, freq="5min", tz="UTC")
NS = np.asarray((TS - pd.Timestamp("1970-01-01", tz="UTC")) // pd.Timedelta("1ns"))


@pytest.mark.parametrize("name,stamps", [
    ("iso.csv", TS.strftime("%Y-%m-%dT%H:%M:%SZ")),
    ("iso.csv.gz", TS.strftime("%Y-%m-%dT%H:%M:%SZ")),
    ("offsets.csv", [t.tz_convert(["UTC", "Europe/Berlin", "America/New_York"][i % 3]).isoformat()
                     for i, t in enumerate(TS)]),
    ("epoch-ms.csv", NS // 10**6),
    ("epoch-float.csv", NS / 1e9 + 0.5),
    ("naive-us.parquet", pa.array(NS // 1000, pa.timestamp("us"))),
    ("utc-s.parquet", pa.array(NS // 10**9, pa.timestamp("s", tz="UTC"))),
])
@pytest.mark.parametrize("step", ["5min", "15min"])
def test_fast_reader_gives_the_pandas_history(tmp_path, name, stamps, step):
    path = str(tmp_path / name)
    if name.endswith(".parquet"):
        f = _long(np.arange(len(TS)))
        table = pa.table({"series": f["series"].tolist(), "timestamp": stamps.take(pa.array(f["timestamp"].to_numpy())),
                          "value": f["value"].to_numpy(), "cluster": f["cluster"].tolist()})
        pq.write_table(table, path)
    else:
        _long(stamps).to_csv(path, index=False)
    fast = load_columnar(path, pd.Timedelta(step))
    assert fast is not None, "a clean file must take the fast path"
    _same_history(_pandas_history(path, pd.Timedelta(step)), fast)


@pytest.mark.parametrize("body,message", [
    ("a,2024-01-01T00:00:00Z,1\na,2024-01-01T00:05:00Z,-2\n", "line 3 (series 'a'): value -2 is negative"),
    ("a,2024-01-01T00:00:00Z,1\na,2024-01-01T00:00:00Z,5\n", "line 2 (series 'a'): duplicate timestamp"),
    ("a,2024-01-01T00:00:00Z,1\na,not-a-time,1\n", "line 3: timestamp 'not-a-time' does not parse"),
    ("a,2024-01-01T00:00:00Z,1\na,2024-01-01T00:05:00Z,inf\n", "line 3: value 'inf' is not a finite number"),
    ("a,2024-01-01T00:00:00Z,1\n,2024-01-01T00:05:00Z,1\n", "line 3: empty series id"),
])
def test_what_must_be_reported_goes_through_the_full_path(tmp_path, body, message):
    path = tmp_path / "h.csv"
    path.write_text("series,timestamp,value\n" + body)
    assert load_columnar(str(path), STEP) is None
    with pytest.raises(InputError, match=re.escape(message)):
        load_history(str(path), STEP)


def test_signed_series_kept_when_negatives_are_allowed(tmp_path):
    path = str(tmp_path / "h.csv")
    f = _long(TS.strftime("%Y-%m-%dT%H:%M:%SZ"))
    f.loc[f["series"] == "d", "value"] -= 5
    f.to_csv(path, index=False)
    fast = load_columnar(path, STEP, allow_negative=True)
    assert fast is not None and fast.signed == ["d"]
    frame = validate_long(read_long_file(path), path, allow_negative=True)
    assert fast.signed == _signed_series(frame)
