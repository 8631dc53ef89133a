"""The v2 driver on the machine's real unified mount (/sys/fs/cgroup/unified), for what it offers.

Here the cpu, cpuset and memory controllers are bound to the v1 hierarchies, so the unified mount
offers cgroup.procs and PSI (memory.pressure) but no cpu.max/memory.max: the driver must report
those files as unsupported (no error, no write), still find the pods' processes (oom_score_adj),
and read the cgroup's PSI. The full v2 file set is tested on a v2-shaped tree in
tests/node_enforcer/test_cgroups.py.
"""
import os
import signal
import subprocess

import pytest

from contracts.reclaim import ReclaimPlan
from node_enforcer.agent import Agent
from node_enforcer.collect.pressure import read_pressure
from node_enforcer.collect.topology import read_topology
from node_enforcer.enforce.apply import enforce
from node_enforcer.enforce.files import HostFiles
from node_enforcer.policy.allocation import PolicySettings
from node_enforcer.policy.plan import plan
from node_enforcer.settings import EnforcerSettings
from testsupport import realcgroups as rc
from testsupport.realcgroups import V2_ROOT, CgroupsNotWritable, RealTree, leftovers
from tests.node_enforcer.conftest import make_pod

pytestmark = pytest.mark.integration


@pytest.fixture
def tree(request):
    if not os.path.exists(os.path.join(V2_ROOT, "cgroup.controllers")):
        pytest.fail(f"no cgroup v2 mount at {V2_ROOT}: these tests need one (it exists on this machine and in CI)")
    try:
        t = RealTree(2, "systemd")
    except CgroupsNotWritable as exc:
        pytest.fail(str(exc))
    request.addfinalizer(lambda: (t.close(), _clean(t.name)))
    return t


def _clean(name):
    assert leftovers([name]) == []


def test_v2_driver_on_the_real_unified_mount(tree):
    topo = read_topology("/sys")
    batch = make_pod("batch", "reclaimed_cores", limit_memory="64Mi", mem_enh={"oom_priority": -200},
                     k8s_qos="BestEffort")
    pids = tree.add_pod(batch)
    driver = tree.driver()
    alloc = plan(topo, [batch], settings=PolicySettings(reserved_cpus=0, reclaim_floor_cpus=1))
    rep = enforce(alloc, [batch], driver, HostFiles())
    assert not rep.errors and not rep.missing
    offered = set(open(os.path.join(V2_ROOT, "cgroup.controllers")).read().split())
    expected_missing = {"cpuset.cpus", "cpuset.mems", "cpu.max", "memory.max", "memory.high"}
    if "cpu" not in offered:
        assert expected_missing <= {os.path.basename(u) for u in rep.unsupported}
    assert [c.path for c in rep.changes] == [f"/proc/{pids[0]}/oom_score_adj"]
    with open(f"/proc/{pids[0]}/oom_score_adj") as fh:
        assert fh.read().strip() == "200"
    assert enforce(alloc, [batch], driver, HostFiles()).changes == []
    # the pod's own PSI, as eviction reads it
    p = read_pressure("/proc", psi_path=os.path.join(driver.pod_dir(batch), "memory.pressure"))
    assert p.psi_some_avg10 is not None and 0.0 <= p.psi_some_avg10 <= 100.0


def test_batch_memory_on_the_real_unified_mount_stays_within_the_plan(tree, tmp_path):
    """The reclaimed root's memory.max where the unified mount offers memory; where it does not (here),
    the root cap cannot take, so the agent splits the plan among the batch pods and says so."""
    lent = 256 * 2**20
    reclaim = ReclaimPlan("n1", "2026-11-30T00:00:00Z", 3600, 1000, lent, 100)
    batch = [make_pod(f"batch-{i}", "reclaimed_cores", k8s_qos="BestEffort") for i in range(2)]
    for p in batch:
        tree.add_pod(p)
    s = EnforcerSettings(node="n1", checkpoint=str(tmp_path / "ck.json"),
                         policy=PolicySettings(reserved_cpus=0, reclaim_floor_cpus=1))
    driver = tree.driver()
    res = Agent(s, read_topology("/sys"), lambda: batch, driver, HostFiles(), reclaim=lambda: reclaim).reconcile_once()
    assert not res.report.errors and not res.report.missing
    root = os.path.join(driver.qos_dir("BestEffort"), "memory.max")
    if "memory" in set(open(os.path.join(V2_ROOT, "cgroup.controllers")).read().split()):
        assert int(open(root).read()) == lent and "one cap of" in res.allocation.batch_memory.note
        return
    assert root in res.report.unsupported and not any(c.path.endswith("memory.max") for c in res.report.changes)
    assert "split among 2 reclaimed pods" in res.allocation.batch_memory.note
    assert sum(res.allocation.pod(p.key).memory_max_bytes for p in batch) <= lent


def test_stale_trees_on_the_unified_mount_are_removed_and_live_ones_kept():
    if not os.path.exists(os.path.join(V2_ROOT, "cgroup.controllers")):
        pytest.fail(f"no cgroup v2 mount at {V2_ROOT}: these tests need one (it exists on this machine and in CI)")
    done = subprocess.Popen(["true"])
    done.wait()
    dead = rc.RealTree(2, "systemd", name=f"{rc.PREFIX}{done.pid}-1-deadbeef")
    live = rc.RealTree(2, "systemd")
    try:
        dead.add_pod(make_pod("batch", "reclaimed_cores", k8s_qos="BestEffort"))
        assert len(leftovers([dead.name])) == 1
        removed = rc.remove_stale_trees([V2_ROOT])
        assert leftovers([dead.name]) == [] and any(p.endswith(dead.name) for p in removed)
        assert dead.procs[0].wait(timeout=30) == -signal.SIGKILL
        assert len(leftovers([live.name])) == 1
    finally:
        dead.close()
        live.close()
    assert leftovers([dead.name, live.name]) == []
