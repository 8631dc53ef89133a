import pytest

from contracts.kube_errors import Forbidden, KubeError, NotFound, TooManyRequests
from node_enforcer.kube import KubeApi
from testsupport.kube_fake import FakeApiServer
from tests.node_enforcer.conftest import make_pod_obj


def test_list_node_pods_uses_the_field_selector():
    with FakeApiServer.of_node([make_pod_obj("a", node="n1"), make_pod_obj("b", node="n2")]) as fake:
        pods = KubeApi(fake.api_client()).list_node_pods("n1")
    assert [p.name for p in pods] == ["a"]
    get = fake.requests[0]
    assert get.path == "/api/v1/pods" and get.params["fieldSelector"] == ["spec.nodeName=n1"]


def test_error_mapping():
    with FakeApiServer.of_node([make_pod_obj("a", ns="x")]) as fake:
        api = KubeApi(fake.api_client(), node="n1")
        with pytest.raises(NotFound, match='evict x/nope: 404 pods "nope" not found'):
            api.evict("x", "nope", node="n1")
        fake.get("Pod", "a", "x")["metadata"]["labels"] = {"app": "a"}
        fake.put({"kind": "PodDisruptionBudget", "metadata": {"name": "a", "namespace": "x"},
                  "spec": {"minAvailable": 1, "selector": {"matchLabels": {"app": "a"}}}})
        with pytest.raises(TooManyRequests, match="disruption budget"):
            api.evict("x", "a", dry_run=False, node="n1")
        assert "dryRun" not in fake.requests[-1].params  # a real eviction when asked
        fake.fail("POST", "/eviction$", 403, message="forbidden by RBAC")
        with pytest.raises(Forbidden, match="forbidden by RBAC"):
            api.evict("x", "a", node="n1")


def test_unreachable_api_is_a_kube_error():
    from kubernetes import client

    cfg = client.Configuration()
    cfg.host = "http://127.0.0.1:9"
    cfg.retries = 0
    with pytest.raises(KubeError, match="list pods of node n1"):
        KubeApi(client.ApiClient(cfg)).list_node_pods("n1")
