"""The kinds a feature reads only when enabled (`OPTIONAL_KINDS`: disruption budgets, Katalyst SPD,
IHPA and TideNodePool) through the real `kubernetes` client against the API fake: read when asked,
not listed otherwise, a missing CRD means none, and the fake refuses what breaks a CRD schema."""
from __future__ import annotations

import pytest
from kubernetes import client

from autoscaler.input.cluster import ApiCluster
from autoscaler.input.watched import WatchedCluster
from autoscaler.kube import Kube
from contracts.informer import Backoff
from contracts.kube_errors import KubeError, NotFound
from testsupport.kube_fake import FakeApiServer
from tests.conftest import wait_until

POOL = {"apiVersion": "tide.katalyst.kubewharf.io/v1alpha1", "kind": "TideNodePool", "metadata": {"name": "pool-a"},
        "spec": {"nodeConfigs": {"nodeSelector": {"pool": "a"}, "reserve": {"online": 2, "offline": "10%"}}}}
PDB = {"apiVersion": "policy/v1", "kind": "PodDisruptionBudget", "metadata": {"name": "web", "namespace": "shop"},
       "spec": {"minAvailable": 1, "selector": {"matchLabels": {"app": "web"}}}}


@pytest.fixture
def api(objects):
    fake = FakeApiServer(objects + [POOL, PDB]).start()
    cfg = client.Configuration()
    cfg.host = fake.url
    kube = Kube(client.ApiClient(cfg), sleep=lambda s: None, max_retries=0)
    kube.watch_seconds = 2
    try:
        yield fake, kube
    finally:
        kube.api_client.close()
        fake.stop()


def test_optional_kinds_are_read_only_when_asked(api):
    fake, kube = api
    plain = ApiCluster(kube).read()
    assert plain.others == {}
    assert not fake.lists("tidenodepools") and not fake.lists("poddisruptionbudgets")
    state = ApiCluster(kube, ("TideNodePool", "PodDisruptionBudget")).read()
    assert [p["metadata"]["name"] for p in state.others["TideNodePool"]] == ["pool-a"]
    assert state.others["PodDisruptionBudget"][0]["kind"] == "PodDisruptionBudget"  # restored on list items
    assert len(state.pods) == len(plain.pods) > 0


def test_a_missing_crd_means_none_but_a_missing_builtin_fails(api):
    fake, kube = api
    fake.fail("GET", r"/tidenodepools$", 404)
    state = ApiCluster(kube, ("TideNodePool",)).read()
    assert "TideNodePool" not in state.others and state.nodes
    fake.fail("GET", r"/poddisruptionbudgets$", 404)
    with pytest.raises(NotFound):
        ApiCluster(kube, ("PodDisruptionBudget",)).read()


def test_watched_optional_kind_follows_changes(api):
    fake, kube = api
    watched = WatchedCluster(kube, backoff=lambda: Backoff(initial=0.01, cap=0.05), extra_kinds=("TideNodePool",))
    try:
        assert len(watched.read().others["TideNodePool"]) == 1
        fake.put(dict(POOL, metadata={"name": "pool-b"}))
        assert wait_until(lambda: len(watched.read().others["TideNodePool"]) == 2)
        assert len(fake.lists("tidenodepools")) == 1  # the change came through the watch
    finally:
        watched.stop()


def test_the_fake_refuses_an_object_its_crd_rejects(api):
    fake, kube = api
    with pytest.raises(KubeError, match="422.*nodeConfigs"):
        kube.call("create pool", kube.custom.create_cluster_custom_object, "tide.katalyst.kubewharf.io",
                  "v1alpha1", "tidenodepools", {"apiVersion": "tide.katalyst.kubewharf.io/v1alpha1",
                                                "kind": "TideNodePool", "metadata": {"name": "bad"},
                                                "spec": {"nodeConfigs": 5}})
    with pytest.raises(KubeError, match="422"):
        kube.patch_tide_pool_status("pool-a", {"status": {"tideNodes": {"nodes": "n1"}}})
    assert fake.get("TideNodePool", "pool-a").get("status") is None
