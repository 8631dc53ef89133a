"""run_once end to end (offline: objects in memory, the file sink or the dry-run sink), and the
faults of issue 5: each checks that nothing wrong was written."""
from __future__ import annotations

import copy
import os

import numpy as np
import pandas as pd
import pytest
import yaml

from autoscaler.logic.decide_hpa import observed_level_ratio
from autoscaler.metrics import Metrics
from autoscaler.output.sinks import DRY_RUN, DryRunSink, FileSink
from autoscaler.routines.loop import FROZEN, KILLED, OK, ServingLoop
from autoscaler.settings import ServeSettings
from predictor.errors import SourceError
from predictor.pipeline.forecasting import forecast_history
from predictor.history import History
from predictor.registry import RegistryVersion
from predictor.types import Forecast
from tests.autoscaler.conftest import fast_settings, StaticCluster, source_of, validate_object


def loop_for(objects, history, sink=None, settings=None, **kw):
    return ServingLoop(settings or fast_settings(), source_of(history), StaticCluster(objects), sink or DryRunSink(), **kw)


def written(rep):
    return {c.key: c for c in rep.changes}


def test_one_run_decides_every_kind_and_every_object_is_valid(objects, history, tmp_path):
    sink = FileSink(str(tmp_path))
    rep = loop_for(objects, history, sink).run_once()
    assert rep.outcome == OK, rep.reason
    assert len(rep.vpa) == 6 and len(rep.hpa) == sum(o["kind"] == "HorizontalPodAutoscaler" for o in objects)
    assert {p.node for p in rep.reclaim} == {"node-0", "node-1"}
    assert rep.skipped == {}
    kinds = {c.kind for c in rep.changes}
    assert {"VerticalPodAutoscaler", "Node"} <= kinds
    files = [os.path.join(d, f) for d, _, fs in os.walk(tmp_path) for f in fs if f.endswith(".yaml")]
    assert len(files) == len(rep.changes)
    for path in files:
        with open(path) as fh:
            validate_object(yaml.safe_load(fh))
    for p in rep.reclaim:
        assert isinstance(p.reclaimed_millicpu, int) and p.reclaimed_millicpu >= 0
        assert isinstance(p.reclaimed_memory_bytes, int) and p.reclaimed_memory_bytes >= 0


def test_vpa_recommendation_follows_the_forecast(objects, history, small):
    cluster = small[0]
    rep = loop_for(objects, history).run_once()
    w = next(w for w in cluster.workloads if w.kind == "StatefulSet" or w.shape not in ("tidal", "bursty"))
    d = next(d for d in rep.vpa if d.name == w.name)
    rec = d.containers[0].resources["memory"]
    # the per-pod memory target lies between the per-pod median usage of the last day and 2x its peak
    y = history.series[w.key("memory").id]
    day = y[y.index >= y.index[-1] - pd.Timedelta(days=1)] / w.replicas
    assert day.median() <= rec.target <= 2 * day.max()
    assert rec.target >= np.ceil(day.max())  # never below the last day's peak


def test_nothing_is_rewritten_when_nothing_changed(objects, history):
    settings = fast_settings()
    settings.reclaim.max_step_fraction = 1.0  # else nodes climb towards their value over several runs
    loop = loop_for(objects, history, settings=settings)
    first = loop.run_once()
    # the cluster now holds what was written
    applied = copy.deepcopy(objects)
    by_key = {c.key: c.obj for c in first.changes}
    applied = [by_key.get(_key(o), o) for o in applied]
    second = loop_for(applied, history, settings=settings).run_once()
    assert first.changes and second.outcome == OK and second.changes == []


def _key(o):
    md = o["metadata"]
    return f"{o['kind']}/{md['namespace']}/{md['name']}" if md.get("namespace") else f"{o['kind']}/{md['name']}"


def test_dry_run_is_the_default_sink_and_writes_nothing(objects, history):
    sink = DryRunSink()
    rep = loop_for(objects, history, sink).run_once()
    assert rep.results and all(r.outcome == DRY_RUN for r in rep.results)
    assert len(sink.changes) == len(rep.changes)
    assert ServeSettings().loop.apply is False


class FailingSource:
    name = "prometheus"

    def fetch(self, start, end, step):
        raise SourceError("connection refused (Prometheus is down)")


def test_source_down_freezes_writes_nothing_keeps_metrics_and_backs_off(objects, history):
    metrics = Metrics()
    sink = DryRunSink()
    loop = ServingLoop(fast_settings(), source_of(history), StaticCluster(objects), sink, metrics=metrics)
    good = loop.run_once()
    assert good.outcome == OK
    n_good = len(sink.changes)
    before = metrics.exposition()
    loop.source = FailingSource()
    bad = loop.run_once()
    assert bad.outcome == FROZEN and "connection refused" in bad.reason
    assert bad.changes == [] and bad.results == [] and len(sink.changes) == n_good
    # the decision gauges still hold the last good values
    for line in before.decode().splitlines():
        if line.startswith(("tidewise_predicted_replicas{", "tidewise_reclaimed_millicpu{")):
            assert line in metrics.exposition().decode()
    assert loop.next_delay() == 120.0  # 60 s doubled after one freeze
    loop.run_once()
    assert loop.next_delay() == 240.0


def test_stale_history_freezes(objects, history):
    now = history.end + pd.Timedelta("2h")
    loop = loop_for(objects, history, clock=lambda: now)
    rep = loop.run_once()
    assert rep.outcome == FROZEN and "stale" in rep.reason and rep.changes == []


def test_a_three_hour_gap_at_the_end_of_one_series_skips_only_that_workload(objects, history, small):
    w = small[0].workloads[0]
    sid = w.key("memory").id
    y = history.series[sid].copy()
    y[y.index >= y.index[-1] - pd.Timedelta("3h")] = np.nan
    history.series[sid] = y
    # keep the last sample so the series' end stays aligned with the others (a gap, not a shorter series)
    rep = loop_for(objects, history).run_once()
    assert rep.outcome == OK
    assert sid in rep.skipped
    d = next((d for d in rep.vpa if d.name == w.name), None)
    # memory of that workload is not recommended from a 3-hour-old picture; cpu still is
    assert d is None or "memory" not in d.containers[0].resources
    assert len(rep.vpa) >= 5


def test_a_three_hour_gap_in_the_middle_still_gives_finite_valid_decisions(objects, history, small):
    for sid, y in list(history.series.items()):
        y = y.copy()
        mid = y.index[-1] - pd.Timedelta("30h")
        y[(y.index >= mid) & (y.index < mid + pd.Timedelta("3h"))] = np.nan
        history.series[sid] = y
    rep = loop_for(objects, history).run_once()
    assert rep.outcome == OK and not rep.skipped
    for c in rep.changes:
        validate_object(c.obj)
    for d in rep.vpa:
        for c in d.containers:
            for r in c.resources.values():
                assert 0 < r.lower <= r.target <= r.upper


def test_nan_forecasts_skip_that_series_only(objects, history, small):
    poisoned = small[0].workloads[1].key("cpu").id

    def forecaster(hist: History, req) -> list[Forecast]:
        out = forecast_history(hist, req)
        for fc in out:
            if fc.series == poisoned:
                fc.values = fc.values.copy()
                fc.values[5, :] = np.nan
        return out

    rep = loop_for(objects, history, forecaster=forecaster).run_once()
    assert rep.outcome == OK
    assert poisoned in rep.skipped and "non-finite" in rep.skipped[poisoned]
    w = small[0].workloads[1]
    for c in rep.changes:
        if c.kind == "HorizontalPodAutoscaler" and c.name == w.name:
            pytest.fail("an HPA was written from a NaN forecast")
        if c.kind == "VerticalPodAutoscaler" and c.name == w.name:
            assert all("cpu" not in r.get("target", {}) for r in c.obj["status"]["recommendation"]["containerRecommendations"])
    for c in rep.changes:
        validate_object(c.obj)


def test_a_vpa_naming_another_recommender_is_left_alone(objects, history):
    vpas = [o for o in objects if o["kind"] == "VerticalPodAutoscaler"]
    vpas[0]["spec"]["recommenders"] = [{"name": "custom-recommender"}]
    vpas[1]["spec"].pop("recommenders")  # no recommenders: the stock (default) recommender's
    rep = loop_for(objects, history).run_once()
    names = {c.name for c in rep.changes if c.kind == "VerticalPodAutoscaler"}
    assert vpas[0]["metadata"]["name"] not in names and vpas[1]["metadata"]["name"] not in names
    assert len(names) == len(vpas) - 2


@pytest.mark.parametrize("breakage", [
    lambda h: h["spec"].pop("maxReplicas"),
    lambda h: h["spec"].update(minReplicas=9, maxReplicas=3),
    lambda h: h["spec"].update(scaleTargetRef={"kind": "Deployment", "name": "does-not-exist"}),
    lambda h: h["spec"].update(metrics=[{"type": "Resource", "resource": {"name": "cpu", "target": {"type": "Utilization"}}}]),
    lambda h: h.update(spec="not a mapping"),
    lambda h: h["metadata"].setdefault("annotations", {}).update({"tidewise.io/user-min-replicas": "many"}),
])
def test_a_malformed_hpa_is_skipped_and_others_are_served(objects, history, breakage):
    hpas = [o for o in objects if o["kind"] == "HorizontalPodAutoscaler"]
    breakage(hpas[0])
    rep = loop_for(objects, history).run_once()
    broken = f"HorizontalPodAutoscaler/{hpas[0]['metadata']['namespace']}/{hpas[0]['metadata']['name']}"
    assert broken in rep.skipped
    assert broken not in {c.key for c in rep.changes}
    assert len(rep.hpa) == len(hpas) - 1
    for c in rep.changes:
        validate_object(c.obj)


def test_hpa_floor_is_within_bounds_and_keeps_the_user_minimum(objects, history):
    rep = loop_for(objects, history).run_once()
    for d in rep.hpa:
        assert d.user_min_replicas <= d.min_replicas <= d.max_replicas
    for c in rep.changes:
        if c.kind == "HorizontalPodAutoscaler":
            assert c.obj["metadata"]["annotations"]["tidewise.io/user-min-replicas"] == "1"
            assert c.patch["spec"]["minReplicas"] == c.obj["spec"]["minReplicas"]


def test_max_replicas_caps_the_floor(objects, history):
    for o in objects:
        if o["kind"] == "HorizontalPodAutoscaler":
            o["spec"]["maxReplicas"] = 1
    rep = loop_for(objects, history).run_once()
    assert rep.hpa and all(d.min_replicas == 1 for d in rep.hpa)
    assert not [c for c in rep.changes if c.kind == "HorizontalPodAutoscaler"]


def registry_version(version):
    """A version as the registry loader returns it, holding nothing: these tests' forecasters ignore it."""
    return RegistryVersion(path=f"/models/{version}", version=version, manifest={}, series={})


def test_a_registry_failing_its_checksum_keeps_the_last_good_one(objects, history):
    calls = []
    state = {"tampered": False}

    def loader(path):
        if state["tampered"]:
            raise ValueError(f"registry {path}: sha256 of model.joblib does not match the manifest")
        return registry_version("v1")

    def registry_forecaster(reg, path):
        def fc(hist, req):
            calls.append(reg.version)
            return forecast_history(hist, req)
        return fc

    s = fast_settings()
    s.loop.forecast_refresh = None  # forecast on every run, so that each run shows which registry it used
    loop = loop_for(objects, history, settings=s, registry_dir="/models", registry_loader=loader,
                    registry_forecaster=registry_forecaster)
    assert loop.run_once().registry == "v1"
    state["tampered"] = True
    rep = loop.run_once()
    assert rep.outcome == OK
    assert calls == ["v1", "v1"]  # the second run still forecasts with the verified v1
    assert "registry /models" in rep.skipped and "sha256" in rep.skipped["registry /models"]
    assert any("kept last good v1" in s.detail for s in rep.steps if s.name == "registry")


def test_kill_switch_stops_every_write(objects, history, tmp_path):
    switch = tmp_path / "kill"
    switch.write_text("stop\n")
    s = fast_settings()
    s.guardrails.kill_switch_file = str(switch)
    sink = FileSink(str(tmp_path / "out"))
    rep = loop_for(objects, history, sink, settings=s).run_once()
    assert rep.outcome == KILLED and rep.results == [] and sink.written == {}
    assert not (tmp_path / "out").exists()
    switch.write_text("run\n")
    assert loop_for(objects, history, sink, settings=s).run_once().outcome == OK and sink.written


@pytest.mark.parametrize("text,deliberate", [
    ("halt\n", False), ("STOP", True), ("", True), ("run please", False), ("runn", False), ("0", False),
    ("false", False), ("off", False), ("run\n" + " " * 5000 + "x", False),
])
def test_kill_switch_fails_closed_on_anything_but_run(objects, history, tmp_path, text, deliberate):
    switch = tmp_path / "kill"
    switch.write_text(text)
    s = fast_settings()
    s.guardrails.kill_switch_file = str(switch)
    sink = DryRunSink()
    rep = loop_for(objects, history, sink, settings=s).run_once()
    assert rep.outcome == KILLED and rep.results == [] and sink.changes == []
    assert rep.kill_deliberate is deliberate
    # a deliberate stop is an operator's choice; anything else is a fault that `serve --once` reports
    assert bool(rep.problems()) is not deliberate


@pytest.mark.parametrize("text", ["run", " RUN \n", "Run\r\n"])
def test_kill_switch_run_allows_writes(objects, history, tmp_path, text):
    switch = tmp_path / "kill"
    switch.write_text(text)
    s = fast_settings()
    s.guardrails.kill_switch_file = str(switch)
    rep = loop_for(objects, history, settings=s).run_once()
    assert rep.outcome == OK and rep.results and rep.problems() == []


@pytest.mark.parametrize("make", ["missing", "folder", "fifo", "not utf-8"])
def test_kill_switch_that_cannot_be_read_stops_writes(objects, history, tmp_path, make):
    switch = tmp_path / "kill"
    if make == "folder":
        switch.mkdir()
    elif make == "fifo":
        os.mkfifo(switch)  # opening it would block the loop: refused without opening
    elif make == "not utf-8":
        switch.write_bytes(b"\xffrun")
    s = fast_settings()
    s.guardrails.kill_switch_file = str(switch)
    sink = DryRunSink()
    rep = loop_for(objects, history, sink, settings=s).run_once()
    assert rep.outcome == KILLED and sink.changes == [] and not rep.kill_deliberate
    assert str(switch) in rep.reason and rep.problems()


def test_no_kill_switch_configured_means_none(objects, history):
    s = fast_settings()
    assert s.guardrails.kill_switch_file is None
    assert loop_for(objects, history, settings=s).run_once().outcome == OK


def test_cooldown_holds_a_second_write_of_the_same_object(objects, history):
    loop = loop_for(objects, history)
    first = loop.run_once()
    assert first.changes
    again = loop.run_once()  # same data, cluster not updated: the same changes, within the cool-down
    unsafe = [c for c in again.changes if not c.safe_direction]
    assert unsafe == []
    assert set(again.held) >= {c.key for c in first.changes if not c.safe_direction}


def test_vpa_decrease_is_limited_per_step(objects, history):
    vpa = next(o for o in objects if o["kind"] == "VerticalPodAutoscaler"
               and not o["spec"].get("resourcePolicy", {}).get("containerPolicies", [{}])[0].get("controlledResources"))
    vpa["status"] = {"recommendation": {"containerRecommendations": [
        {"containerName": "app", "target": {"cpu": "15", "memory": "60Gi"}}]}}
    s = fast_settings()
    s.guardrails.peaks_window = ""  # the ratios alone (the workload's own peaks would let it fall further)
    rep = loop_for(objects, history, settings=s).run_once()
    d = next(d for d in rep.vpa if d.name == vpa["metadata"]["name"])
    assert d.containers[0].resources["cpu"].target == 7500  # half of 15 cores, not the forecast
    assert "decrease limited" in d.containers[0].resources["cpu"].reason.summary()
    d = next(d for d in loop_for(objects, history).run_once().vpa if d.name == vpa["metadata"]["name"])
    assert d.containers[0].resources["cpu"].target < 7500  # by default: as low as the workload's hourly peaks


def test_katalyst_objects_validate_against_their_crds(objects, history, tmp_path):
    s = fast_settings()
    s.reclaim.write_cnr = True
    s.vpa.write_resource_recommend = True
    sink = FileSink(str(tmp_path))
    rep = loop_for(objects, history, sink, settings=s).run_once()
    kinds = [c.kind for c in rep.changes]
    assert kinds.count("CustomNodeResource") == 2 and kinds.count("ResourceRecommend") == 6
    for c in rep.changes:
        validate_object(c.obj)
    cnr = next(c.obj for c in rep.changes if c.kind == "CustomNodeResource")
    zones = cnr["status"]["topologyZone"][0]["children"]
    total = int(cnr["status"]["resources"]["allocatable"]["resource.katalyst.kubewharf.io/reclaimed_millicpu"])
    assert sum(int(z["resources"]["allocatable"]["resource.katalyst.kubewharf.io/reclaimed_millicpu"])
               for z in zones) == total


def test_an_invalid_object_would_be_caught_by_the_validation():
    # the validation used above is not vacuous: a VPA with a malformed quantity is refused
    bad = {"apiVersion": "autoscaling.k8s.io/v1", "kind": "VerticalPodAutoscaler", "metadata": {"name": "x"},
           "spec": {"targetRef": {"kind": "Deployment", "name": "x"}},
           "status": {"recommendation": {"containerRecommendations": [{"containerName": "c",
                                                                        "target": {"cpu": "1.5 cores"}}]}}}
    with pytest.raises(AssertionError):
        validate_object(bad)
    node = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n"}, "status": {"allocatable": {"cpu": []}}}
    with pytest.raises(Exception):
        validate_object(node)


def extend(history, steps=1, spike=None):
    """Every series one or more steps longer (values as the same time a day earlier; `spike` x100)."""
    for sid, y in list(history.series.items()):
        idx = pd.date_range(y.index[-1] + history.step, periods=steps, freq=history.step)
        vals = y.reindex(idx - pd.Timedelta("1D")).to_numpy()
        if sid == spike:
            vals = vals * 100
        history.series[sid] = pd.concat([y, pd.Series(vals, index=idx)])


def test_forecasts_are_reused_until_old_or_surprised(objects, history):
    calls: list[set[str]] = []

    def counting(hist, req):
        calls.append(set(hist.series))
        return forecast_history(hist, req)

    loop = loop_for(objects, history, forecaster=counting)
    loop.run_once()
    assert len(calls[0]) == len(history.series)
    extend(history)
    rep = loop.run_once()
    assert rep.outcome == OK and len(calls) == 1  # nothing refreshed: the cached forecasts still hold
    assert len(rep.vpa) == 6
    spiked = next(iter(history.series))
    extend(history, spike=spiked)
    loop.run_once()
    assert calls[-1] == {spiked}  # an observation above the forecast's top quantile
    extend(history, steps=7)  # 35-45 minutes after the forecasts were made: every entry is past 30 min
    loop.run_once()
    assert calls[-1] == set(history.series)


def test_a_new_registry_version_drops_cached_forecasts(objects, history):
    version = {"v": "v1"}
    calls = []

    def forecaster_for(reg, path):
        def fc(hist, req):
            calls.append(reg.version)
            return forecast_history(hist, req)
        return fc

    loop = loop_for(objects, history, registry_dir="/models", registry_loader=lambda p: registry_version(version["v"]),
                    registry_forecaster=forecaster_for)
    loop.run_once()
    loop.run_once()
    assert calls == ["v1"]
    version["v"] = "v2"
    loop.run_once()
    assert calls == ["v1", "v2"]


def test_reclaimable_climbs_from_what_was_published_not_from_a_failed_write(objects, history):
    from autoscaler.output.sinks import FAILED, WriteResult

    class Refusing(DryRunSink):
        def write(self, change):
            if change.kind == "Node" and change.name == "node-0":
                return WriteResult(change.key, FAILED, "refused")
            return super().write(change)

    s = fast_settings()
    loop = loop_for(objects, history, Refusing(), settings=s)
    first = loop.run_once()
    step = {p.node: p for p in first.reclaim}
    alloc = 31500
    assert step["node-1"].reclaimed_millicpu == int(alloc * s.reclaim.max_step_fraction)  # first climb
    extend(history)
    second = loop.run_once()
    again = {p.node: p for p in second.reclaim}
    assert again["node-1"].reclaimed_millicpu == 2 * int(alloc * s.reclaim.max_step_fraction)
    # node-0's first value never reached the node: it climbs from nothing again
    assert again["node-0"].reclaimed_millicpu == int(alloc * s.reclaim.max_step_fraction)


def test_forecast_budget_limits_work_per_run_and_decides_nothing_without_a_forecast(objects, history):
    calls = []

    def counting(hist, req):
        calls.append(len(hist.series))
        return forecast_history(hist, req)

    s = fast_settings()
    s.loop.forecast_budget = 5
    loop = loop_for(objects, history, forecaster=counting, settings=s)
    first = loop.run_once()
    assert first.outcome == OK and calls == [5]
    waiting = [k for k, why in first.skipped.items() if why.startswith("waiting for its first forecast")]
    assert len(waiting) == len(history.series) - 5
    # nothing is decided from a series that has no forecast yet
    for d in first.vpa:
        for c in d.containers:
            for r in c.resources:
                assert f"{d.namespace}/{d.target_kind}/{d.target_name}/{c.container}/{r}" not in waiting
    extend(history)
    loop.run_once()
    extend(history)
    third = loop.run_once()
    assert calls == [5, 5, 2] and not [k for k in third.skipped if k in history.series]


def test_vpa_targets_inside_the_dead_band_are_not_rewritten(objects, history):
    s = fast_settings()
    s.vpa.min_change = 0.05
    first = loop_for(objects, history, settings=s).run_once()
    d = first.vpa[0]
    vpa = next(o for o in objects if o["kind"] == "VerticalPodAutoscaler" and o["metadata"]["name"] == d.name)
    targets = {(c.container, r): v.target for c in d.containers for r, v in c.resources.items()}
    # published 3% off every target: inside the dead-band, no write
    vpa["status"] = {"recommendation": {"containerRecommendations": [
        {"containerName": c, "target": {r: str(int(t * 1.03)) if r == "memory" else f"{int(t * 1.03)}m"}}
        for (c, r), t in targets.items()]}}
    again = loop_for(objects, history, settings=s).run_once()
    assert d.key not in {c.key for c in again.changes}
    # 10% off: rewritten
    vpa["status"]["recommendation"]["containerRecommendations"] = [
        {"containerName": c, "target": {r: str(int(t * 1.10)) if r == "memory" else f"{int(t * 1.10)}m"}}
        for (c, r), t in targets.items()]
    third = loop_for(objects, history, settings=s).run_once()
    assert d.key in {c.key for c in third.changes}


def test_hpa_level_ratio_compares_new_observations_with_the_cached_forecast(objects, history):
    loop = loop_for(objects, history)
    loop.run_once()
    sid = next(k for k in history.series if k.endswith("/cpu"))
    fc = loop.forecast_cache.entries[sid]
    y = history.series[sid]
    steps = fc.index[:3]  # the three steps after the forecast was made, now observed 30% higher
    history.series[sid] = pd.concat([y, pd.Series(1.3 * fc.quantile(0.5)[:3], index=steps)])
    k = loop.settings.hpa.level_steps
    ratio = observed_level_ratio([sid], loop.forecast_cache.entries, history, steps[-1] + history.step, history.step, k)
    assert ratio == pytest.approx(1.3)
    nothing_seen_yet = observed_level_ratio([sid], loop.forecast_cache.entries, history, fc.index[0], history.step, k)
    assert nothing_seen_yet == 1.0


def test_a_history_with_requests_and_replicas_forecasts_only_the_usage(objects, history):
    """A fetched history also holds each workload's request and replicas series: serve forecasts only the
    usage its decisions read, and decides the same as without them."""
    asked: list[set[str]] = []

    def recording(hist, req):
        asked.append(set(hist.series))
        return forecast_history(hist, req)

    plain = loop_for(objects, copy.deepcopy(history)).run_once()
    fetched = copy.deepcopy(history)
    for sid, y in list(history.series.items()):
        fetched.series[sid.rsplit("/", 1)[0] + "/cpu_request"] = y * 0 + 2.0
        fetched.series[sid.split("/", 3)[0] + "/" + "/".join(sid.split("/")[1:3]) + "/-/replicas"] = y * 0 + 2.0
    rep = loop_for(objects, fetched, forecaster=recording).run_once()
    assert rep.outcome == OK, rep.reason
    assert asked and set().union(*asked) == set(history.series)
    assert [d.reasons() for d in rep.vpa] == [d.reasons() for d in plain.vpa]
