"""Tidal requests in replay (issue 24): the two regimes, the violation budget, the day plan, the HPA's scale point."""
import itertools

import numpy as np
import pandas as pd
import pytest

from autoscaler.logic.day_plan import DayPlanner, blocks
from autoscaler.settings import VpaSettings
from contracts.quantity import usage_to_units
from predictor.pipeline.calibration import PEAK_LEVELS, BudgetLevel
from studies.replay.day_plan import replay_restart
from tests.conftest import run_main
from tests.tidewise.test_replay_cli import tidal_frame

MODEL = ["--model", "seasonal_naive_daily"]  # the day-ahead part: cheap and deterministic


DAY_AHEAD = ("--decision-model", "day-ahead")  # where the hour-peak model is not the point: no fleet fits


def replay(tmp_path, frame, *extra, name="in.csv", pre=()):
    inp, out = tmp_path / name, tmp_path / f"out-{name}"
    frame.to_csv(inp, index=False)
    r = run_main("replay", *pre, "vpa", "--input", str(inp), "--output", str(out), *MODEL, *extra)
    assert r.returncode == 0, r.stderr
    return pd.read_csv(out, parse_dates=["timestamp"]), r


def changes_per_day(out):
    per = []
    for _, g in out.groupby("series"):
        t = g.set_index("timestamp")["target"]
        changed = (t.diff().abs() > 0) & t.shift().notna()
        per.append(changed.groupby(t.index.floor("D")).sum())
    return pd.concat(per)


def test_restart_regime_never_changes_more_than_allowed(tmp_path):
    frame = tidal_frame(days=12, start="2024-05-06T00:00:00Z")
    for n in (1, 2, 3):
        out, _ = replay(tmp_path, frame, "--resize", "restart", "--max-changes-per-day", str(n), name=f"r{n}.csv")
        assert changes_per_day(out).max() <= n
        assert out["target"].notna().all() and (out["target"] > 0).all()
    inplace, _ = replay(tmp_path, frame, name="ip.csv", pre=DAY_AHEAD)
    assert changes_per_day(inplace).max() > 3  # hourly: the cap is the restart regime's


def test_the_day_plan_follows_the_tide_and_says_why():
    idx = pd.date_range("2024-05-01", periods=14 * 288, freq="5min", tz="UTC")
    y = pd.Series(5 + 4 * np.sin(2 * np.pi * np.arange(len(idx)) / 288), index=idx)
    d = replay_restart(y, idx[0] + pd.Timedelta("9D"), idx[-1], VpaSettings(window="1h"), 3)
    assert d["reason"].str.contains("cost on the last 7 d, half-life 3 d: plan").all()
    day = d[d["timestamp"].dt.floor("D") == pd.Timestamp("2024-05-12", tz="UTC")].reset_index(drop=True)
    assert day["target"].nunique() >= 2  # up for the peak, down after it
    peak_hour = int(y.resample("1h").max().reindex(day["timestamp"]).to_numpy().argmax())
    assert day["target"].iloc[peak_hour] == day["target"].max()


def test_a_flat_series_keeps_the_stock_rule_when_the_plan_costs_more():
    idx = pd.date_range("2024-05-01", periods=12 * 288, freq="5min", tz="UTC")
    rng = np.random.default_rng(3)
    y = pd.Series(2 + rng.gamma(1.0, 0.6, len(idx)), index=idx)  # no tide: bursts at any hour
    planner = DayPlanner(y, VpaSettings(), 3)
    day = pd.Timestamp("2024-05-11", tz="UTC")
    decision = planner.decide(day, 0.05)
    request, why = decision.values, decision.why
    assert not decision.planned
    assert why.startswith("the stock rule (cost on the last 7 d, half-life 3 d: plan"), why  # both costs shown, stock cheaper
    plan, stock = (float(v) for v in why.split("plan ")[1].rstrip(")").split(", stock "))
    assert stock < plan
    assert request is not None and np.array_equal(request, planner.stock_day(day))


def test_the_restart_replay_serves_what_the_choice_costed_and_a_burst_does_not_raise_it():
    """The day's requests are the chosen plan's (or the stock rule's) hours, changed only past the dead
    band and within the day's changes, as serve's restart regime gives them: a burst at noon, five times
    the tide, does not move the afternoon's request (a raise within the day made the served policy
    differ from the costed one, and on the traces `dev` does not read it lost to the stock VPA)."""
    idx = pd.date_range("2024-05-01", periods=12 * 288, freq="5min", tz="UTC")
    y = pd.Series(5 + 4 * np.sin(2 * np.pi * np.arange(len(idx)) / 288), index=idx)
    day = pd.Timestamp("2024-05-11", tz="UTC")
    burst = (y.index >= day + pd.Timedelta("12h")) & (y.index < day + pd.Timedelta("13h"))
    y[burst] *= 5.0
    settings = VpaSettings(window="1h")
    d = replay_restart(y, day, day + pd.Timedelta("1D"), settings, 3)
    chosen = DayPlanner(y, settings, 3).decide(day, settings.violation_budget)
    assert chosen.values is not None
    wanted = [usage_to_units("cpu", max(float(v), 0.0)) for v in chosen.values]  # millicores, as replay rounds
    got = d["target"].to_numpy() * 1000.0
    assert changes_per_day(d.assign(series="s")).max() <= 3
    in_force = got[0]
    for hour in range(24):  # the dead-band walk over the chosen hours reproduces every request
        if abs(wanted[hour] - in_force) > 0.1 * in_force:
            in_force = wanted[hour]
        assert got[hour] == pytest.approx(in_force), hour
    afternoon = d[d["timestamp"] >= day + pd.Timedelta("13h")]
    assert afternoon["target"].max() < float(y[burst].max()) / 2  # the burst's peak is not chased


@pytest.mark.parametrize("n", [1, 2, 3])
def test_blocks_waste_least(n):
    rng = np.random.default_rng(n)
    for _ in range(20):
        p = rng.random(8) * 10
        got = blocks(p, n)
        assert len(set(got)) <= n and np.all(got >= p)
        best = min(sum(max(p[i:j]) * (j - i) - sum(p[i:j]) for i, j in zip((0, *cuts), (*cuts, 8)))
                   for k in range(n) for cuts in itertools.combinations(range(1, 8), k))
        assert np.isclose(np.sum(got - p), best)


def test_budget_level_moves_with_violations_and_stays_in_its_bounds():
    level = BudgetLevel(0.05)
    start = level.tau
    level.observe(np.array([2.0] * 6 + [0.5] * 6), 1.0)  # half the steps over the request
    assert level.tau > start
    high = level.tau
    for _ in range(200):
        level.observe(np.zeros(12), 1.0)  # never over: the request comes down, to the median at most
    assert level.tau == pytest.approx(level.low) and level.tau < high
    for _ in range(200):
        level.observe(np.full(12, 5.0), 1.0)  # always over: up to the highest level, not beyond
    assert level.tau == pytest.approx(level.high)
    assert 0 < level.achieved < 1
    q = np.linspace(1, 2, len(PEAK_LEVELS))
    assert level.request(q, PEAK_LEVELS) == pytest.approx(np.interp(level.high, PEAK_LEVELS, q))
    with pytest.raises(ValueError, match="budget"):
        BudgetLevel(0.0)


def test_in_place_default_tracks_the_budget(tmp_path):
    frame = tidal_frame(days=10, series=("web/cpu",), start="2024-05-08T00:00:00Z", seed=4)
    tight, _ = replay(tmp_path, frame, "--violation-budget", "0.01", name="tight.csv")
    loose, r = replay(tmp_path, frame, "--violation-budget", "0.2", name="loose.csv")
    assert loose["target"].mean() < tight["target"].mean()  # a looser budget asks for less
    y = frame.assign(timestamp=pd.to_datetime(frame["timestamp"])).set_index("timestamp")["value"]
    use = y[y.index >= pd.Timestamp("2024-05-08", tz="UTC")]

    def violation(out):
        return float(np.mean(use.to_numpy() > out.set_index("timestamp")["target"].reindex(use.index, method="ffill")))

    assert violation(tight) < violation(loose)
    assert "budget" in r.stderr


def test_hpa_target_keeps_the_scale_point_within_bounds(tmp_path):
    frame = tidal_frame(days=10, start="2024-05-06T00:00:00Z")
    out, _ = replay(tmp_path, frame, "--hpa-target-utilization", "0.7", name="hpa.csv", pre=DAY_AHEAD)
    assert "hpa_target" in out.columns
    for _, g in out.groupby("series"):
        point = 0.7 * g["target"].iloc[0]
        assert np.allclose(g["hpa_target"] * g["target"], point)
        assert g["hpa_target"].between(0.5, 0.9).all()
    narrow, _ = replay(tmp_path, frame, "--hpa-target-utilization", "0.7", "--hpa-target-bounds", "0.65,0.75",
                       name="narrow.csv", pre=DAY_AHEAD)
    assert narrow["hpa_target"].between(0.65, 0.75 + 1e-12).all()
    assert narrow["target"].std() < out["target"].std()  # the request held where the HPA could not follow
    plain, _ = replay(tmp_path, frame, name="plain.csv", pre=DAY_AHEAD)
    assert list(plain.columns) == ["series", "timestamp", "target", "lower_bound", "upper_bound"]


@pytest.mark.parametrize("flags,named", [
    (("--max-changes-per-day", "0"), "--max-changes-per-day"),
    (("--hpa-target-utilization", "0.95"), "--hpa-target-utilization"),
    (("--hpa-target-bounds", "0.9,0.5"), "--hpa-target-bounds"),
    (("--hpa-target-bounds", "half"), "--hpa-target-bounds"),
    (("--violation-budget", "0"), "--violation-budget"),  # no budget: BudgetLevel would have no level to walk to
    (("--violation-budget", "0.8"), "--violation-budget"),  # the same (0, 0.5] as serve's vpa.violation_budget
])
def test_bad_tidal_flags_exit_2_naming_the_flag(tmp_path, flags, named):
    inp = tmp_path / "in.csv"
    tidal_frame().to_csv(inp, index=False)
    r = run_main("replay", "vpa", "--input", str(inp), "--output", str(tmp_path / "o.csv"), *flags)
    assert r.returncode == 2 and named in r.stderr and "Traceback" not in r.stderr
    assert not (tmp_path / "o.csv").exists()


def test_report_curves_carry_the_seasonal_rule_and_the_restart_bound():
    from studies.replay.tradeoff import day_blocks_foresight, seasonal_rule, vpa_series_curves

    idx = pd.date_range("2024-05-01", periods=10 * 288, freq="5min", tz="UTC")
    rng = np.random.default_rng(1)
    y = pd.Series(5 + 3 * np.sin(2 * np.pi * np.arange(len(idx)) / 288) + rng.gamma(2, 0.2, len(idx)), index=idx)
    start = idx[0] + pd.Timedelta("8D")
    use = y[start:]
    rule = seasonal_rule(y, use)
    later = y.copy()
    later[later.index >= start + pd.Timedelta("1D")] *= 5  # the future changes no earlier request
    early = use.index < start + pd.Timedelta("1D")
    assert rule[early].equals(seasonal_rule(later, later[start:])[early])
    bound = day_blocks_foresight(use, 3)
    assert (bound >= use - 1e-12).all() and bound.groupby(bound.index.floor("D")).nunique().max() <= 3
    c = vpa_series_curves(y, start, idx[-1] + pd.Timedelta("5min"), use, rule)
    assert {"seasonal rule (no model)", "foresight, 3 changes a day"} <= set(c.points)
    assert c.points["seasonal rule (no model)"] == c.points["tidewise"]  # the same requests, the same point


def test_in_place_replay_serves_the_seasonal_rule_on_a_day_it_cost_less():
    """`HourPeakRequests` (what `tidewise replay vpa` decides in place) scores the model and the seasonal
    rule on every step it sees; on a day after the rule cost less it serves the rule's request, says
    so, and its budget level still learns from the model's own request."""
    from autoscaler.logic.rule_choice import DAY_NS, Tally, rule_request
    from predictor.timestamps import epoch_ns
    from studies.replay.hour_peak import HourPeakRequests, hour_peak_trainer

    frame = tidal_frame(days=10, series=("web/cpu",), seed=4)
    y = frame.assign(timestamp=pd.to_datetime(frame["timestamp"])).set_index("timestamp")["value"]
    hour = pd.Timedelta("1h")
    trainer = hour_peak_trainer({"web/cpu": y}, hour)
    t = y.index[0] + pd.Timedelta(days=9)
    on, off = (HourPeakRequests("web/cpu", trainer, 0.05, hour, rule_candidate=r) for r in (True, False))
    for hp in (on, off):
        hp.warm_up(y, t)
    assert on.choice.tallies and not off.choice.tallies  # only a candidate is scored
    assert on.choice.last is not None and sum(p[0].steps for p in on.choice.tallies.values()) >= 288
    on.choice.tallies[t.value - DAY_NS] = (Tally(0.9 * 10**6, 0, 10**6), Tally(0.1 * 10**6, 0, 10**6))  # model, rule
    on.choice.day = None
    got = on.request_at(y, t)
    assert got == pytest.approx(rule_request(y.to_numpy(), epoch_ns(y.index), t.value, hour.value))
    assert on.label == "seasonal_rule" and on.why().startswith("seasonal rule:"), on.why()
    assert on.quantile == 0.5 and off.quantile == pytest.approx(off.level.tau)
    assert off.request_at(y, t) != pytest.approx(got) and off.label == "hour_peak_lightgbm"
    assert on.level.tau == pytest.approx(off.level.tau)  # both walked on the model's own requests
    assert on._last is not None and on._last[1] == pytest.approx(off._last[1])  # the level's own request: the model's


def test_in_place_every_30m_decides_each_half_hour_on_the_half_hour_peak(tmp_path):
    """`--every 30m` (the opt-in BENCHMARKS.md measures): a decision each half hour, the hour-peak model
    trained for a 30-minute span; on a smooth tide the next half hour's peak is below the next hour's,
    so its requests ask for less than the hourly ones at the same budget."""
    frame = tidal_frame(days=10, series=("web/cpu",), start="2024-05-08T00:00:00Z", seed=4)
    half, r = replay(tmp_path, frame, "--every", "30m", name="half.csv")
    hourly, _ = replay(tmp_path, frame, name="hourly.csv")
    steps = half["timestamp"].diff().dropna().unique()
    assert list(steps) == [pd.Timedelta("30min")], steps
    assert len(half) == 2 * len(hourly)
    assert half["target"].mean() < hourly["target"].mean()
    assert "policy tidewise" in r.stderr.splitlines()[-1], r.stderr
