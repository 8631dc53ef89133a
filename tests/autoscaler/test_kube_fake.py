"""The Kubernetes wrapper and the API sink through the REAL `kubernetes` client, against a local
HTTP fake of the few endpoints used (testsupport/kube_fake.py): 409 retried with a fresh
resourceVersion, 404 skipped, 403 reported, 429 backed off; every object written validates."""
from __future__ import annotations

import pytest
from kubernetes import client

from autoscaler.input.cluster import ApiCluster
from autoscaler.kube import Kube
from autoscaler.output.sinks import CONFLICT, FORBIDDEN, NOT_FOUND, THROTTLED, WRITTEN, ApiSink
from autoscaler.routines.leader import LeaderElector
from autoscaler.routines.loop import OK, ServingLoop
from contracts.kube_errors import Conflict, Forbidden, NotFound, TooManyRequests
from tests.autoscaler.conftest import fast_settings, source_of, validate_object
from testsupport.kube_fake import FakeApiServer


@pytest.fixture
def api(objects):
    fake = FakeApiServer(objects).start()
    cfg = client.Configuration()
    cfg.host = fake.url
    sleeps: list[float] = []
    kube = Kube(client.ApiClient(cfg), sleep=sleeps.append, max_retries=3)
    try:
        yield fake, kube, sleeps
    finally:
        kube.api_client.close()
        fake.stop()


def run(kube, history, settings=None):
    loop = ServingLoop(settings or fast_settings(), source_of(history), ApiCluster(kube), ApiSink(kube))
    return loop.run_once()


def stored_objects(fake, kinds):
    return [o for o in fake.objects.values() if o["kind"] in kinds]


def test_lists_come_back_as_api_dicts_with_kind(api, objects):
    fake, kube, _ = api
    pods = kube.list_kind("Pod")
    assert len(pods) == sum(o["kind"] == "Pod" for o in objects)
    assert all(p["kind"] == "Pod" and p["apiVersion"] == "v1" for p in pods)
    assert {v["metadata"]["name"] for v in kube.list_kind("VerticalPodAutoscaler")} == {o["metadata"]["name"] for o in objects
                                                                 if o["kind"] == "VerticalPodAutoscaler"}


def test_a_full_run_through_the_api_writes_valid_objects(api, history):
    fake, kube, _ = api
    rep = run(kube, history)
    assert rep.outcome == OK and rep.results
    assert all(r.outcome == WRITTEN for r in rep.results), rep.results
    patched = {r.path for r in fake.writes("PATCH")}
    assert any(p.endswith("/status") and "verticalpodautoscalers" in p for p in patched)
    assert any(p.startswith("/api/v1/nodes/") and p.endswith("/status") for p in patched)
    assert all(r.content_type == "application/merge-patch+json" for r in fake.writes("PATCH"))
    # every object as the API now holds it is valid against the published schemas
    for o in stored_objects(fake, {"VerticalPodAutoscaler", "HorizontalPodAutoscaler", "Node"}):
        validate_object(o)
    vpa = next(o for o in stored_objects(fake, {"VerticalPodAutoscaler"}) if o.get("status"))
    assert vpa["status"]["recommendation"]["containerRecommendations"][0]["target"]
    assert vpa["status"]["conditions"][0]["type"] == "RecommendationProvided"
    node = fake.get("Node", "node-0")
    assert int(node["status"]["allocatable"]["resource.katalyst.kubewharf.io/reclaimed_millicpu"]) > 0
    assert node["status"]["allocatable"]["cpu"] == "31500m"  # the merge patch kept the rest


def test_conflicts_are_retried_with_a_fresh_resource_version(api, history):
    fake, kube, _ = api
    fake.fail("PATCH", r"/horizontalpodautoscalers/", 409, times=2)
    rep = run(kube, history)
    hpa_results = [r for r in rep.results if r.key.startswith("HorizontalPodAutoscaler/")]
    assert hpa_results and all(r.outcome == WRITTEN for r in hpa_results)
    # writes run concurrently: the two 409s may hit one HPA twice or two HPAs once
    conflicts = {r.key: int(r.detail.split()[1]) for r in hpa_results if r.detail.startswith("after")}
    assert sum(conflicts.values()) == 2
    for key, n in conflicts.items():
        _, ns, name = key.split("/")
        # each retry re-read the HPA and sent the resourceVersion it found
        gets = [r for r in fake.requests if r.method == "GET" and r.path.endswith(f"/namespaces/{ns}/horizontalpodautoscalers/{name}")]
        assert len(gets) == n
    for d in rep.hpa:
        if any(r.key == d.key for r in hpa_results):
            assert fake.get("HorizontalPodAutoscaler", d.name, d.namespace)["spec"]["minReplicas"] == d.min_replicas


def test_a_real_stale_resource_version_is_a_conflict_then_rebased(api, history, objects):
    fake, kube, _ = api
    hpa = next(o for o in objects if o["kind"] == "HorizontalPodAutoscaler")
    ns, name = hpa["metadata"]["namespace"], hpa["metadata"]["name"]
    current = kube.get_hpa(ns, name)
    with pytest.raises(Conflict):
        kube.patch_hpa(ns, name, {"metadata": {"resourceVersion": "1"}, "spec": {"minReplicas": 2}})
    # someone lowers maxReplicas between our read and our write: the rebased patch respects it
    fake.put(dict(current, spec=dict(current["spec"], maxReplicas=2)))
    from autoscaler.output.objects import Change
    change = Change("HorizontalPodAutoscaler", "autoscaling/v2", ns, name, current,
                    {"metadata": {"resourceVersion": current["metadata"]["resourceVersion"], "annotations": {}},
                     "spec": {"minReplicas": 5}})
    res = ApiSink(kube).write(change)
    assert res.outcome == WRITTEN
    assert fake.get("HorizontalPodAutoscaler", name, ns)["spec"]["minReplicas"] == 2


def test_conflicts_that_never_end_are_reported_not_looped(api, history):
    fake, kube, _ = api
    fake.fail("PATCH", r"/horizontalpodautoscalers/", 409, times=1000)
    rep = run(kube, history)
    hpa_results = [r for r in rep.results if r.key.startswith("HorizontalPodAutoscaler/")]
    assert hpa_results and all(r.outcome == CONFLICT for r in hpa_results)
    assert all(r.outcome == WRITTEN for r in rep.results if not r.key.startswith("HorizontalPodAutoscaler/"))


def test_not_found_is_skipped_and_the_others_written(api, history):
    fake, kube, _ = api
    fake.fail("PATCH", r"/nodes/node-0/status", 404)
    rep = run(kube, history)
    outcome = {r.key: r.outcome for r in rep.results}
    assert outcome["Node/node-0"] == NOT_FOUND
    assert outcome["Node/node-1"] == WRITTEN
    assert "resource.katalyst.kubewharf.io/reclaimed_millicpu" not in fake.get("Node", "node-0")["status"]["allocatable"]
    with pytest.raises(NotFound):
        kube.get_hpa("shop", "no-such-hpa")


def test_forbidden_is_reported_and_nothing_else_stops(api, history):
    fake, kube, _ = api
    fake.fail("PATCH", r"/verticalpodautoscalers/.*/status", 403, times=1000)
    rep = run(kube, history)
    vpa = [r for r in rep.results if r.key.startswith("VerticalPodAutoscaler/")]
    assert vpa and all(r.outcome == FORBIDDEN for r in vpa)
    assert all("Forbidden" in r.detail or "403" in r.detail for r in vpa)
    assert any(r.outcome == WRITTEN for r in rep.results if r.key.startswith("Node/"))
    assert not any(o.get("status") for o in stored_objects(fake, {"VerticalPodAutoscaler"}))
    with pytest.raises(Forbidden):
        fake.fail("GET", r"/api/v1/nodes$", 403)
        kube.list_kind("Node")


def test_too_many_requests_backs_off_as_the_server_asks(api):
    fake, kube, sleeps = api
    fake.fail("GET", r"/api/v1/nodes$", 429, times=2, headers={"Retry-After": "3"})
    nodes = kube.list_kind("Node")
    assert len(nodes) == 2 and sleeps == [3.0, 3.0]
    fake.fail("GET", r"/api/v1/pods$", 429, times=2)  # no Retry-After: exponential backoff
    kube.list_kind("Pod")
    assert sleeps[2:] == [1.0, 2.0]
    fake.fail("PATCH", r"/nodes/node-1/status", 429, times=10)
    with pytest.raises(TooManyRequests):
        kube.patch_node_status("node-1", {"status": {"allocatable": {"x": "1"}}})
    assert len(sleeps) == 4 + kube.max_retries


def test_throttling_that_persists_is_reported_per_object(api, history):
    fake, kube, sleeps = api
    fake.fail("PATCH", r"/nodes/node-0/status", 429, times=100, headers={"Retry-After": "1"})
    rep = run(kube, history)
    assert {r.key: r.outcome for r in rep.results}["Node/node-0"] == THROTTLED
    assert sleeps  # it waited before giving up


def test_a_missing_vpa_crd_means_no_vpas_not_a_frozen_run(api, history):
    fake, kube, _ = api
    fake.fail("GET", r"/apis/autoscaling.k8s.io/v1/verticalpodautoscalers$", 404)
    rep = run(kube, history)
    assert rep.outcome == OK and rep.vpa == [] and rep.reclaim


def test_one_leader_at_a_time_through_the_lease(api):
    fake, kube, _ = api
    t = [1000.0]
    a = LeaderElector(kube, "tidewise", "tidewise-serve", "pod-a", 15, clock=lambda: t[0])
    b = LeaderElector(kube, "tidewise", "tidewise-serve", "pod-b", 15, clock=lambda: t[0])
    assert a.try_acquire() is True  # created
    assert b.try_acquire() is False
    t[0] += 10
    assert a.try_acquire() is True  # renewed
    t[0] += 10
    assert b.try_acquire() is False  # a renewed 10 s ago: still valid
    t[0] += 20
    assert b.try_acquire() is True  # a stopped renewing: b takes over
    assert a.try_acquire() is False
    lease = fake.get("Lease", "tidewise-serve", "tidewise")
    assert lease["spec"]["holderIdentity"] == "pod-b" and lease["spec"]["leaseTransitions"] == 1
    validate_object(lease)


def test_two_replicas_racing_for_an_expired_lease_get_one_winner(api):
    fake, kube, _ = api
    t = [1000.0]
    a = LeaderElector(kube, "tidewise", "l", "pod-a", 15, clock=lambda: t[0])
    assert a.try_acquire()
    t[0] += 100
    b = LeaderElector(kube, "tidewise", "l", "pod-b", 15, clock=lambda: t[0])
    c = LeaderElector(kube, "tidewise", "l", "pod-c", 15, clock=lambda: t[0])
    # both read the same expired lease; b writes first, c's PUT carries the old resourceVersion
    stale = kube.get_lease("tidewise", "l")
    assert b.try_acquire()
    original = kube.get_lease
    kube.get_lease = lambda ns, name: stale
    try:
        assert c.try_acquire() is False
    finally:
        kube.get_lease = original
    assert fake.get("Lease", "l", "tidewise")["spec"]["holderIdentity"] == "pod-b"
