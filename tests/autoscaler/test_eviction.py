"""The one Evictor (`autoscaler/output/eviction.py`) through the real `kubernetes` client against
the API fake: a disruption budget refuses (429 -> `refused`), dry-run sends nothing, the
per-minute window holds, a vanished pod is `refused`, other errors `failed`; and `movable`'s
safety list."""
from __future__ import annotations

import pytest
from kubernetes import client

from autoscaler.kube import Kube
from autoscaler.output.eviction import Evictor, Move, movable
from tests.autoscaler.fake_apiserver import FakeApiServer

OWNER = [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "web-5f", "uid": "u1", "controller": True}]


def web_pod(name: str, **meta_extra) -> dict:
    md = {"name": name, "namespace": "shop", "labels": {"app": "web"}, "ownerReferences": OWNER, **meta_extra}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": md,
            "spec": {"nodeName": "node-0", "containers": [{"name": "c", "image": "x"}]},
            "status": {"phase": "Running"}}


PDB = {"apiVersion": "policy/v1", "kind": "PodDisruptionBudget", "metadata": {"name": "web", "namespace": "shop"},
       "spec": {"minAvailable": 2, "selector": {"matchLabels": {"app": "web"}}}}


@pytest.fixture
def api():
    fake = FakeApiServer([web_pod("web-1"), web_pod("web-2"), web_pod("web-3"), PDB]).start()
    cfg = client.Configuration()
    cfg.host = fake.url
    kube = Kube(client.ApiClient(cfg), sleep=lambda s: None, max_retries=0)
    try:
        yield fake, kube
    finally:
        kube.api_client.close()
        fake.stop()


def move(name: str) -> Move:
    return Move("shop", name, "node-0", "node-0 hot")


def pods(fake) -> set[str]:
    return {o["metadata"]["name"] for o in fake.objects.values() if o["kind"] == "Pod"}


def test_an_eviction_the_budget_allows_lands_and_the_next_is_refused(api):
    fake, kube = api
    ev = Evictor(kube, dry_run=False, per_minute=10)
    first = ev.evict(move("web-1"))
    second = ev.evict(move("web-2"))  # 2 healthy left, minAvailable 2: the budget would break
    assert first.result == "evicted" and first.detail == ""
    assert second.result == "refused" and "disruption budget" in second.detail
    assert pods(fake) == {"web-2", "web-3"}
    assert len(fake.evictions()) == 2  # both were asked; the API server judged the budget
    assert second.as_dict()["reason"] == "node-0 hot"


def test_dry_run_sends_nothing(api):
    fake, kube = api
    out = Evictor(kube).evict(move("web-1"))  # dry-run is the default
    assert out.result == "dry-run" and "--apply" in out.detail
    assert fake.requests == [] and pods(fake) == {"web-1", "web-2", "web-3"}


def test_the_per_minute_window_holds_and_reopens():
    now = [0.0]
    sent: list[str] = []

    class Recording:
        def evict_pod(self, namespace: str, name: str) -> dict:
            sent.append(name)
            return {}

    ev = Evictor(Recording(), dry_run=False, per_minute=2, clock=lambda: now[0])
    results = [ev.evict(move(f"p{i}")).result for i in range(3)]
    assert results == ["evicted", "evicted", "rate-limited"] and sent == ["p0", "p1"]
    now[0] = 59.9
    assert ev.evict(move("p3")).result == "rate-limited"
    now[0] = 60.0  # the first eviction has left the 60 s window
    assert ev.evict(move("p4")).result == "evicted" and sent == ["p0", "p1", "p4"]


def test_a_rate_limited_dry_run_is_reported_as_such():
    ev = Evictor(None, per_minute=1, clock=lambda: 0.0)
    assert [ev.evict(move(n)).result for n in ("a", "b")] == ["dry-run", "rate-limited"]


def test_a_vanished_pod_is_refused_and_a_server_error_failed(api):
    fake, kube = api
    ev = Evictor(kube, dry_run=False)
    gone = ev.evict(move("web-9"))
    assert gone.result == "refused" and gone.detail == "pod no longer exists"
    fake.fail("POST", r"/eviction$", 500)
    broken = ev.evict(move("web-1"))
    assert broken.result == "failed" and "web-1" in pods(fake)


@pytest.mark.parametrize("change,why", [
    ({"metadata": {"namespace": "kube-system"}}, "system pod"),
    ({"spec": {"priorityClassName": "system-node-critical"}}, "system pod"),
    ({"metadata": {"annotations": {"katalyst.kubewharf.io/qos_level": "dedicated_cores"}}}, "dedicated_cores pod"),
    ({"metadata": {"annotations": {"katalyst.kubewharf.io/qos_level": "system_cores"}}}, "system_cores pod"),
    ({"metadata": {"annotations": {"tidewise.io/evict": "false"}}}, "opted out (tidewise.io/evict: false)"),
    ({"metadata": {"annotations": {"kubernetes.io/config.mirror": "x"}}}, "static pod"),
    ({"metadata": {"ownerReferences": []}}, "no controller would recreate it"),
    ({"metadata": {"ownerReferences": [dict(OWNER[0], controller=False)]}}, "no controller would recreate it"),
    ({"metadata": {"ownerReferences": [dict(OWNER[0], kind="DaemonSet")]}}, "DaemonSet pod"),
    ({"status": {"phase": "Succeeded"}}, "already finished"),
])
def test_movable_names_why_a_pod_stays(change, why):
    p = web_pod("web-1")
    for part, values in change.items():
        p[part] = {**p[part], **values}
    assert movable(p) == why


def test_movable_accepts_a_shared_or_reclaimed_pod_with_a_controller():
    assert movable(web_pod("web-1")) is None
    assert movable(web_pod("b", annotations={"katalyst.kubewharf.io/qos_level": "reclaimed_cores"})) is None
