"""Watches instead of lists (issue 14): `WatchedCluster` through the REAL `kubernetes` client's
`watch.Watch` against the local API fake, which streams `?watch=true`, compacts (410) and cuts
connections. Asserted on the fake's request log: a quiet cluster costs no list between runs."""
from __future__ import annotations

import copy

import pytest
from kubernetes import client

from autoscaler.input.cluster import ApiCluster
from autoscaler.input.watched import KINDS, WatchedCluster
from autoscaler.kube import Kube
from contracts.informer import Backoff, Informer, StaleCache
from testsupport.kube_objects import KINDS as FAKE_KINDS
from testsupport.kube_fake import FakeApiServer
from tests.conftest import wait_until

PLURALS = [FAKE_KINDS[k][1] for k in KINDS]


@pytest.fixture
def api(objects):
    fake = FakeApiServer(objects).start()
    cfg = client.Configuration()
    cfg.host = fake.url
    kube = Kube(client.ApiClient(cfg), sleep=lambda s: None)
    kube.watch_seconds = 2  # the server ends idle watches quickly, so the test's threads end with it
    watched = WatchedCluster(kube, backoff=lambda: Backoff(initial=0.01, cap=0.05))
    try:
        yield fake, kube, watched
    finally:
        watched.stop()
        kube.api_client.close()
        fake.stop()


def pod_names(state) -> set[str]:
    return {p["metadata"]["name"] for p in state.pods}


def a_pod(fake) -> dict:
    return next(o for o in fake.objects.values() if o["kind"] == "Pod")


def test_a_quiet_cluster_costs_one_list_per_kind_however_many_runs(api):
    fake, kube, watched = api
    first = watched.read()
    assert wait_until(lambda: all(i.stats.watches >= 1 for i in watched.informers.values()))
    for _ in range(3):
        again = watched.read()
    assert [len(fake.lists(p)) for p in PLURALS] == [1] * len(PLURALS)
    listed = ApiCluster(kube).read()  # what a fresh list says, for comparison
    assert pod_names(again) == pod_names(first) == pod_names(listed)
    assert len(again.nodes) == len(listed.nodes) and len(again.vpas) == len(listed.vpas)


def test_changes_arrive_through_the_watch(api):
    fake, _, watched = api
    watched.read()
    pod = copy.deepcopy(a_pod(fake))
    new = copy.deepcopy(pod)
    new["metadata"]["name"] = "arrived-by-watch"
    new["metadata"].pop("resourceVersion", None)
    fake.put(new)
    fake.delete("Pod", pod["metadata"]["name"], pod["metadata"]["namespace"])
    node = copy.deepcopy(next(o for o in fake.objects.values() if o["kind"] == "Node"))
    node["metadata"].setdefault("labels", {})["changed"] = "yes"
    fake.put(node)

    def seen() -> bool:
        state = watched.read()
        return ("arrived-by-watch" in pod_names(state) and pod["metadata"]["name"] not in pod_names(state)
                and any((n["metadata"].get("labels") or {}).get("changed") == "yes" for n in state.nodes))

    assert wait_until(seen)
    assert len(fake.lists("pods")) == 1 and len(fake.lists("nodes")) == 1


def test_a_410_on_resume_lists_again_and_sees_what_happened_meanwhile(api):
    fake, kube, _ = api
    informer = Informer("Pod", *kube.watched("Pod"), backoff=Backoff(0.01, 0.05)).prime()
    victim = a_pod(fake)
    fake.delete("Pod", victim["metadata"]["name"], victim["metadata"]["namespace"])
    fake.watch.compact()  # the informer's resourceVersion is now older than what the server keeps
    informer.start()
    try:
        assert wait_until(lambda: informer.stats.relists_after_gone == 1 and informer.stats.lists == 2)
        assert victim["metadata"]["name"] not in {p["metadata"]["name"] for p in informer.items()}
        assert len(fake.lists("pods")) == 2
    finally:
        informer.stop()


def test_a_dropped_watch_resumes_from_its_resource_version_without_listing(api):
    fake, _, watched = api
    watched.read()
    pods = watched.informers["Pod"]
    assert wait_until(lambda: pods.stats.watches >= 1)
    version = pods.resource_version
    fake.watch.drop_next(2)  # the next two connections are cut as soon as they open
    fake.watch.drop()        # and so is the open one
    new = copy.deepcopy(a_pod(fake))
    new["metadata"]["name"] = "made-while-cut"
    fake.put(new)
    assert wait_until(lambda: "made-while-cut" in pod_names(watched.read()))
    assert pods.stats.resumes_after_error >= 1 and len(fake.lists("pods")) == 1
    resumed = [r.query for r in fake.requests if r.is_watch and "/pods" in r.path]
    assert all(f"resourceVersion={version}" in q for q in resumed[:4]), resumed


def test_a_watch_failing_past_stale_after_refuses_to_answer(api):
    fake, kube, _ = api
    now = [0.0]
    informer = Informer("Node", *kube.watched("Node"), backoff=Backoff(0.01, 0.05), stale_after=60.0,
                        clock=lambda: now[0]).prime()
    fake.watch.drop_next(10_000)  # every reconnect is cut
    fake.watch.drop()
    informer.start()
    try:
        assert wait_until(lambda: informer.stats.resumes_after_error >= 2)
        assert informer.items()  # failing, but not for long yet: still answers
        informer.stop()  # no flapping watch may be open (and counted as held) at the instant the clock jumps
        assert wait_until(lambda: not informer._thread.is_alive())
        now[0] = 61.0
        with pytest.raises(StaleCache, match="watch failing"):
            informer.items()
    finally:
        informer.stop()
