"""nodeCacheCapable: the extender's Node and CustomNodeResource caches follow the API (the fake)
through the real `kubernetes` client's list and watch, and a change reaches the next answer
without a list per call. Also the extender's own checks of the node forecast contract."""
from __future__ import annotations

import copy
import datetime as dt
import json

import pytest
from kubernetes import client

from extender.nodes import WatchedSource
from extender.payload import parse_args
from extender.service import Extender
from autoscaler.kube import Kube
from contracts.node_forecast import FORECAST_ANNOTATION, ForecastRefused, forecast_from_annotation
from contracts.reclaim import PLAN_ANNOTATION
from testsupport.kube_fake import FakeApiServer
from tests.extender.test_extender import NOW, fixture
from tests.conftest import wait_until


def _watched(fake):
    """A WatchedSource over `fake` through the real client (2 s watches), and its Kube."""
    cfg = client.Configuration()
    cfg.host = fake.url
    kube = Kube(client.ApiClient(cfg), sleep=lambda s: None)
    kube.watch_seconds = 2
    return WatchedSource(kube).start(), kube


@pytest.fixture
def cached():
    items = json.loads(fixture("cluster-state.json"))["items"]
    fake = FakeApiServer(items).start()
    source, kube = _watched(fake)
    try:
        assert source.wait_synced(10)
        yield fake, source
    finally:
        source.stop()
        kube.api_client.close()
        fake.stop()


def names_passing(ext: Extender, payload: str) -> list[str]:
    return ext.filter(parse_args(fixture(payload)))["NodeNames"]


def test_a_watched_change_reaches_the_next_answer_without_listing_again(cached):
    fake, source = cached
    ext = Extender(source, clock=lambda: NOW)
    assert names_passing(ext, "filter-reclaimed-names.json") == ["node-a", "node-e"]
    assert names_passing(ext, "filter-numa-names.json") == ["node-b", "node-f"]
    node_b = copy.deepcopy(fake.get("Node", "node-b"))
    a_plan = fake.get("Node", "node-a")["metadata"]["annotations"][PLAN_ANNOTATION]
    node_b["metadata"]["annotations"][PLAN_ANNOTATION] = a_plan.replace('"node":"node-a"', '"node":"node-b"')
    for res in ("allocatable", "capacity"):
        node_b["status"][res]["resource.katalyst.kubewharf.io/reclaimed_millicpu"] = "6000"
        node_b["status"][res]["resource.katalyst.kubewharf.io/reclaimed_memory"] = str(16 * 2**30)
    fake.put(node_b)  # serve raised B's plan
    assert wait_until(lambda: names_passing(ext, "filter-reclaimed-names.json") == ["node-a", "node-b", "node-e"])
    fake.delete("CustomNodeResource", "node-f")  # F's agent gone: its topology is unknown now
    assert wait_until(lambda: names_passing(ext, "filter-numa-names.json") == ["node-b"])
    assert len(fake.lists("nodes")) == 1 and len(fake.lists("customnoderesources")) == 1


def test_a_node_the_cache_has_not_seen_fails_closed(cached):
    _, source = cached
    ext = Extender(source, clock=lambda: NOW)
    args = json.loads(fixture("filter-reclaimed-names.json"))
    args["NodeNames"].append("node-new")
    r = ext.filter(parse_args(json.dumps(args).encode()))
    assert "node-new" not in r["NodeNames"]
    assert "not in the extender's node cache" in r["FailedAndUnresolvableNodes"]["node-new"]


def forecast_text(**change) -> str:
    node = json.loads(fixture("cluster-state.json"))["items"][0]
    doc = json.loads(node["metadata"]["annotations"][FORECAST_ANNOTATION])
    doc.update(change)
    return json.dumps(doc)


@pytest.mark.parametrize("change, needle", [
    ({"schema": 2}, "schema 2"),
    ({"node": "node-z"}, "for node 'node-z'"),
    ({"online_cpu_millicores": [1, 2]}, "same length"),
    ({"reclaimable_millicpu": [-1] * 24}, "non-negative"),
    ({"online_memory_bytes": "lots"}, "list of 1 to"),
    ({"step_seconds": 0}, "step_seconds"),
    ({"generated": "2026-12-01T18:00:00Z"}, "in the future"),
    ({"valid_until": "2026-12-01T12:10:00Z"}, "expired"),
    ({"start": "yesterday"}, "ValueError"),
])
def test_a_forecast_the_extender_cannot_trust_is_refused_with_the_reason(change, needle):
    with pytest.raises(ForecastRefused, match=needle.replace("(", r"\(")):
        forecast_from_annotation(forecast_text(**change), "node-a", NOW)
    assert forecast_from_annotation(forecast_text(), "node-a", NOW).step_seconds == 3600
    with pytest.raises(ForecastRefused, match="not JSON"):
        forecast_from_annotation("{", "node-a", NOW)


def test_steps_over_covers_the_lifetime_from_now():
    f = forecast_from_annotation(forecast_text(), "node-a", NOW)  # hourly from 12:00, 24 steps
    assert f.steps_over(NOW, 3600) == slice(0, 2)  # 12:20-13:20 spans the 12:00 and 13:00 steps
    assert f.steps_over(NOW, 0) == slice(0, 1)
    assert f.steps_over(NOW, 100 * 3600) == slice(0, 24)
    assert f.covered_seconds(NOW + dt.timedelta(days=2)) == 0


def test_remembered_plans_and_forecasts_still_expire_with_the_clock():
    from tests.extender.test_extender import state_source

    clock = [NOW]
    ext = Extender(state_source(), clock=lambda: clock[0])
    args = parse_args(fixture("filter-reclaimed-names.json"))
    assert ext.filter(args)["NodeNames"] == ["node-a", "node-e"]
    scores = {h["Host"]: h["Score"] for h in ext.prioritize(parse_args(fixture("prioritize-batch-names.json")))}
    assert scores["node-e"] != 5
    clock[0] = NOW + dt.timedelta(minutes=41)  # the plans end at 13:00, the forecasts at 14:00
    r = ext.filter(args)
    assert r["NodeNames"] == [] and "expired at 2026-12-01T13:00:00Z" in r["FailedAndUnresolvableNodes"]["node-e"]
    clock[0] = NOW + dt.timedelta(hours=2)
    assert {h["Score"] for h in ext.prioritize(parse_args(fixture("prioritize-batch-names.json")))} == {5}
    clock[0] = NOW - dt.timedelta(minutes=30)  # a plan generated after "now" (clock skew) is refused too
    assert "in the future" in ext.filter(args)["FailedAndUnresolvableNodes"]["node-e"]


def test_without_the_katalyst_crd_it_is_ready_and_only_numa_pods_are_refused():
    items = [o for o in json.loads(fixture("cluster-state.json"))["items"] if o["kind"] == "Node"]
    fake = FakeApiServer(items).start()
    fake.fail("GET", "customnoderesources", 404, times=10_000)  # the CRD is not installed
    source, kube = _watched(fake)
    try:
        assert wait_until(source.ready)
        assert not source.wait_synced(0)  # the topology never lists
        ext = Extender(source, clock=lambda: NOW)
        assert names_passing(ext, "filter-reclaimed-names.json") == ["node-a", "node-e"]
        r = ext.filter(parse_args(fixture("filter-numa-names.json")))
        assert r["NodeNames"] == [] and len(r["FailedAndUnresolvableNodes"]) == 6
        assert all("topology cache unavailable" in why and "CustomNodeResource" in why
                   for why in r["FailedAndUnresolvableNodes"].values())
    finally:
        source.stop()
        kube.api_client.close()
        fake.stop()
