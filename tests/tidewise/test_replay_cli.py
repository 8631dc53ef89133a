"""`tidewise replay vpa|hpa` as a command: the contracts, and no look-ahead (perturbing the future changes no
decision taken before it)."""
import numpy as np
import pandas as pd
import pytest

from tests.conftest import run_cli, run_main

MODEL = ["--model", "seasonal_naive_daily"]  # cheap and deterministic; `auto` is measured in make bench


def tidal_frame(days=6, series=("web/cpu", "api/cpu"), per=None, start=None, seed=0):
    ts = pd.date_range("2024-05-01", periods=days * 288, freq="5min", tz="UTC")
    rng = np.random.default_rng(seed)
    parts = []
    for i, s in enumerate(series):
        v = 4 + 3 * np.sin(2 * np.pi * (ts.hour * 60 + ts.minute) / 1440 - i) + rng.gamma(2, 0.1, len(ts))
        df = pd.DataFrame({"series": s, "timestamp": ts.strftime("%Y-%m-%dT%H:%M:%SZ"), "value": v})
        if per is not None:
            df["per_replica"] = per
        if start is not None:
            df["start"] = start
        parts.append(df)
    return pd.concat(parts, ignore_index=True)


def replay(tmp_path, kind, frame, *extra, name="in.csv"):
    inp, out = tmp_path / name, tmp_path / f"out-{name}"
    frame.to_csv(inp, index=False)
    r = run_main("replay", kind, "--input", str(inp), "--output", str(out), *MODEL, *extra)
    assert r.returncode == 0, r.stderr
    return pd.read_csv(out, parse_dates=["timestamp"])


def test_vpa_contract_and_no_look_ahead(tmp_path):
    start = "2024-05-05T06:00:00Z"
    frame = tidal_frame(start=start)
    out = replay(tmp_path, "vpa", frame, "--every", "1h")
    assert list(out.columns) == ["series", "timestamp", "target", "lower_bound", "upper_bound"]
    end = pd.Timestamp("2024-05-07T00:00:00Z")  # data ends 23:55 on 05-06
    expected = pd.date_range(start, end, freq="1h", inclusive="left")
    for s, g in out.groupby("series"):
        assert list(g["timestamp"]) == list(expected), s
    assert (out["lower_bound"] <= out["target"]).all() and (out["target"] <= out["upper_bound"]).all()
    assert (out["target"] > 0).all()
    # the request follows the tide: it is not one flat number
    assert out.groupby("series")["target"].agg(lambda t: t.max() / t.min()).min() > 1.5

    cut = pd.Timestamp("2024-05-06T09:00:00Z")
    future = pd.to_datetime(frame["timestamp"], utc=True) >= cut
    perturbed = frame.copy()
    perturbed.loc[future, "value"] *= 7.0
    out2 = replay(tmp_path, "vpa", perturbed, "--every", "1h", name="perturbed.csv")
    before = out["timestamp"] <= cut
    pd.testing.assert_frame_equal(out[before].reset_index(drop=True), out2[out2["timestamp"] <= cut].reset_index(drop=True))
    assert not out[~before]["target"].equals(out2[out2["timestamp"] > cut]["target"])  # the perturbation is seen after


def test_vpa_without_start_replays_the_last_seven_days(tmp_path):
    out = replay(tmp_path, "vpa", tidal_frame(days=9, series=("a",)), "--every", "2h")
    assert out["timestamp"].min() == pd.Timestamp("2024-05-03T00:00:00Z")
    assert len(out) == 7 * 12


def test_hpa_contract_and_no_look_ahead(tmp_path):
    start = "2024-05-05T12:00:00Z"
    frame = tidal_frame(per=1.0, start=start, series=("svc",))
    out = replay(tmp_path, "hpa", frame, "--target-utilization", "0.7", "--startup", "2m")
    assert list(out.columns) == ["series", "timestamp", "replicas"]
    assert out["timestamp"].diff().dropna().eq(pd.Timedelta("1min")).all()
    assert out["timestamp"].min() == pd.Timestamp(start)
    assert out["timestamp"].max() == pd.Timestamp("2024-05-06T23:55:00Z")
    assert (out["replicas"] >= 1).all() and out["replicas"].dtype.kind == "i"

    cut = pd.Timestamp("2024-05-06T03:00:00Z")
    perturbed = frame.copy()
    perturbed.loc[pd.to_datetime(frame["timestamp"], utc=True) >= cut, "value"] *= 5.0
    out2 = replay(tmp_path, "hpa", perturbed, "--target-utilization", "0.7", "--startup", "2m", name="p.csv")
    # a replica serving at minute t was asked for before t: minutes up to the cut are unchanged
    upto = out["timestamp"] <= cut
    assert out[upto]["replicas"].tolist() == out2[out2["timestamp"] <= cut]["replicas"].tolist()
    assert out2[~upto]["replicas"].max() > out[~upto]["replicas"].max()


def test_predictive_floor_cuts_over_target_minutes_on_a_tide(tmp_path):
    """Against the reactive HPA alone, on a clean tide with steep ramps (the report's scores)."""
    frame = tidal_frame(days=8, per=0.5, start="2024-05-06T00:00:00Z", series=("svc",))
    inp, out, rep = tmp_path / "in.csv", tmp_path / "out.csv", tmp_path / "r.html"
    frame.to_csv(inp, index=False)
    r = run_main("replay", "hpa", "--input", str(inp), "--output", str(out), "--report", str(rep), *MODEL)
    assert r.returncode == 0, r.stderr
    page = rep.read_text()
    # the series plot and the trade-off figure (issue 12 item 6)
    assert page.count("<img") == 2 and "<h2>Trade-off</h2>" in page and "reactive HPA" in page and "https://" not in page
    from tests.chromium import console_errors, plot_pixels, screenshot

    shot = str(tmp_path / "shot.png")
    assert console_errors(screenshot(f"file://{rep}", shot, str(tmp_path / "profile"))) == []
    non_white, blue = plot_pixels(shot)
    assert non_white > 0.01 and blue > 100  # the table and Tidewise's blue replica line rendered
    from autoscaler.logic.hpa import hpa_scores, simulate_reactive_hpa
    y = frame.assign(timestamp=pd.to_datetime(frame["timestamp"], utc=True)).set_index("timestamp")["value"]
    d = y.resample("1min").ffill()["2024-05-06T00:00:00Z":].to_numpy()
    got = pd.read_csv(out)["replicas"].to_numpy(dtype=float)
    mine = hpa_scores(d, got, 0.5)
    ref = hpa_scores(d, simulate_reactive_hpa(d, 0.5, int(np.ceil(d[0] / 0.35))), 0.5)
    assert mine[1] < ref[1]


@pytest.mark.parametrize("content,message", [
    ("series,timestamp,value\na,2024-01-01T00:00:00Z,1\n", "no column 'per_replica'"),
    ("series,timestamp,value,per_replica,start\na,2024-01-01T00:00:00Z,1,1,2024-01-01T00:00:00Z\n"
     "a,2024-01-01T00:05:00Z,1,1,2024-01-02T00:00:00Z\n", "2 different `start` values"),
    ("series,timestamp,value,per_replica\na,2024-01-01T00:00:00Z,1,0\na,2024-01-01T00:05:00Z,1,0\n", "positive per_replica"),
])
def test_hpa_bad_input(tmp_path, content, message):
    inp, out = tmp_path / "in.csv", tmp_path / "out.csv"
    inp.write_text(content)
    r = run_cli("replay", "hpa", "--input", str(inp), "--output", str(out))
    assert r.returncode == 2 and message in r.stderr and not out.exists()
