"""The node enforcer on this machine's real cgroup v1 hierarchy (cpuset, cpu, memory).

Each test builds its own uniquely named sub-tree with real `sleep` processes standing in for
containers, applies a plan, checks the kernel's view (affinity, quota, memory limit,
oom_score_adj), checks that a re-run writes nothing, and removes everything in a finaliser. If the
cgroups are not writable the tests fail, saying so: they are writable here and in CI.
"""
import os
import signal
import subprocess
import sys
import time

import pytest

from contracts.reclaim import ReclaimPlan
from node_enforcer.agent import Agent
from node_enforcer.collect.topology import read_topology
from node_enforcer.enforce.apply import enforce
from node_enforcer.enforce.files import V1_UNLIMITED, DryRunFiles, HostFiles
from node_enforcer.policy.allocation import PolicySettings
from node_enforcer.policy.plan import plan
from node_enforcer.settings import EnforcerSettings
from testsupport import realcgroups as rc
from testsupport.realcgroups import V1_ROOT, CgroupsNotWritable, RealTree, leftovers
from tests.node_enforcer.conftest import make_pod
from tests.node_enforcer.conftest import ROOT

pytestmark = pytest.mark.integration
MiB = 2**20


@pytest.fixture
def tree(request):
    conv = getattr(request, "param", "cgroupfs")
    try:
        t = RealTree(1, conv)
    except CgroupsNotWritable as exc:
        pytest.fail(str(exc))
    request.addfinalizer(lambda: (t.close(), _assert_clean(t.name)))
    return t


def _assert_clean(name):
    assert leftovers([name]) == [], f"cgroup sub-tree {name} was not removed"


@pytest.fixture(scope="module")
def topo():
    t = read_topology("/sys")
    assert len(t.cpus) >= 2, "these tests split the machine's CPUs into pools: they need at least 2"
    return t


def _read(path):
    with open(path) as fh:
        return fh.read().strip()


@pytest.mark.parametrize("tree", ["cgroupfs", "systemd"], indirect=True)
def test_shared_and_reclaimed_pools_on_real_cgroups(tree, topo):
    web = make_pod("web", cpu="500m", memory="64Mi", k8s_qos="Burstable")
    batch = make_pod("batch", "reclaimed_cores", mem_enh={"oom_priority": -500}, k8s_qos="BestEffort")
    web_pids, batch_pids = tree.add_pod(web), tree.add_pod(batch)
    settings = PolicySettings(reserved_cpus=0, reclaim_floor_cpus=1, share_headroom=0)
    reclaim = ReclaimPlan("n1", "2026-11-30T00:00:00Z", 3600, reclaimed_millicpu=1000,
                          reclaimed_memory_bytes=256 * MiB, shared_demand_millicpu=500)
    alloc = plan(topo, [web, batch], reclaim, settings)
    share, pool = alloc.pools["share"], alloc.pools["reclaim"]
    assert share and pool and not share & pool
    driver = tree.driver()
    rep = enforce(alloc, [web, batch], driver, HostFiles())
    assert not rep.errors and not rep.missing and rep.changes

    assert os.sched_getaffinity(web_pids[0]) == set(share)
    assert os.sched_getaffinity(batch_pids[0]) == set(pool)
    cpu_dir = driver.pod_dir(batch, "cpu")
    assert int(_read(f"{cpu_dir}/cpu.cfs_quota_us")) == len(pool) * 100_000
    if os.path.exists(f"{cpu_dir}/cpu.idle"):
        assert _read(f"{cpu_dir}/cpu.idle") == "1"
    else:
        assert _read(f"{cpu_dir}/cpu.shares") == "2"
    assert int(_read(f"{driver.pod_dir(batch, 'memory')}/memory.limit_in_bytes")) == 256 * MiB
    assert _read(f"/proc/{batch_pids[0]}/oom_score_adj") == "500"
    assert int(_read(f"{driver.pod_dir(web, 'memory')}/memory.limit_in_bytes")) > 2**60  # online pods untouched

    again = enforce(alloc, [web, batch], driver, HostFiles())
    assert again.changes == [] and not again.errors
    usage = driver.memory_usage(batch, HostFiles())  # what eviction ranks victims by
    assert usage is not None and usage >= 0


def _batch_bound(driver, pods, batch_uids, lent):
    """What the kernel lets the batch pods use together, checked against what the agent says: the
    BestEffort cgroup's limit while it holds batch alone, else the sum of the pods' own limits."""
    root = int(_read(f"{driver.qos_dir('BestEffort', 'memory')}/memory.limit_in_bytes"))
    caps = [int(_read(f"{driver.pod_dir(p, 'memory')}/memory.limit_in_bytes")) for p in pods if p.uid in batch_uids]
    online_beside = [p for p in pods if p.k8s_qos == "BestEffort" and p.uid not in batch_uids]
    if online_beside:
        assert root >= V1_UNLIMITED, "the BestEffort cgroup holds online pods: its cap is lifted"
        return sum(caps)
    assert root == lent and all(c <= lent for c in caps)
    return min(root, sum(caps))


def test_batch_memory_stays_within_the_plan_as_pods_come_and_go(tree, topo, tmp_path):
    """One Burstable online pod, batch pods, and BestEffort pods that are not batch (unannotated, a
    typo, a zero-width space) added and removed between passes: whatever the mix, the limits the
    kernel holds never let the batch pods together use more than the plan lends."""
    lent = 256 * MiB
    reclaim = ReclaimPlan("n1", "2026-11-30T00:00:00Z", 3600, reclaimed_millicpu=1000, reclaimed_memory_bytes=lent,
                          shared_demand_millicpu=100)
    web = make_pod("web", cpu="100m", memory="32Mi", k8s_qos="Burstable")
    batch = [make_pod(f"batch-{i}", "reclaimed_cores", k8s_qos="BestEffort") for i in range(3)]
    others = [make_pod("plain", k8s_qos="BestEffort"), make_pod("typo", "reclaimed", k8s_qos="BestEffort"),
              make_pod("zwsp", "reclaimed_cores\u200b", k8s_qos="BestEffort")]
    many = [make_pod(f"more-{i}", "reclaimed_cores", k8s_qos="BestEffort") for i in range(12)]
    for p in (web, *batch, *others):
        tree.add_pod(p)
    for p in many:
        tree.add_pod(p, start=False)  # cgroups only: many pods, few processes
    current: list = []
    s = EnforcerSettings(node="n1", checkpoint=str(tmp_path / "ck.json"),
                         policy=PolicySettings(reserved_cpus=0, reclaim_floor_cpus=1, share_headroom=0))
    agent = Agent(s, topo, lambda: list(current), tree.driver(), HostFiles(), reclaim=lambda: reclaim)
    batch_uids = {p.uid for p in (*batch, *many)}
    passes = [([web, *batch, others[0]], "split among 3 reclaimed pods"), ([web, *batch], "one cap of"),
              ([web, *batch, *others, *many], "split among 15 reclaimed pods"), ([web, *batch, *many], "one cap of"),
              ([web, batch[0], others[1]], "split among 1 reclaimed pod:"), ([web, *batch[:2], others[2]], "among 2")]
    for pods, says in passes:
        current[:] = pods
        res = agent.reconcile_once()
        assert not res.report.errors and not res.report.missing, res.report.errors
        assert _batch_bound(tree.driver(), pods, batch_uids, lent) <= lent
        assert says in res.allocation.batch_memory.note
        assert agent.reconcile_once().report.changes == []  # and a second pass writes nothing


def test_dedicated_pod_gets_exclusive_cores_and_keeps_them_across_restarts(tree, topo, tmp_path):
    db = make_pod("db", "dedicated_cores", cpu="1", memory="32Mi", limit_cpu="1", limit_memory="32Mi")
    web = make_pod("web", cpu="200m", k8s_qos="Burstable")
    db_pids, web_pids = tree.add_pod(db), tree.add_pod(web)
    s = EnforcerSettings(node="n1", checkpoint=str(tmp_path / "ck.json"),
                         policy=PolicySettings(reserved_cpus=0, reclaim_floor_cpus=0))
    agent = Agent(s, topo, lambda: [db, web], tree.driver(), HostFiles())
    first = agent.reconcile_once()
    assert not first.report.errors and first.checkpoint_written
    mine = first.allocation.pod("default/db").cpus
    assert os.sched_getaffinity(db_pids[0]) == set(mine)
    assert not os.sched_getaffinity(web_pids[0]) & set(mine)  # exclusive
    assert agent.reconcile_once().report.changes == []

    # restart with a higher-priority dedicated newcomer: the running pod is not moved
    vip = make_pod("vip", "dedicated_cores", cpu="1", priority=1000, limit_cpu="1", limit_memory="32Mi",
                   memory="32Mi")
    tree.add_pod(vip)
    restarted = Agent(s, topo, lambda: [db, web, vip], tree.driver(), HostFiles())
    res = restarted.reconcile_once()
    assert res.restored.source == "checkpoint"
    assert res.allocation.pod("default/db").cpus == mine
    assert os.sched_getaffinity(db_pids[0]) == set(mine)

    # a corrupt checkpoint is rebuilt from the cgroups themselves
    (tmp_path / "ck.json").write_text("garbage")
    again = Agent(s, topo, lambda: [db, web, vip], tree.driver(), HostFiles()).reconcile_once()
    assert again.restored.source == "cgroups" and again.allocation.pod("default/db").cpus == mine
    assert not any(db.uid in c.path and "cpuset" in c.path for c in again.report.changes)


def test_dry_run_on_real_cgroups_changes_nothing(tree, topo):
    batch = make_pod("batch", "reclaimed_cores", limit_memory="128Mi", k8s_qos="BestEffort")
    pids = tree.add_pod(batch)
    before = os.sched_getaffinity(pids[0])
    mem = f"{tree.driver().pod_dir(batch, 'memory')}/memory.limit_in_bytes"
    limit_before = _read(mem)
    alloc = plan(topo, [batch], settings=PolicySettings(reserved_cpus=0, reclaim_floor_cpus=1))
    w = DryRunFiles()
    rep = enforce(alloc, [batch], tree.driver(), w)
    assert any(c.path == mem and c.new == str(128 * MiB) for c in rep.changes)
    assert os.sched_getaffinity(pids[0]) == before and _read(mem) == limit_before


def test_cpuset_move_between_disjoint_sets(tree, topo):
    """Moving a running pod from one cpu to a disjoint one passes through the kernel's v1 rules."""
    web = make_pod("web", cpu="100m", k8s_qos="Burstable")
    pids = tree.add_pod(web)
    driver = tree.driver()
    cpus = sorted(topo.cpus)
    for target in ([cpus[0]], [cpus[-1]], [cpus[0]]):
        alloc = plan(topo, [web], settings=PolicySettings(reserved_cpus=0, reclaim_floor_cpus=0))
        alloc = type(alloc)(pools=alloc.pools, dedicated={}, pods=(
            type(alloc.pods[0])(**{**alloc.pods[0].__dict__, "cpus": frozenset(target)}),))
        rep = enforce(alloc, [web], driver, HostFiles())
        assert not rep.errors, rep.errors
        assert os.sched_getaffinity(pids[0]) == set(target)


def test_unwritable_cgroups_fail_with_a_clear_message(monkeypatch):
    """The fixture's guard: a hierarchy we cannot write is reported, not skipped."""
    import testsupport.realcgroups as rc

    monkeypatch.setattr(rc, "V1_ROOT", "/proc/no-cgroups-here")
    with pytest.raises(CgroupsNotWritable, match="need root and a writable cgroup v1 hierarchy"):
        rc.RealTree(1)
    assert os.path.isdir(V1_ROOT)


def _dead_pid():
    proc = subprocess.Popen(["true"])
    proc.wait()  # reaped: nothing has this pid until the kernel hands it out again
    return proc.pid


def test_stale_trees_of_killed_runs_are_removed_and_live_ones_kept():
    """A run killed mid-test leaves its tree, stand-in processes and all; the next run removes it
    (bottom-up, processes first) and leaves the trees of runs still going alone."""
    dead = rc.RealTree(1, name=f"{rc.PREFIX}{_dead_pid()}-1-deadbeef")
    reused = rc.RealTree(1, name=f"{rc.PREFIX}{os.getpid()}-1-0badc0de")  # our pid, another start time
    live = rc.RealTree(1)  # this process's own: alive
    try:
        orphans = []
        for t in (dead, reused):
            orphans += t.add_pod(make_pod("web", cpu="100m", k8s_qos="Burstable", containers=2))
        stale = leftovers([dead.name, reused.name])
        assert len(stale) == 2 * len(rc.V1_CONTROLLERS)
        removed = rc.remove_stale_trees()
        assert set(stale) <= set(removed)
        assert leftovers([dead.name, reused.name]) == []
        for t in (dead, reused):
            for p in t.procs:
                assert p.wait(timeout=30) == -signal.SIGKILL  # the stand-ins left in them were killed
        assert sorted(orphans) == sorted(p.pid for t in (dead, reused) for p in t.procs)
        assert len(leftovers([live.name])) == len(rc.V1_CONTROLLERS)  # a live run's tree is kept
    finally:
        for t in (dead, reused, live):
            t.close()
    assert leftovers([dead.name, reused.name, live.name]) == []


def test_the_first_tree_of_a_run_sweeps_stale_ones(monkeypatch):
    stale = rc.RealTree(1, name=f"{rc.PREFIX}{_dead_pid()}-1-5ca1ab1e")
    stale.made.clear()  # as if its run had been killed: nobody will close it
    monkeypatch.setattr(rc, "_swept", False)  # a fresh process
    with rc.RealTree(1) as fresh:
        assert leftovers([stale.name]) == []
        assert len(leftovers([fresh.name])) == len(rc.V1_CONTROLLERS)


def test_a_run_killed_mid_test_leaves_a_tree_that_the_next_run_removes():
    code = ("import sys, time\n"
            "from testsupport.realcgroups import RealTree\n"
            "from tests.node_enforcer.conftest import make_pod\n"
            "t = RealTree(1)\n"
            "pids = t.add_pod(make_pod('web', cpu='100m', k8s_qos='Burstable'))\n"
            "print(t.name, *pids, flush=True)\n"
            "time.sleep(600)\n")
    run = subprocess.Popen([sys.executable, "-c", code], cwd=ROOT, stdout=subprocess.PIPE, text=True)
    name, *pids = run.stdout.readline().split()
    run.kill()  # SIGKILL: no finaliser, no close()
    run.wait(timeout=30)
    run.stdout.close()
    assert len(leftovers([name])) == len(rc.V1_CONTROLLERS)
    assert all(rc.start_time(int(p)) is not None for p in pids)  # its stand-in container still runs
    rc.remove_stale_trees()
    assert leftovers([name]) == []
    for p in pids:  # killed; reaped by init (their parent is gone) when it gets to it: a zombie counts
        for _ in range(1500):
            if not _running(int(p)):
                break
            time.sleep(0.02)
        else:
            pytest.fail(f"stand-in process {p} of the killed run still runs")


def _running(pid):
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rsplit(") ", 1)[1][0] != "Z"
    except (FileNotFoundError, ProcessLookupError):
        return False
