"""Issue 22, low item: a pod uid or container id is part of a cgroup path, so one carrying `../`
(from `enforce --pods-from file` or a forged object) must be refused where pods are collected,
never followed out of the cgroup tree."""
import os
import shutil

import pytest
import yaml

from node_enforcer.collect.pods import pod_from_object, pods_from_objects
from node_enforcer.podspec import make_pod_obj
from tests.node_enforcer.conftest import MIXED_PODS, RECLAIM_PLAN, TWO_SOCKET
from tidewise.cli import main

BATCH_UID = "0a000000-0000-4000-8000-000000000007"  # a reclaimed pod of the fixture, in besteffort


@pytest.fixture
def cg(tmp_path):
    dst = tmp_path / "cgroup"
    shutil.copytree(os.path.join(TWO_SOCKET, "fs", "cgroup"), dst)
    return dst


def _pods_with(tmp_path, uid=None, container_id=None):
    doc = yaml.safe_load(open(MIXED_PODS))
    pod = next(p for p in doc["items"] if p["metadata"]["uid"] == BATCH_UID)
    if uid:
        pod["metadata"]["uid"] = uid
    if container_id:
        pod["status"]["containerStatuses"][0]["containerID"] = container_id
    path = tmp_path / "pods.yaml"
    path.write_text(yaml.safe_dump(doc))
    return str(path)


@pytest.mark.parametrize("uid,container_id", [
    (None, "containerd://../../../../escape"),
    (f"{BATCH_UID}/../../../../escape", None),
])
def test_a_path_in_an_id_is_refused_not_followed(cg, tmp_path, capsys, caplog, uid, container_id):
    escape = tmp_path / "escape"  # what the traversal reaches: tmp_path, next to the cgroup tree
    escape.mkdir()
    for name in ("cpuset.cpus", "cpu.max", "memory.max", "memory.high", "cpu.weight"):
        (escape / name).write_text("untouched\n")
    pods = _pods_with(tmp_path, uid, container_id)
    rc = main(["enforce", "--once", "--node", "fixture-node", "--pods-from", "file", "--pods", pods,
               "--sysfs-root", TWO_SOCKET, "--cgroup-root", str(cg), "--reclaim-plan", RECLAIM_PLAN,
               "--checkpoint", str(tmp_path / "ck.json"), "--no-eviction"])
    assert rc == 0
    assert {f.name: f.read_text() for f in escape.iterdir()} == dict.fromkeys(os.listdir(escape), "untouched\n")
    assert "skipping pod" in caplog.text and "it would name a cgroup path" in caplog.text


@pytest.mark.parametrize("uid", ["..", "../x", "a" * 33, "0a000000-0000-4000-8000-00000000000/", "", 7])
def test_uids_that_are_not_kubernetes_uids(uid):
    obj = make_pod_obj("p", qos="reclaimed_cores", cpu="1")
    obj["metadata"]["uid"] = uid
    with pytest.raises(ValueError, match="uid|metadata.uid"):
        pod_from_object(obj)


def test_real_ids_are_kept():
    obj = make_pod_obj("p", qos="reclaimed_cores", cpu="1")
    static = "6c2a4b1e9f0d8c7b6a5e4d3c2b1a0f9e"  # a static pod: the kubelet's hash of its manifest
    obj["metadata"]["uid"] = static
    cid = "a" * 64
    obj["status"]["containerStatuses"][0]["containerID"] = f"cri-o://{cid}"
    pod = pod_from_object(obj)
    assert pod.uid == static and pod.containers[0].id == cid
    bad = make_pod_obj("q", qos="reclaimed_cores", cpu="1")
    bad["status"]["containerStatuses"][0]["containerID"] = "containerd://x/../../y"
    assert [p.name for p in pods_from_objects([obj, bad])] == ["p"]
