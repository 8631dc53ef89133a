"""One value no workload can have (1e300 among values of 4) is refused by every reader with the same
line, naming the file, the row, the series, the time and the fix (`predictor.value_scale`); values in
range pass; replay hpa names the per-replica value the user gave."""
from __future__ import annotations

import logging

import numpy as np
import pandas as pd
import pytest

from tests.conftest import run_cli
from tests.tidewise.test_bad_inputs import one_line_error

CPU, MEMORY = "shop/Deployment/web/app/cpu", "shop/Deployment/web/app/memory"
AT = 100  # the row of the absurd value in the cpu series


def usage_frame(days: float = 3.0, absurd: float | None = None, cpu: str = CPU) -> pd.DataFrame:
    """A cpu series (cores) and a memory series (bytes, ~2 GiB) on a 5-minute grid; `absurd` at row AT."""
    ts = pd.date_range("2024-03-01", periods=int(days * 288), freq="5min", tz="UTC")
    i = np.arange(len(ts))
    stamps = ts.strftime("%Y-%m-%dT%H:%M:%SZ")
    c = pd.DataFrame({"series": cpu, "timestamp": stamps, "value": 4 + 2 * np.sin(i / 40)})
    if absurd is not None:
        c.loc[AT, "value"] = absurd
    m = pd.DataFrame({"series": MEMORY, "timestamp": stamps, "value": 2e9 + 1e8 * np.sin(i / 40)})
    return pd.concat([c, m], ignore_index=True)


def write(frame: pd.DataFrame, path) -> str:
    if str(path).endswith(".parquet"):
        frame.to_parquet(path, index=False)
    else:
        frame.to_csv(path, index=False)
    return str(path)


COMMANDS = {
    "forecast": ["forecast", "--input", "{inp}", "--output", "{out}", "--horizon", "2h", "--model", "seasonal_naive_daily"],
    "profile": ["profile", "--input", "{inp}", "--output", "{out}"],
    "train": ["train", "--input", "{inp}", "--registry", "{out}", "--no-decision-time", "--no-global"],
    "replay": ["replay", "vpa", "--input", "{inp}", "--output", "{out}", "--model", "seasonal_naive_daily"],
}


@pytest.mark.parametrize("suffix", ["csv", "parquet"])
@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_one_absurd_value_is_refused_by_every_reader_with_one_line(tmp_path, command, suffix):
    inp = write(usage_frame(absurd=1e300), tmp_path / f"huge.{suffix}")
    out = tmp_path / "out"
    r = run_cli(*[a.format(inp=inp, out=out) for a in COMMANDS[command]])
    where = "line 102" if suffix == "csv" else "row 101"  # CSV line 1 is the header
    line = one_line_error(r, 2, f"tidewise {command}: error: {inp} {where} (series '{CPU}' at 2024-03-01T08:20:00+00:00): "
                                "value 1e+300 is above 1,000,000 cores, more than any machine holds; check the units "
                                "of the values (cores for cpu, bytes for memory), or drop the row (1 such row)")
    assert "overflow" not in r.stderr and "Warning" not in line
    assert not out.exists()


def test_a_series_in_another_unit_is_held_to_the_largest_bound(tmp_path):
    """qps or replicas may be large, not 1e300; replay vpa reads an id naming no resource as cpu."""
    frame = usage_frame(cpu="shop/Deployment/web/app/qps")
    frame.loc[frame["series"].str.endswith("qps"), "value"] *= 1e9  # a billion requests a second: still a number
    ok = write(frame, tmp_path / "ok.csv")
    r = run_cli("forecast", "--input", ok, "--output", str(tmp_path / "f.csv"), "--horizon", "1h",
                "--model", "seasonal_naive_daily")
    assert r.returncode == 0, r.stderr
    frame.loc[AT, "value"] = 1e300
    line = one_line_error(run_cli("forecast", "--input", write(frame, tmp_path / "bad.csv"), "--output",
                                  str(tmp_path / "g.csv")), 2, "line 102", "series 'shop/Deployment/web/app/qps'",
                          "value 1e+300 is above 1,125,899,906,842,624 (1 PiB in bytes)", "check the units")
    assert "cores" not in line
    replay = write(usage_frame(cpu="web"), tmp_path / "web.csv")  # 4 cores or so, read as cpu: fine
    assert run_cli("replay", "vpa", "--input", replay, "--output", str(tmp_path / "v.csv"), "--model",
                   "seasonal_naive_daily").returncode == 0
    frame = usage_frame(cpu="web")
    frame.loc[frame["series"] == "web", "value"] *= 1e6  # millicores read as cores... by a thousand more
    one_line_error(run_cli("replay", "vpa", "--input", write(frame, tmp_path / "milli.csv"), "--output",
                           str(tmp_path / "w.csv")), 2, "series 'web'", "1,000,000 cores")


def test_the_fast_reader_hands_an_absurd_file_to_the_validation_path(tmp_path):
    from predictor.history import load_history
    from predictor.sources.columnar import load_columnar

    step = pd.Timedelta("5min")
    good = write(usage_frame(), tmp_path / "good.parquet")
    assert load_columnar(good, step) is not None  # memory in bytes is no unit mistake
    bad = write(usage_frame(absurd=-1e300), tmp_path / "bad.parquet")
    assert load_columnar(bad, step, allow_negative=True) is None
    from contracts.errors import InputError

    with pytest.raises(InputError, match=r"row 101 \(series .*\): value -1e\+300 is below -1,000,000 cores"):
        load_history(bad, step, allow_negative=True)


def test_prometheus_leaves_an_absurd_sample_out_as_a_gap(caplog):
    """One exporter's glitch must not stop the fleet's fetch nor reach a decision."""
    from predictor.sources.prometheus import _without_absurd

    frame = usage_frame(days=0.5, absurd=1e300)
    frame["timestamp"] = pd.to_datetime(frame["timestamp"], utc=True)
    with caplog.at_level(logging.WARNING, logger="predictor.sources.prometheus"):
        kept = _without_absurd(frame, "http://prom:9090")
    assert len(kept) == len(frame) - 1 and kept["value"].max() < 1e10
    assert f"1 sample(s) left out as gaps, e.g. series {CPU} at 2024-03-01T08:20:00+00:00" in caplog.text
    assert _without_absurd(usage_frame(days=0.1), "u").equals(usage_frame(days=0.1))


def test_replay_hpa_names_the_per_replica_value_given(tmp_path):
    """It said `per-replica 0.0005` for per_replica 0.001 at target utilisation 0.5."""
    frame = usage_frame(cpu="svc")
    frame = frame[frame["series"] == "svc"].assign(value=lambda f: f["value"] * 1e9, per_replica=0.001)
    inp = write(frame, tmp_path / "demand.csv")
    line = one_line_error(run_cli("replay", "hpa", "--input", inp, "--output", str(tmp_path / "r.csv"),
                                  "--target-utilization", "0.5"), 2, "series 'svc'", "2147483647")
    assert "/ (per_replica 0.001 x target utilisation 0.5) needs 1.2e+13 replicas" in line, line
    assert "0.0005" not in line
