"""`tidewise replay --decision-model lightgbm|gbm` (issue 12; lightgbm the default of both kinds since 2026-12-07): decisions from
decision-time forecasts (VPA: the hour-peak model at the series' violation-budget level), the replay
contracts unchanged, and no look-ahead (perturbing the future changes no decision before it)."""
import numpy as np
import pandas as pd

from studies.replay.decision_time import DecisionTimeForecaster, DecisionTimeTrainer, hpa_span
from studies.replay.decisions import QUANTILES, DailyChoiceForecaster
from tests.conftest import run_cli
from tests.tidewise.test_replay_cli import tidal_frame

MODEL = ["--model", "seasonal_naive_daily"]  # the fallback: cheap and deterministic


def replay(tmp_path, kind, frame, *extra, name="in.csv", decision=("--decision-model", "lightgbm")):
    inp, out = tmp_path / name, tmp_path / f"out-{name}"
    frame.to_csv(inp, index=False)
    r = run_cli("replay", *decision, kind, "--input", str(inp), "--output", str(out), *MODEL, *extra)
    assert r.returncode == 0, r.stderr
    return pd.read_csv(out, parse_dates=["timestamp"])


def perturbed_after(frame, cut):
    out = frame.copy()
    out.loc[pd.to_datetime(frame["timestamp"], utc=True) >= cut, "value"] *= 7.0
    return out


def test_vpa_decision_model_keeps_the_contract_and_reads_no_future(tmp_path):
    frame = tidal_frame(start="2024-05-05T06:00:00Z")
    out = replay(tmp_path, "vpa", frame, "--every", "1h")
    assert list(out.columns) == ["series", "timestamp", "target", "lower_bound", "upper_bound"]
    assert (out["lower_bound"] <= out["target"]).all() and (out["target"] <= out["upper_bound"]).all()
    day_ahead = replay(tmp_path, "vpa", frame, "--every", "1h", name="plain.csv",
                       decision=("--decision-model", "day-ahead"))
    assert not np.allclose(out["target"], day_ahead["target"])  # the model changes the decisions
    cut = pd.Timestamp("2024-05-06T09:00:00Z")
    out2 = replay(tmp_path, "vpa", perturbed_after(frame, cut), "--every", "1h", name="perturbed.csv")
    before = out["timestamp"] <= cut
    pd.testing.assert_frame_equal(out[before].reset_index(drop=True),
                                  out2[out2["timestamp"] <= cut].reset_index(drop=True))
    assert not out[~before]["target"].equals(out2[out2["timestamp"] > cut]["target"])


def test_hpa_decision_model_keeps_the_contract_and_reads_no_future(tmp_path):
    frame = tidal_frame(per=1.0, start="2024-05-05T06:00:00Z")
    gbm = ("--decision-model", "gbm")  # scikit-learn's backend, end to end (the default is lightgbm)
    out = replay(tmp_path, "hpa", frame, decision=gbm)
    assert list(out.columns) == ["series", "timestamp", "replicas"]
    assert (out["replicas"] >= 1).all()
    cut = pd.Timestamp("2024-05-06T09:00:00Z")
    out2 = replay(tmp_path, "hpa", perturbed_after(frame, cut), name="perturbed.csv", decision=gbm)
    # a replica asked for at minute t serves from t + startup (2m): what serves up to cut + 2m is settled
    settled = out["timestamp"] <= cut + pd.Timedelta("2min")
    pd.testing.assert_frame_equal(out[settled].reset_index(drop=True),
                                  out2[out2["timestamp"] <= cut + pd.Timedelta("2min")].reset_index(drop=True))
    assert not out["replicas"].equals(out2["replicas"])


def test_both_kinds_replay_decision_time_by_default(tmp_path):
    """The defaults chosen on the full dev replay (BENCHMARKS.md, replay and tidal-requests sections)."""
    frame = tidal_frame(per=1.0, start="2024-05-05T06:00:00Z")
    default = replay(tmp_path, "hpa", frame, name="default.csv", decision=())
    pd.testing.assert_frame_equal(default, replay(tmp_path, "hpa", frame, name="lightgbm.csv"))
    day_ahead = replay(tmp_path, "hpa", frame, name="da.csv", decision=("--decision-model", "day-ahead"))
    assert not default["replicas"].equals(day_ahead["replicas"])
    vpa = replay(tmp_path, "vpa", frame, name="v.csv", decision=())
    pd.testing.assert_frame_equal(vpa, replay(tmp_path, "vpa", frame, name="vlightgbm.csv"))
    vda = replay(tmp_path, "vpa", frame, name="vda.csv", decision=("--decision-model", "day-ahead"))
    assert not vpa["target"].equals(vda["target"])


def test_unknown_decision_model_exits_2(tmp_path):
    inp = tmp_path / "in.csv"
    tidal_frame().to_csv(inp, index=False)
    r = run_cli("replay", "--decision-model", "magic", "vpa", "--input", str(inp), "--output", str(tmp_path / "o.csv"))
    assert r.returncode == 2 and "--decision-model" in r.stderr and "Traceback" not in r.stderr
    assert not (tmp_path / "o.csv").exists()


def test_forecast_is_decision_shaped_and_falls_back_without_a_model():
    idx = pd.date_range("2024-05-01", periods=6 * 288, freq="5min", tz="UTC")
    y = pd.Series(2 + np.sin(2 * np.pi * np.arange(len(idx)) / 288), index=idx)
    fallback = DailyChoiceForecaster(key="y", model="seasonal_naive_daily")
    fc = DecisionTimeForecaster("y", DecisionTimeTrainer({"y": y}, span=12), fallback)
    origin = pd.Timestamp("2024-05-05T10:00:00Z")
    f = fc.forecast(y, origin, pd.Timedelta("2h"))
    assert f.model.startswith("decision_time") and f.quantiles == QUANTILES and f.values.shape == (24, 4)
    assert (f.values == f.values[0]).all()  # one decision-shaped quantile row over the horizon
    assert (np.diff(f.values[0]) >= 0).all()
    # the next hour's peak is about the tide's peak within the hour, not the level now
    assert abs(f.quantile(0.5)[0] - y[origin: origin + pd.Timedelta("55min")].max()) < 0.3
    early = DecisionTimeForecaster("y", DecisionTimeTrainer({"y": y}, span=12), fallback)
    g = early.forecast(y, pd.Timestamp("2024-05-01T12:00:00Z"), pd.Timedelta("1h"))  # no day before to fit on
    assert not g.model.startswith("decision_time")  # the day-ahead path (and its own fallbacks) answered


def test_hpa_span_covers_startup_and_the_look_ahead():
    assert hpa_span(pd.Timedelta("2min")) == 2  # now and now + 5m: timeline[0:2] in predictive_min_replicas
    assert hpa_span(pd.Timedelta("10min")) == 4
