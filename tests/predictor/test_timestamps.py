"""Every timestamp path is unit-safe: epoch s/ms/µs/ns, ISO with offsets, Parquet in every unit.

pandas 3 parses and stores datetimes in 's', 'ms' or 'us'; these tests feed each representation and
check that what comes out is the right instant, in UTC nanoseconds, on pandas 2 and 3 alike.
"""
import io

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from predictor.errors import InputError
from predictor.features.calendar import seconds_of
from predictor.history import history_from_frame, load_history, parse_timestamps
from predictor.models.base import infer_step
from predictor.sources.prometheus import _to_long
from predictor.sources.synthetic import generate_cluster
from predictor.timestamps import epoch_ns, epoch_to_utc, epoch_unit, grid, to_utc_ns

T0 = pd.Timestamp("2024-03-01T00:00:00Z")
T0_S = 1709251200  # T0 in epoch seconds
STEP = pd.Timedelta("5min")
NS_UTC = "datetime64[ns, UTC]"


def _grid(n: int = 6, unit: str = "us") -> pd.DatetimeIndex:
    """A 5-minute UTC grid from T0 stored at `unit` resolution (what pandas 3 produces)."""
    return pd.DatetimeIndex(T0 + STEP * np.arange(n)).as_unit(unit)


@pytest.mark.parametrize("unit,scale", [("s", 1), ("ms", 10**3), ("us", 10**6), ("ns", 10**9)])
def test_epoch_numbers_of_every_unit(unit, scale):
    stamps = (T0_S + 300 * np.arange(4, dtype=np.int64)) * scale
    assert epoch_unit(stamps) == unit
    out = parse_timestamps(pd.Series(stamps), "f.csv")
    assert str(out.dtype) == NS_UTC
    assert list(out) == list(T0 + STEP * np.arange(4))
    # the same numbers as CSV text (how an epoch column arrives from read_csv of mixed rows)
    text = parse_timestamps(pd.Series([str(v) for v in stamps], dtype=object), "f.csv")
    assert list(text) == list(out)


def test_float_epoch_seconds_keep_milliseconds():
    """Prometheus' float seconds: 1709251200.123 must not come out as ...122999907 ns."""
    out = epoch_to_utc(np.array([T0_S + 0.123, T0_S + 300.5]), unit="s")
    assert out[0] == T0 + pd.Timedelta("123ms") and out[1] == T0 + pd.Timedelta("300.5s")
    assert str(out.dtype) == NS_UTC


def test_iso_with_offsets_naive_and_mixed():
    raw = pd.Series(["2024-03-01T02:00:00+02:00", "2024-03-01T00:05:00Z", "2024-03-01 00:10:00",
                     "2024-02-29T19:15:00-05:00"])
    out = parse_timestamps(raw, "f.csv")
    assert str(out.dtype) == NS_UTC
    assert list(out) == list(T0 + STEP * np.arange(4))


@pytest.mark.parametrize("bad,row", [
    (pd.Series(["2024-03-01T00:00:00Z", "2300-01-01T00:00:00Z"]), "line 3"),  # year 2300
    (pd.Series([T0_S, 1_000_000], dtype="int64"), "line 3"),  # 1970-01-12 in seconds
    (pd.Series([str(T0_S), "2300-01-01"], dtype=object), "line 3"),
])
def test_timestamps_outside_1990_2200_are_refused(bad, row):
    with pytest.raises(InputError) as e:
        parse_timestamps(bad, "h.csv")
    msg = str(e.value)
    assert msg.startswith(f"h.csv {row}: column 'timestamp'") and "outside 1990..2200" in msg
    assert "\n" not in msg


def test_mixed_epoch_units_in_one_column_fail_closed():
    """One millisecond stamp among seconds makes the column milliseconds: the seconds then fall in
    1970 and are refused, rather than silently mixing two clocks."""
    with pytest.raises(InputError, match=r"h.csv line 2: column 'timestamp' value .*outside 1990..2200.*read as epoch ms"):
        parse_timestamps(pd.Series([T0_S, T0_S * 1000], dtype="int64"), "h.csv")


def _parquet(path, unit: str, tz: str | None, epoch: bool = False) -> pd.Timestamp:
    """A long Parquet file whose timestamp column is stored in `unit` (or as epoch integers)."""
    idx = T0 + STEP * np.arange(12)
    ns = epoch_ns(pd.DatetimeIndex(idx))
    if epoch:
        col = pa.array(ns // {"s": 10**9, "ms": 10**6, "us": 10**3, "ns": 1}[unit], pa.int64())
    else:
        values = ns // {"s": 10**9, "ms": 10**6, "us": 10**3, "ns": 1}[unit]
        col = pa.array(values, pa.timestamp(unit, tz=tz))
    table = pa.table({"series": ["a"] * 12, "timestamp": col, "value": np.arange(12, dtype="float64")})
    pq.write_table(table, path)
    return idx[0]


@pytest.mark.parametrize("unit", ["s", "ms", "us", "ns"])
@pytest.mark.parametrize("tz,epoch", [(None, False), ("UTC", False), ("Europe/Berlin", False), (None, True)])
def test_parquet_in_every_unit(tmp_path, unit, tz, epoch):
    path = str(tmp_path / f"h-{unit}.parquet")
    first = _parquet(path, unit, tz, epoch)
    hist = load_history(path, STEP)
    y = hist.series["a"]
    assert y.index[0] == first and len(y) == 12
    assert str(y.index.dtype) == NS_UTC
    assert y.to_numpy().tolist() == list(range(12))
    assert hist.end == first + 11 * STEP


@pytest.mark.parametrize("unit", ["s", "ms", "us"])
def test_frames_of_coarse_units_regularise_onto_the_right_grid(unit):
    frame = pd.DataFrame({"series": "a", "timestamp": _grid(6, unit), "value": np.arange(6.0)})
    y = history_from_frame(frame, STEP).series["a"]
    assert list(y.index) == list(T0 + STEP * np.arange(6))
    assert str(y.index.dtype) == NS_UTC


@pytest.mark.parametrize("unit", ["s", "ms", "us", "ns"])
def test_integer_readers_are_unit_aware(unit):
    idx = _grid(6, unit)
    assert (epoch_ns(idx) == T0.value + STEP.value * np.arange(6)).all()
    assert seconds_of(idx)[0] == T0_S
    assert infer_step(idx) == STEP
    assert str(to_utc_ns(idx).dtype) == NS_UTC


def test_prometheus_float_seconds_become_real_dates():
    df = pd.DataFrame({"namespace": "ns", "kind": "Deployment", "workload": "w", "container": "c",
                       "ts": [T0_S + 0.0, T0_S + 300.0], "value": [1.0, 2.0]})
    long = _to_long(df, "cpu")
    assert str(long["timestamp"].dtype) == NS_UTC
    assert list(long["timestamp"]) == [T0, T0 + STEP]


def test_synthetic_openmetrics_has_real_increasing_seconds():
    """promtool refuses the backfill ("duplicate sample") when timestamps repeat: they must be epoch
    seconds of the cluster's own window, strictly increasing within each series."""
    end = pd.Timestamp("2024-03-08T00:00:00Z")
    cluster = generate_cluster(seed=3, workloads=1, namespaces=1, nodes=1, days=1, step="5m", end=end, gaps=False)
    buf = io.StringIO()
    cluster.write_openmetrics(buf, pd.Timedelta("2m"))
    first_series = [ln for ln in buf.getvalue().splitlines() if ln.startswith("container_cpu_usage_seconds_total")]
    labels = first_series[0].rsplit(" ", 2)[0]
    stamps = np.array([int(ln.rsplit(" ", 1)[1]) for ln in first_series if ln.startswith(labels + " ")])
    assert stamps[0] == int((end - pd.Timedelta("1D")).timestamp())
    assert stamps[-1] == int(end.timestamp()) - 120
    assert (np.diff(stamps) == 120).all()
    hist = cluster.history(STEP)
    assert hist["timestamp"].min() == end - pd.Timedelta("1D")


@pytest.mark.parametrize("start", [pd.Timestamp("2024-03-31 00:05", tz="UTC"), pd.Timestamp("2024-03-31 00:05"),
                                   pd.Timestamp("2024-03-31T00:05:00Z").as_unit("s"),
                                   pd.Timestamp("2024-03-31 00:05", tz="Europe/Paris")])
@pytest.mark.parametrize("step", [pd.Timedelta("5min"), pd.Timedelta("1h")])
def test_grid_is_date_range_shared_per_grid(start, step):
    got, want = grid(start, 288, step), pd.date_range(start, periods=288, freq=step)
    assert got.equals(want) and got.dtype == want.dtype and got.freq == want.freq
    # UTC and naive starts share one index object per grid (forecasts kept between serving runs)
    assert (grid(start, 288, step) is got) == (start.tz is None or str(start.tz) == "UTC")
    assert grid(start + step, 288, step)[0] == start + step and grid(start, 12, step).equals(want[:12])
