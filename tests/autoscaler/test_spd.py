"""Katalyst ServiceProfileDescriptors written by serve, through the REAL `kubernetes` client against
the API fake (which refuses any SPD breaking the vendored CRD schema with 422): one per opted-in
workload, created once, not rewritten while the profile is the same, rewritten when the profile
changes or Tidewise's part was edited by hand, other parts left alone, nothing written in a dry run."""
from __future__ import annotations

import copy

import pandas as pd
import pytest

from autoscaler.input.cluster import ApiCluster
from autoscaler.settings import SPD_OPT_IN, SpdSettings
from autoscaler.model.spd import INDICATOR, SpdView
from autoscaler.output.sinks import DRY_RUN, WRITTEN, ApiSink, DryRunSink
from autoscaler.routines.loop import OK, ServingLoop
from contracts.errors import InputError
from tests.autoscaler.conftest import END, fast_settings, source_of, validate_object

SPD = "ServiceProfileDescriptor"
KINDS = (SPD,)


def opt_in(objects, name="frontend"):
    objects = copy.deepcopy(objects)
    dep = next(o for o in objects if o["kind"] == "Deployment" and o["metadata"]["name"] == name)
    dep["metadata"].setdefault("annotations", {})[SPD_OPT_IN] = "true"
    return objects, dep["metadata"]["namespace"]


@pytest.fixture
def api(api_factory):
    return api_factory


class Clock:
    """The loop's clock, moved by the test (the history ends at END)."""

    def __init__(self):
        self.now = END

    def __call__(self):
        return self.now


def loop_for(kube, history, sink=None, s=None, clock=None):
    return ServingLoop(s or fast_settings(), source_of(history), ApiCluster(kube, KINDS), sink or ApiSink(kube),
                       clock=clock)


def spd_writes(fake, method=None):
    return [r for r in fake.writes(method) if "serviceprofiledescriptors" in r.path]


def spds(fake):
    return [o for o in fake.objects.values() if o["kind"] == SPD]


def test_an_opted_in_workload_gets_one_valid_spd_and_others_none(api, objects, history):
    objs, ns = opt_in(objects)
    fake, kube = api(objs)
    rep = loop_for(kube, history).run_once()
    assert rep.outcome == OK
    assert [r.outcome for r in rep.results if r.key.startswith(SPD)] == [WRITTEN]
    (spd,) = spds(fake)  # the five workloads without the annotation got none
    validate_object(spd)
    assert spd["metadata"] == {**spd["metadata"], "name": "frontend", "namespace": ns}
    assert spd["spec"]["targetRef"] == {"apiVersion": "apps/v1", "kind": "Deployment", "name": "frontend"}
    (ind,) = spd["spec"]["extendedIndicator"]
    profile = ind["indicators"][f"{INDICATOR}Indicators"]
    assert ind["name"] == INDICATOR and set(profile["resources"]) == {"cpu", "memory"}
    assert profile["resources"]["cpu"]["class"] in ("tidal", "flat", "bursty", "trending")
    # the daily usage profile as Katalyst aggregated metrics: p50 and p95 of each hour, workload totals
    aggs = spd["status"]["aggMetrics"]
    assert [a["scope"] for a in aggs] == ["tidewise.io/day-p50", "tidewise.io/day-p95"]
    assert all(a["aggregator"] == "sum" and len(a["items"]) == 24 for a in aggs)
    p50 = [int(i["containers"][0]["usage"]["cpu"].rstrip("m")) for i in aggs[0]["items"]]
    p95 = [int(i["containers"][0]["usage"]["cpu"].rstrip("m")) for i in aggs[1]["items"]]
    assert all(a <= b for a, b in zip(p50, p95)) and max(p50) > min(p50)  # a tide, never crossing
    # created without status (the API server drops it on create), then the status written
    assert [r.method for r in spd_writes(fake)] == ["POST", "PATCH"]
    assert "status" not in spd_writes(fake)[0].body and spd_writes(fake)[1].path.endswith("/status")


def test_an_unchanged_profile_is_not_rewritten_and_a_changed_one_is(api, objects, history):
    objs, ns = opt_in(objects)
    fake, kube = api(objs)
    loop = loop_for(kube, history)
    loop.run_once()
    first = copy.deepcopy(spds(fake)[0])
    n = len(spd_writes(fake))
    rep = loop.run_once()
    assert len(spd_writes(fake)) == n and not [r for r in rep.results if r.key.startswith(SPD)]
    # a fresh serve process (no memory of its writes) compares with the cluster: still nothing to write
    loop_for(kube, history).run_once()
    assert len(spd_writes(fake)) == n
    # the workload's usage doubles: a new profile, patched (spec and status), not created again
    busier = copy.deepcopy(history)
    for sid in [s for s in busier.series if s.startswith(f"{ns}/Deployment/frontend/")]:
        busier.series[sid] = busier.series[sid] * 2
    rep = loop_for(kube, busier).run_once()
    assert [r.outcome for r in rep.results if r.key.startswith(SPD)] == [WRITTEN]
    assert {r.method for r in spd_writes(fake)[n:]} == {"PATCH"}
    now = spds(fake)[0]
    validate_object(now)
    assert now["status"]["aggMetrics"] != first["status"]["aggMetrics"]


def test_a_hand_edit_of_tidewises_part_is_rewritten_and_other_parts_are_kept(api, objects, history):
    objs, ns = opt_in(objects)
    fake, kube = api(objs)
    clock = Clock()
    loop = loop_for(kube, history, clock=clock)
    loop.run_once()
    written = copy.deepcopy(spds(fake)[0])
    edited = copy.deepcopy(written)
    edited["status"]["aggMetrics"][0]["items"] = edited["status"]["aggMetrics"][0]["items"][:3]
    edited["status"]["aggMetrics"].append({"aggregator": "avg", "scope": "ResourcePortraitIndicatorPlugin",
                                           "items": []})
    edited["spec"]["businessIndicator"] = [{"name": "rpc-latency", "indicators": [
        {"indicatorLevel": "LowerBound", "value": 20}]}]
    edited["spec"]["baselinePercent"] = 10
    fake.put(edited)
    clock.now += pd.Timedelta("5min")  # past the 5-minute cool-down of the first write, the same day
    rep = loop.run_once()
    assert f"{SPD}/{ns}/frontend" in rep.drifted
    now = spds(fake)[0]
    validate_object(now)
    assert SpdView(now).owned_part() == SpdView(written).owned_part()  # Tidewise's part as it wrote it
    assert now["spec"]["businessIndicator"] == edited["spec"]["businessIndicator"]  # the user's, untouched
    assert now["spec"]["baselinePercent"] == 10
    assert [a["scope"] for a in now["status"]["aggMetrics"]][0] == "ResourcePortraitIndicatorPlugin"


def test_an_spd_of_that_name_targeting_another_workload_is_left_alone(api, objects, history):
    objs, ns = opt_in(objects)
    other = {"apiVersion": "workload.katalyst.kubewharf.io/v1alpha1", "kind": SPD,
             "metadata": {"name": "frontend", "namespace": ns},
             "spec": {"targetRef": {"apiVersion": "apps/v1", "kind": "StatefulSet", "name": "frontend-db"}}}
    fake, kube = api(objs + [other])
    rep = loop_for(kube, history).run_once()
    assert not spd_writes(fake)
    assert "targets" in rep.skipped[f"{SPD}/{ns}/frontend"]


def test_dry_run_writes_nothing_and_reports_the_spd(api, objects, history):
    objs, _ = opt_in(objects)
    fake, kube = api(objs)
    sink = DryRunSink()
    loop = loop_for(kube, history, sink)
    rep = loop.run_once()
    assert not fake.writes() and not spds(fake)
    (change,) = [c for c in sink.changes if c.kind == SPD]
    assert change.create and [r.outcome for r in rep.results if r.key.startswith(SPD)] == [DRY_RUN]
    validate_object(change.obj)  # what would be created is valid
    rep = loop.run_once()  # the same decision is not reported again by the same loop
    assert not [r for r in rep.results if r.key.startswith(SPD)] and not fake.writes()


def test_spds_off_are_neither_read_nor_written(api, objects, history):
    objs, _ = opt_in(objects)
    fake, kube = api(objs)
    s = fast_settings()
    s.spd.enabled = False
    rep = loop_for(kube, history, s=s).run_once()
    assert "spd" not in rep.sections and not spd_writes(fake)


def test_too_little_history_is_skipped_with_a_reason(api, objects, history):
    objs, ns = opt_in(objects)
    fake, kube = api(objs)
    short = history.window(history.end - pd.Timedelta("36h"), None)
    rep = loop_for(kube, short).run_once()
    assert not spd_writes(fake)
    assert "needs 2 whole days" in rep.skipped[f"{SPD}/{ns}/frontend"]


@pytest.mark.parametrize("bad", [{"period": "month"}, {"quantiles": (0.5, 1.5)}, {"min_days": 0}])
def test_bad_spd_settings_are_input_errors(bad):
    with pytest.raises(InputError, match="serve.spd"):
        SpdSettings(**bad)


def profile_inputs(history, now, period="day", window="8d"):
    """The frontend workload's ProfileInputs as serve builds them at `now` from an 8-day fetch."""
    from autoscaler.logic.spd import ProfileInputs, period_start
    from predictor.durations import DAY, parse_duration

    seen = history.window(now - parse_duration(window), now)
    ids = [s for s in seen.series if "/Deployment/frontend/" in s]
    containers: dict = {}
    for sid in ids:
        _, _, _, container, res = sid.split("/")
        containers.setdefault(container, {})[res] = seen.series[sid]
    start = period_start(now, period)
    span = DAY if period == "day" else 7 * DAY
    ns = ids[0].split("/")[0]
    return ProfileInputs(ns, "Deployment", "frontend", "apps/v1", containers, start,
                         pd.Timedelta(days=int((parse_duration(window) - span) / DAY)), seen.step)


def test_the_wanted_spd_is_the_same_all_day(history):
    """Two runs of one day (early morning, late evening) want the same SPD, though their 8-day
    windows differ: an SPD is rewritten once a day, not on every run."""
    from autoscaler.logic.spd import desired_spd

    morning, evening = END - pd.Timedelta("20h"), END - pd.Timedelta("5min")
    a = desired_spd(profile_inputs(history, morning), SpdSettings())
    b = desired_spd(profile_inputs(history, evening), SpdSettings())
    assert a == b
    assert a["status"]["aggMetrics"][0]["items"][0]["timestamp"] == (END - pd.Timedelta("23h")).strftime(
        "%Y-%m-%dT%H:%M:%SZ")  # 01:00 of that day closes its first hour
    c = desired_spd(profile_inputs(history, END + pd.Timedelta("5min")), SpdSettings())  # the next day
    assert c["status"] != a["status"]


def test_a_weekly_profile_has_an_item_per_hour_of_the_week(history):
    from autoscaler.logic.spd import NotEnoughHistory, desired_spd

    s = SpdSettings(period="week")
    with pytest.raises(NotEnoughHistory, match="needs 7 whole days"):  # 8 days of fetch leave 1 before Monday
        desired_spd(profile_inputs(history, END, "week"), s)
    spd = desired_spd(profile_inputs(history, END, "week", window="16d"), s)
    validate_object(spd)
    items = spd["status"]["aggMetrics"][0]["items"]
    assert spd["status"]["aggMetrics"][0]["scope"] == "tidewise.io/week-p50"
    # the fixture has 9 days before END: the hours of the week it covers, each once, from Monday 01:00
    assert len(items) == len({i["timestamp"] for i in items}) > 24
    assert pd.Timestamp(items[0]["timestamp"]).day_of_week == 0
