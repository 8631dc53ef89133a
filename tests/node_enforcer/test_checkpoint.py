import json
import os

import pytest

from node_enforcer.cgroups import V2Driver
from node_enforcer.checkpoint import CheckpointError, load_checkpoint, restore, save_checkpoint
from node_enforcer.enforce import enforce
from node_enforcer.policy import plan
from node_enforcer.writers import FileWriter
from tests.node_enforcer.conftest import make_pod
from tests.node_enforcer.test_cgroups import v2_tree

DED = "dedicated_cores"


def _setup(tmp_path, topo):
    pods = [make_pod("a", DED, cpu="4", priority=1), make_pod("b", DED, cpu="2", mem_enh={"numa_binding": True}),
            make_pod("web", cpu="1")]
    alloc = plan(topo, pods)
    return pods, alloc


def test_round_trip_and_no_rewrite_when_unchanged(tmp_path, two_socket):
    pods, alloc = _setup(tmp_path, two_socket)
    path = str(tmp_path / "ck.json")
    assert save_checkpoint(path, "n1", alloc) is True
    mtime = os.stat(path).st_mtime_ns
    assert save_checkpoint(path, "n1", alloc) is False and os.stat(path).st_mtime_ns == mtime
    assert load_checkpoint(path, "n1") == dict(alloc.dedicated)
    assert [f for f in os.listdir(tmp_path) if f != "ck.json"] == []  # no temp file left behind


@pytest.mark.parametrize("corrupt,message", [
    (lambda t: t[: len(t) // 2], "unreadable"),
    (lambda t: t.replace('"node": "n1"', '"node": "n2"'), "checksum"),
    (lambda t: "", "unreadable"),
    (lambda t: "[]", "unreadable"),
    (lambda t: json.dumps({"sha256": "x", "payload": None}), "checksum"),
])
def test_corrupt_checkpoint_is_detected(tmp_path, two_socket, corrupt, message):
    _, alloc = _setup(tmp_path, two_socket)
    path = tmp_path / "ck.json"
    save_checkpoint(str(path), "n1", alloc)
    text = path.read_text()
    path.write_text(corrupt(text))
    with pytest.raises(CheckpointError, match=message):
        load_checkpoint(str(path), "n1")


def test_checkpoint_of_another_node_is_refused(tmp_path, two_socket):
    _, alloc = _setup(tmp_path, two_socket)
    save_checkpoint(str(tmp_path / "ck.json"), "other", alloc)
    with pytest.raises(CheckpointError, match="for node 'other'"):
        load_checkpoint(str(tmp_path / "ck.json"), "n1")


def test_restart_restores_without_moving_a_dedicated_pod(tmp_path, two_socket):
    pods, alloc = _setup(tmp_path, two_socket)
    path = str(tmp_path / "ck.json")
    save_checkpoint(path, "n1", alloc)
    # after the restart a higher-priority dedicated pod arrives; it must not take a's cores
    newcomer = make_pod("vip", DED, cpu="4", priority=100)
    r = restore(path, "n1", pods + [newcomer], V2Driver(str(tmp_path / "none")), FileWriter())
    assert r.source == "checkpoint"
    after = plan(two_socket, pods + [newcomer], previous=r.dedicated)
    for key in ("default/a", "default/b"):
        assert after.pod(key).cpus == alloc.pod(key).cpus
    assert not after.pod("default/vip").cpus & (alloc.pod("default/a").cpus | alloc.pod("default/b").cpus)


def test_corrupt_checkpoint_is_rebuilt_from_the_cgroups(tmp_path, two_socket):
    pods, alloc = _setup(tmp_path, two_socket)
    cg = str(tmp_path / "cg")
    v2_tree(cg, pods)
    enforce(alloc, pods, V2Driver(cg), FileWriter())  # the cgroups hold the allocation
    path = tmp_path / "ck.json"
    path.write_text("{ not json")
    r = restore(str(path), "n1", pods, V2Driver(cg), FileWriter())
    assert r.source == "cgroups" and "unreadable" in r.reason
    assert r.dedicated == dict(alloc.dedicated)  # only the dedicated pods, each with its cores
    newcomer = make_pod("vip", DED, cpu="4", priority=100)
    after = plan(two_socket, pods + [newcomer], previous=r.dedicated)
    assert after.pod("default/a").cpus == alloc.pod("default/a").cpus


def test_no_checkpoint_and_no_cgroups_is_empty(tmp_path, two_socket):
    pods, _ = _setup(tmp_path, two_socket)
    r = restore(str(tmp_path / "none.json"), "n1", pods, V2Driver(str(tmp_path)), FileWriter())
    assert r.source == "empty" and r.dedicated == {}


def test_checkpoint_entries_of_gone_pods_are_dropped(tmp_path, two_socket):
    pods, alloc = _setup(tmp_path, two_socket)
    save_checkpoint(str(tmp_path / "ck.json"), "n1", alloc)
    r = restore(str(tmp_path / "ck.json"), "n1", pods[1:], V2Driver(str(tmp_path)), FileWriter())
    assert set(r.dedicated) == {pods[1].uid}
