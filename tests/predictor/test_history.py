import numpy as np
import pandas as pd
import pytest

from predictor.durations import format_duration, parse_duration
from predictor.errors import InputError
from predictor.history import fill_short_gaps, load_history, validate_long

STEP = pd.Timedelta("5m")


def write(tmp_path, text, name="h.csv"):
    p = tmp_path / name
    p.write_text(text)
    return str(p)


def test_parse_duration_forms():
    assert parse_duration("24h") == pd.Timedelta("1D")
    assert parse_duration("1h30m") == pd.Timedelta("90min")
    assert parse_duration("2w") == pd.Timedelta("14D")
    assert format_duration(pd.Timedelta("5min")) == "5m"
    for bad in ("", "24", "h", "24x", "0m", "-5m", "5 m m"):
        with pytest.raises(InputError, match="does not parse|longer than zero"):
            parse_duration(bad, what="--horizon")


def test_missing_value_column_names_file_and_fix(tmp_path):
    p = write(tmp_path, "series,timestamp,val\na,2024-01-01T00:00:00Z,1\n")
    with pytest.raises(InputError) as e:
        load_history(p, STEP)
    assert "'value'" in str(e.value) and p in str(e.value) and "series,timestamp,value" in str(e.value)


def test_unparsable_timestamp_names_line(tmp_path):
    p = write(tmp_path, "series,timestamp,value\na,2024-01-01T00:00:00Z,1\na,yesterday,2\n")
    with pytest.raises(InputError, match=r"line 3: timestamp 'yesterday' does not parse"):
        load_history(p, STEP)


def test_conflicting_duplicates_rejected_identical_dropped(tmp_path):
    p = write(tmp_path, "series,timestamp,value\na,2024-01-01T00:00:00Z,1\na,2024-01-01T00:00:00Z,2\n")
    with pytest.raises(InputError, match="line 2 .*duplicate timestamp 2024-01-01T00:00:00\\+00:00"):
        load_history(p, STEP)
    ok = write(tmp_path, "series,timestamp,value\na,2024-01-01T00:00:00Z,1\na,2024-01-01T00:00:00Z,1\n"
               "a,2024-01-01T00:05:00Z,3\n", "ok.csv")
    h = load_history(ok, STEP)
    assert h.series["a"].tolist() == [1.0, 3.0]
    assert load_history(p, STEP, duplicates="mean").series["a"].tolist() == [1.5]


def test_negative_value_rejected_with_row(tmp_path):
    p = write(tmp_path, "series,timestamp,value\na,2024-01-01T00:00:00Z,1\na,2024-01-01T00:05:00Z,-3\n")
    with pytest.raises(InputError, match=r"line 3 \(series 'a'\): value -3 is negative"):
        load_history(p, STEP)
    assert load_history(p, STEP, allow_negative=True).series["a"].tolist() == [1.0, -3.0]


def test_signed_series_accepted_but_stray_negative_in_usage_is_not():
    ts = pd.date_range("2024-01-01", periods=400, freq="5min", tz="UTC")
    rng = np.random.default_rng(0)
    signed = pd.DataFrame({"series": "kpi", "timestamp": ts, "value": rng.normal(0, 1, 400)})
    out = validate_long(signed)
    assert (out["value"] < 0).sum() > 100
    usage = pd.DataFrame({"series": "cpu", "timestamp": ts, "value": np.r_[np.ones(399), -0.1]})
    with pytest.raises(InputError, match="negative"):
        validate_long(pd.concat([signed, usage]))


def test_non_finite_rejected_and_empty_cell_is_a_gap(tmp_path):
    p = write(tmp_path, "series,timestamp,value\na,2024-01-01T00:00:00Z,1\na,2024-01-01T00:05:00Z,inf\n")
    with pytest.raises(InputError, match=r"line 3: value 'inf' is not a finite number"):
        load_history(p, STEP)
    p = write(tmp_path, "series,timestamp,value\na,2024-01-01T00:00:00Z,1\na,2024-01-01T00:05:00Z,\n"
              "a,2024-01-01T00:10:00Z,3\n", "gap.csv")
    s = load_history(p, STEP).series["a"]
    assert len(s) == 3 and np.isnan(s.iloc[1])


def test_empty_file_and_header_only(tmp_path):
    with pytest.raises(InputError, match="is empty"):
        load_history(write(tmp_path, ""), STEP)
    with pytest.raises(InputError, match="no rows"):
        load_history(write(tmp_path, "series,timestamp,value\n", "h2.csv"), STEP)


def test_epoch_seconds_unsorted_input_resampled_to_step_with_gaps(tmp_path):
    t0 = 1_700_000_000 - 1_700_000_000 % 300
    rows = [(t0 + 60 * i, float(i)) for i in range(30) if not 10 <= i < 25]
    rows.reverse()
    p = write(tmp_path, "series,timestamp,value,team\n" + "".join(f"a,{t},{v},x\n" for t, v in rows))
    h = load_history(p, STEP)
    s = h.series["a"]
    assert s.index.freq == STEP or (s.index[1] - s.index[0]) == STEP
    assert s.index[0] == pd.Timestamp(t0, unit="s", tz="UTC")
    assert s.iloc[0] == pytest.approx(2.0)  # mean of minutes 0..4
    assert s.iloc[2:5].isna().all() and s.iloc[5] == pytest.approx(27.0)  # minutes 10..24: 3 empty buckets
    assert h.gaps["a"].missing_steps == 3
    assert h.labels is not None and h.labels.loc["a", "team"] == "x"


def test_parquet_input(tmp_path):
    ts = pd.date_range("2024-01-01", periods=12, freq="5min", tz="UTC")
    p = str(tmp_path / "h.parquet")
    pd.DataFrame({"series": "a", "timestamp": ts, "value": np.arange(12.0)}).to_parquet(p)
    assert load_history(p, STEP).series["a"].sum() == pytest.approx(66.0)


def test_fill_short_gaps_bridges_at_most_one_hour():
    idx = pd.date_range("2024-01-01", periods=40, freq="5min", tz="UTC")
    y = pd.Series(np.arange(40.0), index=idx)
    y.iloc[2:5] = np.nan  # 15 minutes
    y.iloc[10:24] = np.nan  # 70 minutes
    f = fill_short_gaps(y, STEP)
    assert f.iloc[2:5].tolist() == [2.0, 3.0, 4.0]
    assert f.iloc[10:24].isna().all()


def _window_by_masks(y, start, end):
    """The window as boolean masks define it: [start, end)."""
    y = y[(y.index >= start) if start is not None else slice(None)]
    return y[(y.index < end) if end is not None else slice(None)]


@pytest.mark.parametrize("unit", ["ns", "us", "s"])
def test_window_cuts_like_masks_for_sorted_unsorted_and_empty_series(unit):
    from predictor.history import History
    idx = pd.date_range("2026-01-01", periods=50, freq="5min", tz="UTC").as_unit(unit)
    rng = np.random.default_rng(0)
    series = {"sorted": pd.Series(rng.random(50), index=idx),
              "unsorted": pd.Series(rng.random(50), index=idx[rng.permutation(50)]),
              "gappy": pd.Series(np.r_[np.full(40, np.nan), rng.random(10)], index=idx)}
    h = History(series, STEP)
    cuts = [(idx[5], idx[20]), (idx[5] + pd.Timedelta("2min"), idx[20] - pd.Timedelta("1min")), (None, idx[3]),
            (idx[45], None), (idx[0] - pd.Timedelta("1D"), idx[-1] + pd.Timedelta("1D")), (idx[30], idx[10])]
    for start, end in cuts:
        w = h.window(start, end)
        for k, y in series.items():
            want = _window_by_masks(y, start, end)
            if not want.notna().any():
                assert k not in w.series, (k, start, end)  # nothing finite there: left out, as before
                continue
            pd.testing.assert_series_equal(w.series[k], want)
        if "sorted" in w.series and "gappy" in w.series:  # one index before: one cut index after
            assert w.series["sorted"].index is w.series["gappy"].index
        if w.series:  # the first and last timestamps of any series (each as stored: sorted in serve)
            assert w.end == max(y.index[-1] for y in w.series.values())
            assert w.start == min(y.index[0] for y in w.series.values())


def test_series_on_one_grid_share_one_index_and_keep_their_values():
    from predictor.history import regularize
    t = pd.date_range("2026-01-01", periods=12, freq="5min", tz="UTC")
    frame = pd.DataFrame({"series": ["a"] * 12 + ["b"] * 12 + ["c"] * 6,
                          "timestamp": list(t) + list(t) + list(t[3:9]),
                          "value": list(range(12)) + list(range(100, 112)) + list(range(6))})
    h = regularize(frame, STEP)
    a, b, c = (h.series[k] for k in "abc")
    assert a.index is b.index  # same start and length: one index (half the memory of a fetched fleet)
    assert c.index is not a.index and list(c.index) == list(t[3:9])
    assert a.tolist() == list(range(12)) and b.tolist() == list(range(100, 112)) and c.tolist() == list(range(6))
