"""Serve's end of the node forecast: one run of the serving loop writes a `tidewise.io/node-forecast`
annotation the extender reads (valid, a day of hourly steps, per node), refreshes it only every
`reclaim.forecast_refresh`, and writes none when the horizon is off."""
from __future__ import annotations

import copy
import datetime as dt
import json

from extender.pod import pod_needs
from extender.prioritize import NEUTRAL, score_node
from autoscaler.output.objects import node_change
from autoscaler.output.sinks import DryRunSink
from autoscaler.routines.loop import OK, ServingLoop
from contracts.node_forecast import FORECAST_ANNOTATION, forecast_from_annotation
from contracts.reclaim import PLAN_ANNOTATION
from tests.autoscaler.conftest import StaticCluster, fast_settings, source_of, validate_object
from tests.extender.test_extender import fixture


def run(objects, history, settings=None):
    loop = ServingLoop(settings or fast_settings(), source_of(history), StaticCluster(objects), DryRunSink())
    rep = loop.run_once()
    assert rep.outcome == OK, rep.reason
    return rep


def test_serve_writes_a_valid_day_long_node_forecast_next_to_the_plan(objects, history):
    rep = run(objects, history)
    now = rep.now.to_pydatetime()
    nodes = [c for c in rep.changes if c.kind == "Node"]
    assert {c.name for c in nodes} == {"node-0", "node-1"}
    batch = pod_needs(json.loads(fixture("prioritize-batch-names.json"))["Pod"])
    for c in nodes:
        validate_object(c.obj)
        annotations = c.patch["metadata"]["annotations"]
        assert set(annotations) == {PLAN_ANNOTATION, FORECAST_ANNOTATION}  # one metadata patch, both
        f = forecast_from_annotation(annotations[FORECAST_ANNOTATION], c.name, now)
        assert f.step_seconds == 3600 and len(f.online_cpu_millicores) == 24
        assert (f.valid_until - f.generated) == dt.timedelta(hours=2) and f.start >= f.generated - dt.timedelta(minutes=5)
        assert f.pods_without_forecast == 0 and max(f.online_cpu_millicores) > 0
        plan = next(p for p in rep.reclaim if p.node == c.name)
        # the first hour of the forecast is the plan's own window, before the plan's smoothing
        assert f.reclaimable_millicpu[0] >= plan.reclaimed_millicpu
        assert f.online_cpu_millicores[0] == plan.shared_demand_millicpu  # the same pods, the same forecasts
        # and the extender reads it: a real score, not the neutral one of a missing forecast
        s = score_node(batch, c.obj, now + dt.timedelta(minutes=1))
        assert s.reason.startswith(f"{s.score}:") and "neutral" not in s.reason, s.reason
    assert NEUTRAL == 5


def test_the_forecast_is_rewritten_only_when_it_is_older_than_the_refresh(objects, history):
    rep = run(objects, history)
    c = next(c for c in rep.changes if c.kind == "Node")
    forecast = rep.node_forecasts[c.name]
    plan = next(p for p in rep.reclaim if p.node == c.name)
    s = fast_settings().reclaim
    assert node_change(c.obj, plan, s, forecast) is None  # as written: nothing to do
    later = copy.deepcopy(forecast.__dict__)
    for minutes, rewritten in ((29, False), (31, True)):
        again = type(forecast)(**dict(later, generated=forecast.generated + dt.timedelta(minutes=minutes)))
        change = node_change(c.obj, plan, s, again)
        assert (change is not None) == rewritten
        if rewritten:  # the plan is still current: only the forecast goes out
            assert set(change.patch) == {"metadata"}
            assert set(change.patch["metadata"]["annotations"]) == {FORECAST_ANNOTATION}


def test_a_node_whose_forecast_is_fresh_gets_none_built(objects, history):
    """Building a node forecast costs ~1 ms a node each run: it is skipped while the node's annotation is
    younger than the refresh, and a plan rewritten meanwhile goes out alone."""
    first = run(objects, history)
    shown = {c.name: c.obj for c in first.changes if c.kind == "Node"}
    fresh = [shown.get(o["metadata"]["name"], o) if o["kind"] == "Node" else o for o in objects]
    node0 = next(o for o in fresh if o["kind"] == "Node" and o["metadata"]["name"] == "node-0")
    node0["metadata"]["annotations"].pop(FORECAST_ANNOTATION)  # node-0's forecast is missing: due
    rep = run(fresh, history)
    assert set(rep.node_forecasts) == {"node-0"}
    node1 = [c for c in rep.changes if c.kind == "Node" and c.name == "node-1"]
    assert all(FORECAST_ANNOTATION not in (c.patch.get("metadata") or {}).get("annotations", {}) for c in node1)


def test_no_horizon_writes_no_forecast(objects, history):
    s = fast_settings()
    s.reclaim.forecast_horizon = ""
    rep = run(objects, history, s)
    assert rep.node_forecasts == {}
    assert all(FORECAST_ANNOTATION not in (c.patch.get("metadata") or {}).get("annotations", {})
               for c in rep.changes if c.kind == "Node")


def test_what_serve_writes_through_the_api_is_what_the_extender_reads(objects, history):
    """serve (ApiSink, the real client) -> the API fake -> the extender's watched node cache."""
    from kubernetes import client

    from extender.nodes import WatchedSource
    from extender.payload import parse_args
    from extender.service import Extender
    from autoscaler.input.cluster import ApiCluster
    from autoscaler.kube import Kube
    from autoscaler.output.sinks import WRITTEN, ApiSink
    from testsupport.kube_fake import FakeApiServer

    fake = FakeApiServer(objects).start()
    cfg = client.Configuration()
    cfg.host = fake.url
    kube = Kube(client.ApiClient(cfg), sleep=lambda s: None)
    kube.watch_seconds = 2
    source = None
    try:
        rep = ServingLoop(fast_settings(), source_of(history), ApiCluster(kube), ApiSink(kube)).run_once()
        assert rep.outcome == OK and all(r.outcome == WRITTEN for r in rep.results)
        for name in ("node-0", "node-1"):
            node = fake.get("Node", name)
            validate_object(node)
            assert FORECAST_ANNOTATION in node["metadata"]["annotations"]
        source = WatchedSource(kube, watch_topology=False).start()
        assert source.wait_synced(10)
        ext = Extender(source, clock=lambda: rep.now.to_pydatetime() + dt.timedelta(minutes=1))
        args = json.loads(fixture("prioritize-batch-names.json"))
        args["NodeNames"] = ["node-0", "node-1"]
        for h in ext.prioritize(parse_args(json.dumps(args).encode())):
            why = ext.explain("analytics/etl-nightly-7x2kq")["prioritize"]["nodes"][h["Host"]]["reason"]
            assert "neutral" not in why and "reclaimable cpu lowest" in why, why
        verdicts = ext.filter(parse_args(json.dumps(args).encode()))
        assert not verdicts["FailedAndUnresolvableNodes"]  # both plans valid: a fit or a no-fit, never "no plan"
    finally:
        if source is not None:
            source.stop()
        kube.api_client.close()
        fake.stop()
