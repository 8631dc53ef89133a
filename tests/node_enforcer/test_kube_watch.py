"""The node agent watches its pods and its Node instead of listing them every pass (issue 14),
through the REAL `kubernetes` client's `watch.Watch` against the local fake (testsupport/kube_fake.py):
asserted on the fake's request log; a 410 lists again; a cut watch resumes without a list."""
from __future__ import annotations

from contracts.informer import Backoff
from node_enforcer.kube import KubeApi
from testsupport.kube_fake import FakeApiServer
from tests.conftest import wait_until
from tests.node_enforcer.conftest import make_pod_obj

NODE = {"metadata": {"name": "n1", "annotations": {"tidewise.io/reclaim-plan": "v1"}}}


def lists(fake: FakeApiServer, path: str) -> list[dict]:
    return [r for r in fake.requests if r.path == path and r.params.get("watch") != ["true"]]


def watches(fake: FakeApiServer, path: str) -> list[dict]:
    return [r for r in fake.requests if r.path == path and r.params.get("watch") == ["true"]]


def fake_api() -> FakeApiServer:
    return FakeApiServer.of_node([make_pod_obj("a", node="n1"), make_pod_obj("b", node="n2")], nodes=[NODE])


def kube_for(fake: FakeApiServer) -> KubeApi:
    kube = KubeApi(fake.api_client())
    kube.watch_seconds = 2  # idle watches end quickly so the test's threads do too
    return kube


def test_a_quiet_node_lists_its_pods_once_and_changes_arrive():
    with fake_api() as fake:
        list_pods = kube_for(fake).watched_pods("n1")
        try:
            assert [p.name for p in list_pods()] == ["a"]
            assert wait_until(lambda: watches(fake, "/api/v1/pods"))
            assert [p.name for p in list_pods()] == ["a"] and [p.name for p in list_pods()] == ["a"]
            fake.put(dict(make_pod_obj("c", node="n1"), kind="Pod"))
            fake.put(dict(make_pod_obj("d", node="n2"), kind="Pod"))  # another node's pod never shows up
            fake.delete("Pod", "a", "default")
            assert wait_until(lambda: [p.name for p in list_pods()] == ["c"])
            assert len(lists(fake, "/api/v1/pods")) == 1
            assert all(r.params["fieldSelector"] == ["spec.nodeName=n1"] for r in watches(fake, "/api/v1/pods"))
        finally:
            list_pods.stop()


def test_the_reclaim_plan_annotation_follows_the_node_through_a_watch():
    with fake_api() as fake:
        annotations = kube_for(fake).watched_annotations("n1")
        try:
            assert annotations()["tidewise.io/reclaim-plan"] == "v1"
            fake.put({"kind": "Node", "metadata": {"name": "n1", "annotations": {"tidewise.io/reclaim-plan": "v2"}}})
            assert wait_until(lambda: annotations()["tidewise.io/reclaim-plan"] == "v2")
            assert len(lists(fake, "/api/v1/nodes")) == 1
            assert not [r for r in fake.requests if r.path == "/api/v1/nodes/n1"]  # no get per pass either
        finally:
            annotations.stop()


def test_a_410_lists_again_and_a_cut_watch_resumes_from_its_version():
    with fake_api() as fake:
        informer = kube_for(fake).pods_informer("n1")
        informer.backoff = Backoff(0.01, 0.05)
        informer.prime()
        fake.delete("Pod", "a", "default")
        fake.watch.compact()  # what the informer listed is older than the server keeps
        informer.start()
        try:
            assert wait_until(lambda: informer.stats.relists_after_gone == 1 and not informer.items())
            assert len(lists(fake, "/api/v1/pods")) == 2
            version = informer.resource_version
            fake.watch.drop_next(1)
            fake.watch.drop()
            fake.put(dict(make_pod_obj("e", node="n1"), kind="Pod"))
            assert wait_until(lambda: [o["metadata"]["name"] for o in informer.items()] == ["e"])
            assert informer.stats.resumes_after_error >= 1 and len(lists(fake, "/api/v1/pods")) == 2
            after = [r.params["resourceVersion"] for r in watches(fake, "/api/v1/pods")][1:3]
            assert after and all(v == [version] for v in after), after
        finally:
            informer.stop()
