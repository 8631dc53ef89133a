"""The one Evictor (`autoscaler/output/eviction.py`) through the real `kubernetes` client against
the API fake: a disruption budget refuses (429 -> `refused`), dry-run sends nothing, the
per-minute window holds, a vanished pod is `refused`, other errors `failed`; and `movable`'s
safety list."""
from __future__ import annotations

import pytest
from kubernetes import client

from autoscaler.kube import Kube
from autoscaler.output.eviction import Evictor, Move, movable
from testsupport.kube_fake import FakeApiServer

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


SAFE = "cluster-autoscaler.kubernetes.io/safe-to-evict"


@pytest.mark.parametrize("annotations,why", [
    ({SAFE: "false"}, f"opted out ({SAFE}: false)"),
    ({SAFE: " False\n"}, f"opted out ({SAFE}: False)"),
    ({"tidewise.io/evict": "False"}, "opted out (tidewise.io/evict: False)"),
    ({"tidewise.io/evict": "0"}, "opted out (tidewise.io/evict: 0)"),
    ({"tidewise.io/evict": "no"}, "opted out (tidewise.io/evict: no)"),
    ({"tidewise.io/evict": " off "}, "opted out (tidewise.io/evict: off)"),
    ({"tidewise.io/evict": "true", SAFE: "true"}, None),
])
def test_movable_respects_the_cluster_markers_with_any_false_value(annotations, why):
    """Defect 8: only the exact `tidewise.io/evict: "false"` opted out; safe-to-evict was ignored."""
    assert movable(web_pod("web-1", annotations=annotations)) == why


def with_volumes(*volumes, **meta_extra) -> dict:
    p = web_pod("web-1", **meta_extra)
    p["spec"]["volumes"] = list(volumes)
    return p


SCRATCH = {"name": "scratch", "emptyDir": {}}
CACHE = {"name": "cache", "emptyDir": {"medium": "Memory", "sizeLimit": "1Gi"}}
HOST = {"name": "logs", "hostPath": {"path": "/var/log"}}
CONFIG = {"name": "cfg", "configMap": {"name": "web"}}


def test_pods_with_local_storage_stay_unless_a_setting_or_the_pod_allows():
    assert movable(with_volumes(CONFIG)) is None  # a configMap is not local data
    assert "volume scratch" in movable(with_volumes(SCRATCH, CONFIG))
    assert "volume logs" in movable(with_volumes(HOST))
    assert "volume cache" in movable(with_volumes(CACHE))  # memory too, by default
    assert movable(with_volumes(CACHE), "memory") is None
    assert "volume scratch" in movable(with_volumes(CACHE, SCRATCH), "memory")
    assert movable(with_volumes(CACHE, SCRATCH), "always") is None
    # the cluster autoscaler's own ways of allowing it, on the pod
    assert movable(with_volumes(SCRATCH, annotations={SAFE: "true"})) is None
    local = "cluster-autoscaler.kubernetes.io/safe-to-evict-local-volumes"
    assert movable(with_volumes(SCRATCH, CACHE, annotations={local: "scratch, cache"})) is None
    assert "volume cache" in movable(with_volumes(SCRATCH, CACHE, annotations={local: "scratch"}))
    # a DaemonSet pod with a hostPath is named as such (tide: it does not keep a node from being lent)
    ds = with_volumes(HOST, ownerReferences=[dict(OWNER[0], kind="DaemonSet")])
    assert movable(ds) == "DaemonSet pod"


def test_the_local_storage_setting_is_checked():
    from autoscaler.settings import RebalanceSettings, TideSettings

    with pytest.raises(ValueError, match="evict_local_storage 'sometimes': one of never, memory, always"):
        RebalanceSettings(evict_local_storage="sometimes").check()
    with pytest.raises(ValueError, match="evict_local_storage"):
        TideSettings(evict_local_storage="yes").check()
