"""Katalyst IntelligentHorizontalPodAutoscalers (v1alpha2) served by serve through the REAL
`kubernetes` client against the API fake (422 for a status that breaks the vendored CRD schema):
the template decided by the HPA decision, its status written only when it changes, a malformed one
skipped with its reason, an HPA owned by a previewing IHPA left alone, nothing written in a dry run."""
from __future__ import annotations

import copy

import pytest

from autoscaler.input.cluster import ApiCluster
from autoscaler.model.ihpa import IhpaView, MalformedIhpa
from autoscaler.output.sinks import DRY_RUN, WRITTEN, ApiSink, DryRunSink
from autoscaler.routines.loop import OK, ServingLoop
from tests.autoscaler.conftest import fast_settings, source_of, validate_object

KIND = "IntelligentHorizontalPodAutoscaler"
API = "autoscaling.katalyst.kubewharf.io/v1alpha2"


def ihpa_like(hpa, name="frontend-ihpa", strategy=None, metrics=None):
    """An IHPA whose template is `hpa`'s spec (metrics wrapped as v1alpha2 wants them)."""
    spec = copy.deepcopy(hpa["spec"])
    tpl = {k: spec[k] for k in ("scaleTargetRef", "minReplicas", "maxReplicas") if k in spec}
    tpl["metrics"] = metrics if metrics is not None else [{"metric": m} for m in spec["metrics"]]
    out = {"apiVersion": API, "kind": KIND, "metadata": {"name": name, "namespace": hpa["metadata"]["namespace"],
                                                    "annotations": {"tidewise.io/manage": "true"}},  # opted in
           "spec": {"autoscaler": tpl, "algorithmConfig": {
               "method": "tidewise", "resyncPeriod": 60, "timeWindow": {
                   "aggregator": "max", "historySteps": 288, "input": 300, "output": 3600, "predictionSteps": 12}}}}
    if strategy:
        out["spec"]["scaleStrategy"] = strategy
    validate_object(out)  # what a Katalyst user has in the cluster is valid to begin with
    return out


def hpa_named(objects, name="frontend"):
    return next(o for o in objects if o["kind"] == "HorizontalPodAutoscaler" and o["metadata"]["name"] == name)


@pytest.fixture
def api(api_factory):
    return api_factory


def loop_for(kube, history, sink=None, s=None):
    return ServingLoop(s or fast_settings(), source_of(history), ApiCluster(kube, (KIND,)), sink or ApiSink(kube))


def ihpa_writes(fake):
    return [r for r in fake.writes() if "intelligenthorizontalpodautoscalers" in r.path]


def test_status_is_written_valid_from_the_same_decision_as_the_hpa(api, objects, history):
    hpa = hpa_named(objects)
    fake, kube = api(objects + [ihpa_like(hpa)])
    rep = loop_for(kube, history).run_once()
    assert rep.outcome == OK
    (d,) = rep.sections["ihpa"].decisions
    assert [r.outcome for r in rep.results if r.key == d.key] == [WRITTEN]
    (w,) = ihpa_writes(fake)
    assert w.method == "PATCH" and w.path.endswith("/status") and set(w.body) == {"status"}
    stored = fake.get(KIND, "frontend-ihpa", hpa["metadata"]["namespace"])
    validate_object(stored)
    st = stored["status"]
    # one decision for both kinds: the IHPA's template is the HPA's spec, so the floors are equal
    floor = next(h for h in rep.hpa if h.name == "frontend")
    assert st["desiredReplicas"] == d.hpa.min_replicas == floor.min_replicas
    assert 1 <= st["desiredReplicas"] <= hpa["spec"]["maxReplicas"]
    pods = [o for o in objects if o["kind"] == "Pod" and o["metadata"]["name"].startswith("frontend-")]
    assert st["currentReplicas"] == len(pods)
    (m,) = st["currentMetrics"]
    assert m["type"] == "Resource" and m["resource"]["name"] == "cpu"
    assert m["resource"]["current"]["averageValue"].endswith("m") and m["resource"]["current"]["averageUtilization"] > 0
    assert stored["spec"] == ihpa_like(hpa)["spec"]  # the spec is the user's: never written


def test_an_unchanged_status_is_not_rewritten(api, objects, history):
    fake, kube = api(objects + [ihpa_like(hpa_named(objects))])
    loop = loop_for(kube, history)
    loop.run_once()
    assert len(ihpa_writes(fake)) == 1
    loop.run_once()
    loop_for(kube, history).run_once()  # a fresh process compares with the status the cluster holds
    assert len(ihpa_writes(fake)) == 1


def test_a_malformed_ihpa_is_skipped_with_its_reason_and_the_others_served(api, objects, history):
    hpa = hpa_named(objects)
    qps_only = ihpa_like(hpa, "by-qps", metrics=[{"customMetric": {"identify": "qps", "value": 100}}])
    upside_down = ihpa_like(hpa, "upside-down")
    upside_down["spec"]["autoscaler"].update(minReplicas=5, maxReplicas=2)
    lost = ihpa_like(hpa, "lost")
    lost["spec"]["autoscaler"]["scaleTargetRef"]["name"] = "no-such-deployment"
    bounded = ihpa_like(hpa)
    bounded["spec"]["timeBounds"] = [{"bounds": [{"cronTab": "0 8 * * 1-5", "minReplicas": 3, "maxReplicas": 9}]}]
    fake, kube = api(objects + [qps_only, upside_down, lost, bounded])
    rep = loop_for(kube, history).run_once()
    ns = hpa["metadata"]["namespace"]
    (served,) = rep.sections["ihpa"].decisions
    assert any("timeBounds not applied" in s for s in served.hpa.reason.steps)  # said, not silently ignored
    assert "no cpu or memory metric" in rep.skipped[f"{KIND}/{ns}/by-qps"]
    assert "minReplicas 5 > maxReplicas 2" in rep.skipped[f"{KIND}/{ns}/upside-down"]
    assert "no-such-deployment not found" in rep.skipped[f"{KIND}/{ns}/lost"]
    assert [w.path.rsplit("/", 2)[-2] for w in ihpa_writes(fake)] == ["frontend-ihpa"]


def test_a_custom_portrait_metric_sizes_replicas_by_its_value():
    hpa = {"metadata": {"name": "h", "namespace": "shop"},
           "spec": {"scaleTargetRef": {"kind": "Deployment", "name": "web"}, "maxReplicas": 9, "metrics": []}}
    ihpa = ihpa_like(hpa, metrics=[{"customMetric": {"identify": "cpu", "value": "500m"}}])
    got = IhpaView(ihpa).as_hpa()
    assert got["spec"]["metrics"] == [{"type": "Resource", "resource": {
        "name": "cpu", "target": {"type": "AverageValue", "averageValue": "500m"}}}]
    ihpa["spec"]["autoscaler"]["metrics"] = [{}]
    with pytest.raises(MalformedIhpa, match="neither metric nor customMetric"):
        IhpaView(ihpa).as_hpa()


@pytest.mark.parametrize("strategy, raised", [(None, False), ("Preview", False), ("Auto", True)])
def test_the_hpa_an_ihpa_owns_is_raised_only_in_auto(api, objects, history, strategy, raised):
    objects = copy.deepcopy(objects)
    hpa = hpa_named(objects)
    ihpa = ihpa_like(hpa, strategy=strategy)
    # Katalyst's controller made this HPA from the IHPA: it carries the owner reference
    hpa["metadata"]["ownerReferences"] = [{"apiVersion": API, "kind": KIND, "name": ihpa["metadata"]["name"],
                                           "uid": "0b5d7c1e-0000-4000-8000-000000000001", "controller": True}]
    hpa["spec"]["minReplicas"] = 1
    fake, kube = api(objects + [ihpa])
    busy = copy.deepcopy(history)  # a load the user's floor of 1 cannot carry
    for sid in [s for s in busy.series if "/Deployment/frontend/" in s]:
        busy.series[sid] = busy.series[sid] * 20
    rep = loop_for(kube, busy).run_once()
    key = f"HorizontalPodAutoscaler/{hpa['metadata']['namespace']}/frontend"
    floor = rep.sections["ihpa"].decisions[0].hpa.min_replicas
    assert floor > 1  # the forecast asks for more than the user's floor: a write would change it
    patched = [r for r in fake.writes("PATCH") if r.path.endswith("/horizontalpodautoscalers/frontend")]
    if raised:
        assert patched and fake.get("HorizontalPodAutoscaler", "frontend", hpa["metadata"]["namespace"]) \
            ["spec"]["minReplicas"] == floor
    else:
        assert not patched and "scaleStrategy" in rep.skipped[key]
    assert len(ihpa_writes(fake)) == 1  # the status is written in every mode


def test_dry_run_writes_nothing(api, objects, history):
    fake, kube = api(objects + [ihpa_like(hpa_named(objects))])
    sink = DryRunSink()
    rep = loop_for(kube, history, sink).run_once()
    assert not fake.writes()
    (c,) = [c for c in sink.changes if c.kind == KIND]
    assert [r.outcome for r in rep.results if r.key == c.key] == [DRY_RUN]
    validate_object(c.obj)


def test_ihpas_off_are_not_decided(api, objects, history):
    fake, kube = api(objects + [ihpa_like(hpa_named(objects))])
    s = fast_settings()
    s.ihpa.enabled = False
    rep = loop_for(kube, history, s=s).run_once()
    assert "ihpa" not in rep.sections and not ihpa_writes(fake)


def test_ihpa_decisions_are_exported_to_metrics(api, objects, history):
    from autoscaler.metrics import Metrics

    hpa = hpa_named(objects)
    fake, kube = api(objects + [ihpa_like(hpa)])
    metrics = Metrics()
    rep = ServingLoop(fast_settings(), source_of(history), ApiCluster(kube, (KIND,)), ApiSink(kube),
                      metrics=metrics).run_once()
    (d,) = rep.sections["ihpa"].decisions
    text = metrics.exposition().decode()
    ns = hpa["metadata"]["namespace"]
    assert f'tidewise_ihpa_desired_replicas{{ihpa="frontend-ihpa",namespace="{ns}"}} {float(d.hpa.min_replicas)}' in text
    assert f'tidewise_ihpa_predicted_replicas{{ihpa="frontend-ihpa",namespace="{ns}"}} {float(d.hpa.predicted)}' in text
