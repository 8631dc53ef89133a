"""Tidal VPA requests in serve (issue 24 items 2-4): with a registry `tidewise train` wrote (its "vpa"
decision-time model is the hour-peak model), an in-place VPA's target is the hour's peak at the
series' budget level, which moves with what the runs saw; a restart-regime VPA serves the day plan;
an older registry (a "recent" VPA model) falls back to the day-ahead forecast and says why."""
from __future__ import annotations

import copy
import zlib

import numpy as np
import pandas as pd
import pytest

from autoscaler.logic.day_plan import DayPlanner
from autoscaler.logic.vpa import pod_peaks_range
from autoscaler.output.sinks import DryRunSink
from autoscaler.routines import tidal as tidal_routine
from autoscaler.routines.loop import OK, ServingLoop
from predictor import registry
from predictor.history import History, history_from_frame
from predictor.models.decision_time import DecisionTimeGBM
from predictor.sources.synthetic import generate_cluster
from studies.demo import MemorySource, cluster_objects
from tests.autoscaler.conftest import StaticCluster, fast_settings
from tests.conftest import run_main

STEP = pd.Timedelta("5min")
END = pd.Timestamp("2026-11-02T00:00:00Z")
HOUR = pd.Timedelta("1h")


@pytest.fixture(scope="module")
def tidal(tmp_path_factory):
    """3 tidal workloads over 9 days; a registry trained by `tidewise train` on all but the last 2 h."""
    c = generate_cluster(seed=3, workloads=3, namespaces=1, nodes=1, days=9, end=END, gaps=False)
    hist = history_from_frame(c.history(), STEP, "test")
    d = tmp_path_factory.mktemp("tidal")
    hist.window(None, END - 2 * HOUR).to_long().to_csv(d / "history.csv", index=False)
    reg = d / "models"
    proc = run_main("train", "--source", "file", "--input", str(d / "history.csv"), "--registry", str(reg),
                    "--folds", "1", "--no-global")
    assert proc.returncode == 0, proc.stderr
    assert registry.load_version(str(reg)).decision_models["vpa"].features == "hour_peak"
    return c, hist, reg


def regimed(objects: list[dict], mode: str) -> list[dict]:
    """`objects` with every VPA in updateMode `mode` and every container resizing in place."""
    out = copy.deepcopy(objects)
    for o in out:
        if o["kind"] == "VerticalPodAutoscaler":
            o["spec"]["updatePolicy"] = {"updateMode": mode}
        elif o["kind"] in ("Deployment", "StatefulSet"):
            for ctr in o["spec"]["template"]["spec"]["containers"]:
                ctr["resizePolicy"] = [{"resourceName": r, "restartPolicy": "NotRequired"} for r in ("cpu", "memory")]
    return out


def loop_on(objects, hist: History, reg) -> tuple[ServingLoop, MemorySource]:
    s = fast_settings()
    s.loop.forecast_refresh = None
    source = MemorySource(hist)
    return ServingLoop(s, source, StaticCluster(objects), DryRunSink(), registry_dir=str(reg)), source


def recs(rep):
    assert rep.outcome == OK, rep.reason
    out = {(d.key, c.container, res): r for d in rep.vpa for c in d.containers for res, r in c.resources.items()}
    assert out
    return out


def test_in_place_vpas_read_the_hour_peak_model_at_a_level_that_learns(tidal):
    """Two runs an hour apart on one loop: each reason names hour_peak and its level; the series whose
    hour between the runs ran over its request has its level raised, the others lowered a little."""
    c, hist, reg = tidal
    objects = regimed(cluster_objects(c), "InPlaceOrRecreate")
    loop, source = loop_on(objects, hist.window(None, END - HOUR - STEP), reg)
    first = recs(loop.run_once())
    for r in first.values():
        assert r.reason.model.startswith("hour_peak_lightgbm@"), r.reason.model
        assert r.reason.quantile == pytest.approx(0.8) and r.reason.margin == 0.0
        assert r.reason.steps[0].startswith("hour_peak_lightgbm@") and "q0.80" in r.reason.steps[0]
        assert "violation budget 0.05" in r.reason.steps[0] and "regime in-place" in " ".join(r.reason.steps)
    # the next hour: one workload's memory runs at three times its usage, far over any request made for it
    sid = "shop/Deployment/checkout/app/memory"
    key = ("VerticalPodAutoscaler/shop/checkout", "app", "memory")
    assert key in first and sid in loop.decision_time.tidal.levels, (list(first), loop.last_report.skipped)
    series = dict(hist.series)
    y = series[sid].copy()
    hot = (y.index >= END - HOUR) & (y.index < END)
    y[hot] *= 3.0
    series[sid] = y
    source.history = History(series, STEP).window(None, END - STEP)
    second = recs(loop.run_once())
    assert second[key].reason.quantile > 0.85  # 0.8 + 0.1 x (1 - 0.05)
    assert "achieved 1.000 so far" in second[key].reason.steps[0]
    calm = [r.reason.quantile for k, r in second.items() if k != key]
    assert calm and all(q < 0.8 for q in calm), calm


def test_restart_regime_vpas_serve_the_day_plan_decided_once_a_day(tidal):
    """Updated by restart: the day plan's (or the stock rule's) request for the hour, with both costs;
    the day's choice is made once per series and kept by the loop for the next run of that day."""
    c, hist, reg = tidal
    loop, source = loop_on(regimed(cluster_objects(c), "Recreate"), hist.window(None, END - HOUR - STEP), reg)
    for r in recs(loop.run_once()).values():
        assert r.reason.model == "day_plan" and r.reason.margin == 0.0
        first = r.reason.steps[0]
        assert first.startswith(("restart regime: the day plan's request for 22:00 UTC: day plan in",
                                 "restart regime: the stock rule's target for 22:00 UTC: the stock rule")), first
        assert "cost on the last" in first and "plan " in first and "stock " in first
        assert any("regime restart" in s for s in r.reason.steps)
    plans = dict(loop.decision_time.tidal.plans)
    assert len(plans) == len(hist.series) // 2 and not loop.decision_time.tidal.levels  # memory only, restart
    source.history = hist.window(None, END - STEP)
    second = recs(loop.run_once())
    assert all(loop.decision_time.tidal.plans[sid] is choice for sid, choice in plans.items())
    assert all("for 23:00 UTC" in r.reason.steps[0] for r in second.values())


def test_an_older_registry_falls_back_to_the_day_ahead_forecast_and_says_why(tidal, tmp_path):
    """A registry whose VPA model has the older "recent" features: the day-ahead forecast serves, the
    reason saying why, in both regimes; the HPA model still serves."""
    c, hist, reg = tidal
    version = registry.load_version(str(reg))
    old = DecisionTimeGBM((0.5, 0.9, 0.95, 0.99), 12, max_iter=10, max_rows=3000).fit_many(hist.series, STEP)
    series = {k: {"model": "seasonal_naive_daily", "shifts": [0.0] * 4} for k in hist.series}
    end = END - 2 * HOUR
    registry.write_version(str(tmp_path), quantiles=(0.5, 0.9, 0.95, 0.99), series=series, step_seconds=300,
                           data_window=((end - pd.Timedelta("8D")).isoformat(), end.isoformat()),
                           decision_models={"vpa": old, "hpa": version.decision_models["hpa"]})
    for mode in ("InPlaceOrRecreate", "Recreate"):
        loop, _ = loop_on(regimed(cluster_objects(c), mode), hist, tmp_path)
        rep = loop.run_once()
        for r in recs(rep).values():
            assert "[day-ahead; decision-time vpa: model features 'recent', not 'hour_peak'" in r.reason.model
            assert not any(s.startswith(("hour_peak", "restart regime: the")) for s in r.reason.steps)
        assert rep.hpa and all(d.reason.model.startswith("decision_time_lightgbm") for d in rep.hpa)


def test_a_new_days_plans_spread_over_runs_under_day_plans_per_run(tidal):
    """With one plan a run, the first run of a UTC day plans one series; the others keep the request
    they had (the same target, no change) and say why, and later runs plan them, each to the plan a
    loop without the cap makes. A series never planned is planned at once, whatever the cap."""
    c, hist, reg = tidal
    objects = regimed(cluster_objects(c), "Recreate")
    day = END - pd.Timedelta("1D")
    loop, source = loop_on(objects, hist.window(None, day - HOUR), reg)
    loop.settings.vpa.day_plans_per_run = 1
    before = recs(loop.run_once())
    plans = loop.decision_time.tidal.plans
    assert len(plans) == len(before) > 1  # every series new: planned in the first run despite the cap
    for k in range(len(before)):
        source.history = hist.window(None, day + k * STEP)
        rep = loop.run_once()
        now = recs(rep)
        waiting = {key for key, r in now.items() if "day plan for 2026-11-01 waits" in r.reason.steps[0]}
        assert len(now) == len(before) and len(waiting) == len(before) - 1 - k  # one more planned each run
        for key in waiting:
            assert now[key].target == before[key].target, (key, now[key].reason.steps)
            assert "vpa.day_plans_per_run 1" in now[key].reason.steps[0]
            assert "the request of 2026-10-31 holds" in now[key].reason.steps[0]
        held = {key[0] for key in waiting} - {key[0] for key in now if key not in waiting}
        assert not any(ch.key in held for ch in rep.changes)  # a VPA all of whose requests hold is not written
    assert all(ch.day == day for ch in plans.values())
    assert all(ch.memo is not None and ch.memo.last == day.value for ch in plans.values())  # the week, for tomorrow
    free, free_source = loop_on(objects, hist.window(None, day - HOUR), reg)
    free.run_once()
    free_source.history = source.history
    free.run_once()
    assert set(free.decision_time.tidal.plans) == set(plans)
    for sid, ch in free.decision_time.tidal.plans.items():
        assert ch.why == plans[sid].why
        assert (ch.values is None and plans[sid].values is None) or (ch.values == plans[sid].values).all()


def test_the_change_guardrail_lets_a_target_fall_within_the_workloads_own_hourly_peaks(tidal):
    """Published requests 20x what the workloads use: the ratios alone would halve them each run; the
    guardrail lets each target fall at once to a level its workload's own hourly peaks of
    `guardrails.peaks_window` reached, and says so. An empty window limits by the ratios alone."""
    c, hist, reg = tidal
    objects = regimed(cluster_objects(c), "InPlaceOrRecreate")
    past = hist.window(None, END - HOUR - STEP)
    wanted = recs(loop_on(objects, past, reg)[0].run_once())
    published: dict[str, dict[str, dict[str, str]]] = {}
    for (key, ctr, res), r in wanted.items():
        published.setdefault(key, {}).setdefault(ctr, {})[res] = f"{20 * r.target}m" if res == "cpu" else str(20 * r.target)
    for o in objects:
        key = f"{o['kind']}/{o['metadata'].get('namespace')}/{o['metadata']['name']}"
        if key in published:
            o["status"] = {"recommendation": {"containerRecommendations": [
                {"containerName": ctr, "target": t} for ctr, t in published[key].items()]}}
    now = past.end + STEP
    for (key, ctr, res), r in recs(loop_on(objects, past, reg)[0].run_once()).items():
        _, ns, name = key.split("/")
        replicas = next(w.replicas for w in c.workloads if w.name == name)
        low, _ = pod_peaks_range(past.series[f"{ns}/Deployment/{name}/{ctr}/{res}"], now, pd.Timedelta("7D"), replicas, res)
        assert r.target == max(wanted[(key, ctr, res)].target, low) < 10 * wanted[(key, ctr, res)].target
        assert any("the workload's own hourly peaks" in step for step in r.reason.steps), r.reason.steps
    s = fast_settings()
    s.loop.forecast_refresh = None
    s.guardrails.peaks_window = ""
    ratios = ServingLoop(s, MemorySource(past), StaticCluster(objects), DryRunSink(), registry_dir=str(reg))
    for (key, ctr, res), r in recs(ratios.run_once()).items():
        assert r.target == 10 * wanted[(key, ctr, res)].target  # half of the published, no further


def test_in_place_series_are_decided_once_an_interval_at_their_own_step(tidal):
    """Runs 5 minutes apart for an hour: each series is decided at the step of the hour its id hashes to
    (crc32 mod 12), as replay decides once an hour, and holds its request in between, saying until
    when; a run forecasts only the series it decides. A series gone stale gets no request."""
    c, hist, reg = tidal
    objects = regimed(cluster_objects(c), "InPlaceOrRecreate")
    start = END - HOUR - STEP
    loop, source = loop_on(objects, hist.window(None, start), reg)
    first = recs(loop.run_once())
    last = {k: r.target for k, r in first.items()}
    decided: dict[tuple, list[pd.Timestamp]] = {k: [] for k in first}
    for i in range(1, 13):
        end = start + i * STEP
        source.history = hist.window(None, end)
        origin = end  # the window's newest sample is at end - STEP
        got = recs(loop.run_once())
        now = [k for k, r in got.items() if "held until" not in r.reason.steps[0]]
        for k, r in got.items():
            _, ns, name = k[0].split("/")
            sid = f"{ns}/Deployment/{name}/{k[1]}/{k[2]}"
            mine = (origin.value // STEP.value) % 12 == zlib.crc32(sid.encode()) % 12
            assert (k in now) == mine, (k, origin, r.reason.steps[0])
            if k in now:
                decided[k].append(origin)
            else:
                assert r.target == last[k], (k, r.reason.steps)
                assert r.reason.model.startswith("hour_peak_lightgbm@") and "decided at" in r.reason.steps[0]
            last[k] = r.target
        batch = loop.decision_time.tidal.batch
        made = batch[1] if batch is not None and batch[0] == origin else {}
        assert len(made) == len(now), (origin, sorted(made), now)
    assert all(len(v) == 1 for v in decided.values()), decided
    # a sample missing just before the origin, off the series' own step: its request is not held, the
    # hour-peak model gives none and the day-ahead forecast serves, saying why
    sid = "shop/Deployment/checkout/app/memory"
    key = ("VerticalPodAutoscaler/shop/checkout", "app", "memory")
    end = next(e for e in (start + 13 * STEP, start + 14 * STEP)
               if (e.value // STEP.value) % 12 != zlib.crc32(sid.encode()) % 12)
    series = dict(hist.window(None, end).series)
    series[sid] = series[sid][series[sid].index < end - STEP]  # newest sample at origin - 2 steps
    source.history = History(series, STEP)
    late = recs(loop.run_once())
    assert not late[key].reason.model.startswith("hour_peak"), late[key].reason.steps
    assert late[key].reason.steps[0].startswith(f"hour_peak_lightgbm: no forecast at {end}"), late[key].reason.steps


def test_a_series_whose_seasonal_rule_cost_less_is_served_the_rule_for_the_day(tidal):
    """A series whose scored steps of the day before cost less under the seasonal rule than under the
    model is served the rule's request at its next decision (label and reason say so, with both
    costs) and holds it between decisions; the others keep the model."""
    from autoscaler.logic.rule_choice import DAY_NS, Tally, rule_request
    from predictor.timestamps import epoch_ns

    c, hist, reg = tidal
    objects = regimed(cluster_objects(c), "InPlaceOrRecreate")
    start = END - HOUR - STEP
    loop, source = loop_on(objects, hist.window(None, start), reg)
    recs(loop.run_once())
    levels = loop.decision_time.tidal.levels
    sid = "shop/Deployment/checkout/app/memory"
    key = ("VerticalPodAutoscaler/shop/checkout", "app", "memory")
    choice = levels[sid].choice
    assert choice.rule is False and "model serves" in choice.why
    yesterday = (start.value - start.value % DAY_NS) - DAY_NS
    choice.tallies[yesterday] = (Tally(0.5 * 300, 0, 300), Tally(0.2 * 300, 3, 300))  # model, rule
    choice.day = None  # as at a new UTC day: the next decision chooses again
    end = start + HOUR  # every series' last decision an hour old: all decide now
    source.history = hist.window(None, end)
    got = recs(loop.run_once())
    r = got[key]
    assert r.reason.model == "seasonal_rule", r.reason.steps
    assert r.reason.steps[0].startswith("seasonal rule: the median of the next 60 min's peak")
    assert "model 0.500, seasonal rule 0.200" in r.reason.steps[0]
    y = source.history.series[sid]
    assert levels[sid].served.value == pytest.approx(rule_request(y.to_numpy(float), epoch_ns(y.index), end.value,
                                                                  HOUR.value))
    others = [k for k in got if k != key]
    assert others and all(got[k].reason.model.startswith("hour_peak_lightgbm@") for k in others)
    # five minutes on, off its step: the rule's request holds, and says so
    nxt = end + STEP
    if (nxt.value // STEP.value) % 12 == zlib.crc32(sid.encode()) % 12:
        nxt += STEP
    source.history = hist.window(None, nxt)
    held = recs(loop.run_once())[key]
    assert held.target == r.target and held.reason.model == "seasonal_rule"
    assert "held until its next decision" in held.reason.steps[0]
    # the run after, still off its step: the same request and reason, naming the decision and the next one
    slot = zlib.crc32(sid.encode()) % 12
    after = nxt + STEP
    if (after.value // STEP.value) % 12 == slot:
        after += STEP
    source.history = hist.window(None, after)
    again = recs(loop.run_once())[key]
    due = next(end + k * STEP for k in range(1, 13) if ((end + k * STEP).value // STEP.value) % 12 == slot)
    assert again.target == r.target and again.reason.steps[0] == held.reason.steps[0]
    assert f"decided at {end:%H:%M} UTC, held until its next decision at {due:%H:%M}" in again.reason.steps[0]


def test_train_vpa_interval_sets_how_often_serve_decides_in_place(tidal, tmp_path):
    """`tidewise train --vpa-interval 30m`: the VPA model forecasts the next 30 min's peak (span 6
    steps) and serve decides each in-place series once every 30 min, at its own step of the half
    hour, the reason naming the interval."""
    c, hist, reg = tidal
    reg30 = tmp_path / "models"
    proc = run_main("train", "--source", "file", "--input", str(reg.parent / "history.csv"), "--registry",
                    str(reg30), "--folds", "1", "--no-global", "--vpa-interval", "30m")
    assert proc.returncode == 0, proc.stderr
    assert registry.load_version(str(reg30)).decision_models["vpa"].span == 6
    objects = regimed(cluster_objects(c), "InPlaceOrRecreate")
    start = END - HOUR - STEP
    loop, source = loop_on(objects, hist.window(None, start), reg30)
    first = recs(loop.run_once())
    assert all("the next 30 min's peak" in r.reason.steps[0] for r in first.values()), first
    decided: dict[tuple, int] = {k: 0 for k in first}
    for i in range(1, 7):
        end = start + i * STEP
        source.history = hist.window(None, end)
        for k, r in recs(loop.run_once()).items():
            sid = f"{k[0].split('/')[1]}/Deployment/{k[0].split('/')[2]}/{k[1]}/{k[2]}"
            mine = (end.value // STEP.value) % 6 == zlib.crc32(sid.encode()) % 6
            assert ("held until" not in r.reason.steps[0]) == mine, (k, end, r.reason.steps[0])
            decided[k] += mine
    assert set(decided.values()) == {1}, decided


@pytest.mark.parametrize("interval", ["7m", "12h", "0m", "soon"])
def test_train_refuses_a_vpa_interval_off_the_step_in_one_line(tmp_path, interval):
    proc = run_main("train", "--source", "synthetic", "--registry", str(tmp_path / "models"), "--vpa-interval", interval)
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1, proc.stderr
    assert proc.stderr.startswith("tidewise train: error: --vpa-interval"), proc.stderr
    assert not (tmp_path / "models").exists()


def test_series_the_stock_rule_serves_read_each_hours_target_at_their_own_step(tidal, monkeypatch):
    """Restart regime, the stock rule chosen (changes priced high, so no plan wins): runs 5 minutes apart
    through an hour. Each series reads the new hour's stock target at the step of the hour its id
    hashes to (crc32 mod 12), holding the previous hour's until then and saying when it reads, so the
    fleet's reads spread over the hour; the target it reads is the stock rule's for that hour. A run
    reads the series due at its step all at once (one `stock_at` call)."""
    c, hist, reg = tidal
    batches: list[set[str]] = []
    batched = tidal_routine.stock_at

    def spy(series, t):
        batches.append(set(series))
        return batched(series, t)

    monkeypatch.setattr(tidal_routine, "stock_at", spy)
    start = END - HOUR - STEP  # the first run's origin: 22:55, so the loop's hour turns at the next run
    loop, source = loop_on(regimed(cluster_objects(c), "Recreate"), hist.window(None, start), reg)
    loop.settings.vpa.change_weight = 100.0
    first = recs(loop.run_once())
    plans = loop.decision_time.tidal.plans
    assert plans and all(ch.values is None for ch in plans.values())  # every series on the stock rule
    assert all("the stock rule's target for 22:00 UTC: the stock rule" in r.reason.steps[0] for r in first.values())
    hour = END - HOUR
    read: dict[str, pd.Timestamp] = {}
    widest = 0
    for i in (*range(1, 8), *range(9, 13)):  # 23:35's run missed: 23:40's reads two steps' series at once
        origin = start + i * STEP
        source.history = hist.window(None, origin)
        batches.clear()
        got = recs(loop.run_once())
        now = set()
        for (key, ctr, res), r in got.items():
            _, ns, name = key.split("/")
            sid = f"{ns}/Deployment/{name}/{ctr}/{res}"
            step = zlib.crc32(sid.encode()) % 12
            due = hour + step * STEP
            if origin >= due:  # this run's step of the hour is at or past the series' own
                if sid not in read:
                    now.add(sid)
                read.setdefault(sid, origin)
                first_step = r.reason.steps[0]
                assert first_step.startswith("restart regime: the stock rule's target for 23:00 UTC: "), first_step
                assert list(plans[sid].stock) == [hour]
            else:
                assert r.reason.steps[0].startswith(
                    f"restart regime: the stock rule's target for 22:00 UTC (the 23:00 one is read at this series' "
                    f"step of the hour, {due:%H:%M}): "), r.reason.steps[0]
                assert r.target == first[(key, ctr, res)].target  # the previous hour's, held
        assert batches == ([now] if now else []), (origin, batches, now)  # the run's reads in one call
        widest = max(widest, len(now))
    assert set(read) == set(plans) and len(set(read.values())) > 1  # every series read it, not all in one run
    assert widest == 2  # the fixture's series read at steps 7, 8 and 10 of the hour
    for sid, ch in plans.items():  # the stock rule's target, at the factor the day's choice served it at
        y = hist.series[sid]
        assert 0.8 <= ch.stock_factor <= 1.0
        assert ch.stock[hour] == DayPlanner(y[y.index < END], loop.settings.vpa, 3).stock(hour) * ch.stock_factor


def test_a_day_whose_hours_the_stock_rule_read_is_not_worked_out_again_at_midnight(tidal, monkeypatch):
    """Restart regime, the stock rule chosen: a series reads each hour's stock target as the day goes
    (`DayChoice.hourly`). A loop that ran every hour of 2026-10-31 hands those reads to the next day's
    planner, which works out no stock target of that day again, and keeps them for the day after; they are
    the stock rule's targets of those hours (as replay's planner on the whole series has them). A loop
    that only saw the day's last hour works the whole day out at midnight."""
    c, hist, reg = tidal
    day = END - pd.Timedelta("2D")
    worked: list[tuple[str, pd.Timestamp]] = []
    fill = DayPlanner._fill

    def spy(self, days):  # which days' stock targets the planners work out
        worked.extend((self.y.name, pd.Timestamp(d, tz="UTC")) for d in days if d not in self._stock)
        return fill(self, days)

    monkeypatch.setattr(DayPlanner, "_fill", spy)
    objects = regimed(cluster_objects(c), "Recreate")
    every_hour, source = loop_on(objects, hist.window(None, day + STEP), reg)
    late, late_source = loop_on(objects, hist.window(None, day + pd.Timedelta("1D") - STEP), reg)
    for loop in (every_hour, late):
        loop.settings.vpa.change_weight = 100.0  # no plan wins: every series on the stock rule
    recs(every_hour.run_once())
    for h in range(1, 24):  # each hour's 55th minute: past every series' own step of the hour
        source.history = hist.window(None, day + h * HOUR + 11 * STEP)
        evening = recs(every_hour.run_once())
    recs(late.run_once())
    plans = every_hour.decision_time.tidal.plans
    assert plans and all(ch.values is None and np.isfinite(ch.hourly).all() for ch in plans.values())
    assert all(np.isnan(ch.hourly[:23]).all() for ch in late.decision_time.tidal.plans.values())
    worked.clear()
    midnight = {}
    for loop, src in ((every_hour, source), (late, late_source)):
        src.history = hist.window(None, day + pd.Timedelta("1D") + STEP)
        midnight[id(loop)] = recs(loop.run_once())
    assert {d for _, d in worked} == {day}  # only the late loop's planners worked the day out
    assert len(worked) == len(plans)
    for (key, ctr, res), r in midnight[id(every_hour)].items():  # 00:05: 23:00's held until the series' step
        _, ns, name = key.split("/")
        step = zlib.crc32(f"{ns}/Deployment/{name}/{ctr}/{res}".encode()) % 12
        assert step > 1 and r.target == evening[(key, ctr, res)].target, (step, r.reason.steps[0])
        assert r.reason.steps[0].startswith(
            f"restart regime: the stock rule's target for 23:00 UTC (the 00:00 one is read at this series' step "
            f"of the hour, 00:{5 * step:02d}): the stock rule"), r.reason.steps[0]
    for sid, ch in plans.items():
        assert ch.day == day + pd.Timedelta("1D")
        y = hist.series[sid]
        whole = DayPlanner(y, every_hour.settings.vpa, 3).stock_day(day)
        assert np.array_equal(ch.memo.stock[-2], whole) and ch.memo.has[-2, 1]  # kept for the day after


def test_initial_vpas_serve_the_day_plans_highest_hour_over_a_pods_life(tidal):
    """updateMode Initial: a request is kept for a pod's life, so each series serves the highest hour of
    its day plan over the next 24 h (or the stock rule's target, made for a pod's life), never less than
    what the restart regime gives the hour."""
    from contracts.quantity import usage_to_units

    c, hist, reg = tidal
    restart, _ = loop_on(regimed(cluster_objects(c), "Recreate"), hist.window(None, END - HOUR - STEP), reg)
    hourly = recs(restart.run_once())
    loop, _ = loop_on(regimed(cluster_objects(c), "Initial"), hist.window(None, END - HOUR - STEP), reg)
    rep = loop.run_once()
    planned = stock = 0
    for key, r in recs(rep).items():
        d = next(d for d in rep.vpa if d.key == key[0])
        sid = f"{d.namespace}/{d.target_kind}/{d.target_name}/{key[1]}/{key[2]}"
        choice = loop.decision_time.tidal.plans[sid]
        assert r.reason.model == "day_plan" and any("regime at-creation" in s for s in r.reason.steps)
        if choice.values is None:
            stock += 1
            assert r.reason.steps[0].startswith("the stock rule's target (8 days' p90 + 15%, made to hold for a "
                                                "pod's life), as the restart regime reads it: the stock rule's "
                                                "target for 22:00 UTC"), r.reason.steps[0]
            assert r.reason.raw == hourly[key].reason.raw
        else:
            planned += 1
            assert r.reason.steps[0].startswith("the day plan's highest hour over the next 24 h from 22:00 UTC")
            assert r.reason.raw == usage_to_units(key[2], float(np.nanmax(choice.values)) / d.replicas)
            assert r.reason.raw > hourly[key].reason.raw  # 22:00 is not the day's highest hour
        assert r.reason.raw >= hourly[key].reason.raw
    assert planned + stock == len(hourly)
