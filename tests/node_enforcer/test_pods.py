import json
import logging

import pytest

from contracts.quantity import parse_cpu_millis, parse_memory_bytes
from node_enforcer.collect.pods import KubeletPods, pod_from_object, pods_from_objects, read_pods_file
from testsupport.kube_fake import FakeApiServer
from predictor.errors import InputError, TidewiseError
from tests.node_enforcer.conftest import MIXED_PODS, make_pod_obj


@pytest.mark.parametrize("q,m", [("500m", 500), ("1", 1000), ("1.5", 1500), ("0.1", 100), ("250000u", 250),
                                 ("2", 2000), (3, 3000), ("1e0", 1000)])
def test_cpu_quantities(q, m):
    assert parse_cpu_millis(q) == m


@pytest.mark.parametrize("q,b", [("512Mi", 512 * 2**20), ("1Gi", 2**30), ("1G", 10**9), ("1e9", 10**9),
                                 ("1000", 1000), ("128k", 128000)])
def test_memory_quantities(q, b):
    assert parse_memory_bytes(q) == b


@pytest.mark.parametrize("bad", ["", "one", "1Gi", "-1", "1x"])
def test_bad_cpu_quantity(bad):
    with pytest.raises(ValueError):
        parse_cpu_millis(bad)


def test_pod_fields_and_k8s_qos():
    p = pod_from_object(make_pod_obj("g", cpu="2", memory="1Gi", limit_cpu="2", limit_memory="1Gi", containers=2))
    assert p.k8s_qos == "Guaranteed" and p.cpu_request_millis == 4000 and p.memory_limit_bytes == 2 * 2**30
    assert [c.id for c in p.containers] == [p.uid[-8:] + "00", p.uid[-8:] + "01"]
    assert pod_from_object(make_pod_obj("b", cpu="1")).k8s_qos == "Burstable"
    assert pod_from_object(make_pod_obj("be")).k8s_qos == "BestEffort"
    # a limit without a request defaults the request, as the API server does
    assert pod_from_object(make_pod_obj("l", limit_cpu="3", limit_memory="1Gi")).k8s_qos == "Guaranteed"


def test_bad_pod_objects_are_skipped_with_a_log(caplog):
    good = make_pod_obj("good", cpu="1")
    bad_cpu = make_pod_obj("bad-cpu", cpu="lots")
    no_uid = make_pod_obj("no-uid")
    del no_uid["metadata"]["uid"]
    with caplog.at_level(logging.WARNING):
        pods = pods_from_objects([good, bad_cpu, no_uid, "not a pod", {"metadata": {"name": "x", "uid": "u"}}])
    assert [p.name for p in pods] == ["good"]
    assert "bad-cpu" in caplog.text and "not a pod" not in caplog.text and "skipping pod" in caplog.text


def test_node_filter_and_finished_pods():
    done = make_pod_obj("done")
    done["status"]["phase"] = "Succeeded"
    pods = pods_from_objects({"items": [make_pod_obj("a", node="n1"), make_pod_obj("b", node="n2"), done]}, "n1")
    assert [p.name for p in pods] == ["a"]


def test_read_mixed_fixture_yaml_and_json(tmp_path):
    pods = read_pods_file(MIXED_PODS, "fixture-node")
    assert len(pods) == 8 and "other-node-pod" not in {p.name for p in pods}
    web = next(p for p in pods if p.name == "web-7d9f")
    assert [c.id for c in web.containers] == ["c0ffee04", "c0ffee14"] and web.cpu_request_millis == 2500
    path = tmp_path / "pods.json"
    path.write_text(json.dumps([make_pod_obj("x", node="fixture-node")]))
    assert [p.name for p in read_pods_file(str(path), "fixture-node")] == ["x"]


def test_read_pods_file_errors(tmp_path):
    with pytest.raises(InputError, match="no such file"):
        read_pods_file(str(tmp_path / "missing.yaml"))
    (tmp_path / "bad.yaml").write_text("a: [b\n")
    with pytest.raises(InputError, match="neither JSON nor YAML"):
        read_pods_file(str(tmp_path / "bad.yaml"))
    (tmp_path / "scalar.yaml").write_text("42\n")
    with pytest.raises(InputError, match="PodList"):
        read_pods_file(str(tmp_path / "scalar.yaml"))


def test_kubelet_source_against_a_local_http_fake(tmp_path):
    token = tmp_path / "token"
    token.write_text("s3cret\n")
    with FakeApiServer.of_node([make_pod_obj("a", node="n1"), make_pod_obj("b", node="n1")]) as fake:
        pods = KubeletPods(fake.url, token_file=str(token)).list("n1")
    assert [p.name for p in pods] == ["a", "b"]
    assert fake.requests[0].path == "/pods" and fake.requests[0].auth == "Bearer s3cret"


def test_kubelet_unreachable_is_a_tidewise_error():
    with pytest.raises(TidewiseError, match="kubelet http://127.0.0.1:9/pods"):
        KubeletPods("http://127.0.0.1:9", token_file=None, timeout=0.5).list()
