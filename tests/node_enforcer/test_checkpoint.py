import json
import os

import pytest

from node_enforcer.enforce.apply import enforce
from node_enforcer.enforce.cgroups import V2Driver
from node_enforcer.enforce.checkpoint import CheckpointError, load_checkpoint, restore, save_checkpoint
from node_enforcer.enforce.files import HostFiles
from node_enforcer.policy.plan import plan
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
    r = restore(path, "n1", pods + [newcomer], V2Driver(str(tmp_path / "none")), HostFiles())
    assert r.source == "checkpoint"
    after = plan(two_socket, pods + [newcomer], previous=r.dedicated)
    for key in ("default/a", "default/b"):
        assert after.pod(key).cpus == alloc.pod(key).cpus
    assert not after.pod("default/vip").cpus & (alloc.pod("default/a").cpus | alloc.pod("default/b").cpus)


def test_corrupt_checkpoint_is_rebuilt_from_the_cgroups(tmp_path, two_socket):
    pods, alloc = _setup(tmp_path, two_socket)
    cg = str(tmp_path / "cg")
    v2_tree(cg, pods)
    enforce(alloc, pods, V2Driver(cg), HostFiles())  # the cgroups hold the allocation
    path = tmp_path / "ck.json"
    path.write_text("{ not json")
    r = restore(str(path), "n1", pods, V2Driver(cg), HostFiles())
    assert r.source == "cgroups" and "unreadable" in r.reason
    assert r.dedicated == dict(alloc.dedicated)  # only the dedicated pods, each with its cores
    newcomer = make_pod("vip", DED, cpu="4", priority=100)
    after = plan(two_socket, pods + [newcomer], previous=r.dedicated)
    assert after.pod("default/a").cpus == alloc.pod("default/a").cpus


def test_no_checkpoint_and_no_cgroups_is_empty(tmp_path, two_socket):
    pods, _ = _setup(tmp_path, two_socket)
    r = restore(str(tmp_path / "none.json"), "n1", pods, V2Driver(str(tmp_path)), HostFiles())
    assert r.source == "empty" and r.dedicated == {}


def test_checkpoint_entries_of_gone_pods_are_dropped(tmp_path, two_socket):
    pods, alloc = _setup(tmp_path, two_socket)
    save_checkpoint(str(tmp_path / "ck.json"), "n1", alloc)
    r = restore(str(tmp_path / "ck.json"), "n1", pods[1:], V2Driver(str(tmp_path)), HostFiles())
    assert set(r.dedicated) == {pods[1].uid}


# issue 10: a corrupted payload under an intact checksum; a checkpoint path that is a folder ------
def _corrupt_payload_keep_checksum(path):
    doc = json.loads(path.read_text())
    first = next(iter(doc["payload"]["dedicated"]))
    doc["payload"]["dedicated"][first] = "0-63"  # another pod's cores, say: the checksum no longer matches
    path.write_text(json.dumps(doc))
    return doc["sha256"]


def test_a_corrupted_payload_under_an_intact_checksum_is_rewritten(tmp_path, two_socket):
    _, alloc = _setup(tmp_path, two_socket)
    path = tmp_path / "ck.json"
    save_checkpoint(str(path), "n1", alloc)
    stored = _corrupt_payload_keep_checksum(path)
    with pytest.raises(CheckpointError, match="checksum"):
        load_checkpoint(str(path), "n1")
    # the same allocation again: the stored checksum equals the new one, but the file is not a copy of it
    assert save_checkpoint(str(path), "n1", alloc) is True
    assert load_checkpoint(str(path), "n1") == dict(alloc.dedicated)
    assert json.loads(path.read_text())["sha256"] == stored
    assert save_checkpoint(str(path), "n1", alloc) is False  # and once repaired, left alone


def test_the_agent_repairs_a_corrupted_checkpoint_on_its_next_pass(tmp_path, two_socket):
    from tests.node_enforcer.test_agent import _agent

    pods = [make_pod("db", DED, cpu="4"), make_pod("web", cpu="2")]
    _agent(tmp_path, two_socket, pods).reconcile_once()
    path = tmp_path / "ck.json"
    _corrupt_payload_keep_checksum(path)
    restarted = _agent(tmp_path, two_socket, pods)
    res = restarted.reconcile_once()
    assert res.error is None and res.restored.source == "cgroups" and "checksum" in res.restored.reason
    assert res.checkpoint_written
    assert load_checkpoint(str(path), "n1") == dict(res.allocation.dedicated)


@pytest.mark.parametrize("make,message", [
    (lambda p: p.mkdir(), "is a folder"),
    (lambda p: os.mkfifo(p), "not a regular file"),
    (lambda p: (p.parent / "file").write_text("x") or None, None),
])
def test_an_unusable_checkpoint_path_stops_the_agent_before_any_cgroup_write(tmp_path, two_socket, make, message):
    from node_enforcer.agent import Agent
    from node_enforcer.enforce.files import HostFiles
    from node_enforcer.settings import EnforcerSettings

    pods = [make_pod("db", DED, cpu="4"), make_pod("web", cpu="2")]
    cg = str(tmp_path / "cg")
    v2_tree(cg, pods)
    before = {os.path.join(d, f): open(os.path.join(d, f)).read() for d, _, fs in os.walk(cg) for f in fs}
    ck = tmp_path / "ck"
    make(ck)
    if message is None:  # a checkpoint under a path whose folder is a file
        ck = tmp_path / "file" / "ck.json"
        message = "is not a folder"
    agent = Agent(EnforcerSettings(node="n1", checkpoint=str(ck)), two_socket, lambda: pods, V2Driver(cg), HostFiles())
    res = agent.reconcile_once()  # no exception
    assert res.error is not None and message in res.error and str(ck) in res.error
    assert res.report is None and not res.checkpoint_written
    after = {os.path.join(d, f): open(os.path.join(d, f)).read() for d, _, fs in os.walk(cg) for f in fs}
    assert after == before  # not one cgroup file written


def test_path_problem_accepts_a_file_or_a_new_name(tmp_path):
    from node_enforcer.enforce.checkpoint import path_problem

    assert path_problem(str(tmp_path / "ck.json")) is None
    (tmp_path / "ck.json").write_text("{}")
    assert path_problem(str(tmp_path / "ck.json")) is None
    assert path_problem(str(tmp_path / "new" / "ck.json")) is None  # the one missing folder is created on save
    assert "cannot be created" in path_problem(str(tmp_path / "a" / "b" / "ck.json"))


def test_a_fifo_at_the_checkpoint_path_is_refused_without_opening_it(tmp_path):
    os.mkfifo(tmp_path / "ck.json")  # opening it for reading would block the agent forever
    with pytest.raises(CheckpointError, match="not a regular file"):
        load_checkpoint(str(tmp_path / "ck.json"), "n1")


def test_enforce_once_with_a_folder_as_checkpoint_exits_2_and_writes_no_cgroup(tmp_path, capsys):
    import shutil

    from tests.node_enforcer.conftest import MIXED_PODS, RECLAIM_PLAN, TWO_SOCKET
    from tidewise.cli import main

    cg = tmp_path / "cgroup"
    shutil.copytree(os.path.join(TWO_SOCKET, "fs", "cgroup"), cg)
    before = {os.path.join(d, f): open(os.path.join(d, f)).read() for d, _, fs in os.walk(cg) for f in fs}
    (tmp_path / "ck").mkdir()
    rc = main(["enforce", "--once", "--node", "fixture-node", "--pods-from", "file", "--pods", MIXED_PODS,
               "--sysfs-root", TWO_SOCKET, "--cgroup-root", str(cg), "--reclaim-plan", RECLAIM_PLAN,
               "--checkpoint", str(tmp_path / "ck"), "--no-eviction"])
    err = capsys.readouterr().err
    assert rc == 2 and f"--checkpoint {tmp_path / 'ck'}: is a folder" in err and "Traceback" not in err
    assert len(err.strip().splitlines()) == 1
    after = {os.path.join(d, f): open(os.path.join(d, f)).read() for d, _, fs in os.walk(cg) for f in fs}
    assert after == before
