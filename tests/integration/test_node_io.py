"""Disk I/O limits and the reclaimed root's memory on this machine's real cgroups.

v1: the blkio hierarchy (mounted and writable here): a reclaimed pod's `blkio.throttle.*` files get
one line per physical disk of /sys/block, a second pass writes nothing, and a lifted limit is
removed. v2: the unified mount has no `io` controller enabled here, so io.max is reported as
unsupported (never an error). The reclaimed root: `kubepods/besteffort` holding only batch pods gets
memory.limit_in_bytes and the soft limit at 95% of it (v1 has no memory.high).
"""
import os

import pytest

from contracts.reclaim import ReclaimPlan
from node_enforcer.collect.devices import read_block_devices
from node_enforcer.collect.topology import read_topology
from node_enforcer.enforce.apply import EnforceReport, enforce
from node_enforcer.enforce.files import HostFiles
from node_enforcer.enforce.isolation import enforce_isolation
from node_enforcer.policy.allocation import PolicySettings
from node_enforcer.policy.io import IoSettings
from node_enforcer.policy.isolation import IsolationSettings, plan_isolation
from node_enforcer.policy.plan import plan
from testsupport.realcgroups import V2_ROOT, CgroupsNotWritable, RealTree, leftovers
from tests.node_enforcer.conftest import make_pod

pytestmark = pytest.mark.integration
MiB = 2**20
POLICY = PolicySettings(reserved_cpus=0, reclaim_floor_cpus=1)


def _tree(request, version, convention="cgroupfs", controllers=("cpuset", "cpu", "memory", "blkio")):
    try:
        t = RealTree(version, convention, controllers=controllers) if version == 1 else RealTree(2, convention)
    except CgroupsNotWritable as exc:
        pytest.fail(str(exc))
    request.addfinalizer(lambda: (t.close(), _clean(t.name)))
    return t


def _clean(name):
    assert leftovers([name]) == [], f"cgroup sub-tree {name} was not removed"


def _read(path):
    with open(path) as fh:
        return fh.read()


def _isolate(pods, devices, driver, io=None, psi=None, reclaim=None):
    topo = read_topology("/sys")
    alloc = plan(topo, pods, reclaim, POLICY)
    iso = plan_isolation(alloc, pods, reclaim, devices, psi, IsolationSettings(io=io or IoSettings()), POLICY)
    report = EnforceReport()
    enforce(alloc, pods, driver, HostFiles())
    enforce_isolation(iso, pods, driver, HostFiles(), report)
    return iso, report


def test_v1_blkio_limits_on_the_real_disks_applied_once_then_lifted(request):
    tree = _tree(request, 1)
    devices, problems = read_block_devices("/sys")
    assert devices and all(not d.virtual for d in devices) and problems == []  # loop*/zram* are skipped
    batch = make_pod("batch", "reclaimed_cores", k8s_qos="BestEffort")
    tree.add_pod(batch)
    driver = tree.driver()
    io = IoSettings(enabled=True, read_bps=20 * MiB, write_iops=300)
    _, rep = _isolate([batch], devices, driver, io)
    assert not rep.errors and rep.changes
    d = driver.pod_dir(batch, "blkio")
    for dev in devices:
        assert f"{dev.key} {20 * MiB}" in _read(f"{d}/blkio.throttle.read_bps_device")
        assert f"{dev.key} 300" in _read(f"{d}/blkio.throttle.write_iops_device")
    assert _read(f"{d}/blkio.throttle.write_bps_device").strip() == ""  # no limit asked: none written
    # second pass: nothing differs, nothing written
    _, again = _isolate([batch], devices, driver, io)
    assert again.changes == [] and not again.errors
    # the limit lifted from the settings: the kernel's line is removed (a write of 0)
    _, lifted = _isolate([batch], devices, driver, IoSettings(enabled=True, write_iops=300))
    assert [c.path.rsplit("/", 1)[1] for c in lifted.changes] == ["blkio.throttle.read_bps_device"] * len(devices)
    assert _read(f"{d}/blkio.throttle.read_bps_device").strip() == ""


def test_v1_blkio_limits_tighten_under_online_io_pressure(request):
    tree = _tree(request, 1)
    devices, _ = read_block_devices("/sys")
    batch = make_pod("batch", "reclaimed_cores", k8s_qos="BestEffort")
    tree.add_pod(batch)
    io = IoSettings(enabled=True, read_bps=40 * MiB, psi_low=10, psi_high=40, min_factor=0.25)
    iso, rep = _isolate([batch], devices, tree.driver(), io, psi=55.0)
    assert iso.io[0].factor == 0.25 and not rep.errors
    path = f"{tree.driver().pod_dir(batch, 'blkio')}/blkio.throttle.read_bps_device"
    assert f"{devices[0].key} {10 * MiB}" in _read(path)
    # write_bps had no static limit: under pressure it gets the fallback (10 MiB/s) scaled the same way
    assert f"{devices[0].key} {int(10 * MiB * 0.25)}" in _read(path.replace("read_bps", "write_bps"))


def test_v2_io_max_is_reported_unsupported_where_the_io_controller_is_off(request):
    if not os.path.exists(os.path.join(V2_ROOT, "cgroup.controllers")):
        pytest.fail(f"no cgroup v2 mount at {V2_ROOT}")
    tree = _tree(request, 2, "systemd")
    devices, _ = read_block_devices("/sys")
    batch = make_pod("batch", "reclaimed_cores", k8s_qos="BestEffort")
    tree.add_pod(batch)
    _, rep = _isolate([batch], devices, tree.driver(), IoSettings(enabled=True, read_bps=MiB))
    offered = _read(os.path.join(V2_ROOT, "cgroup.controllers")).split()
    assert not rep.errors
    if "io" not in offered:
        assert f"{tree.driver().pod_dir(batch)}/io.max" in rep.unsupported and rep.changes == []
    else:  # a machine with io on the unified hierarchy: the limit is written
        assert any(c.path.endswith("io.max") for c in rep.changes)


def test_v1_reclaimed_root_memory_cap_and_soft_limit(request):
    tree = _tree(request, 1, controllers=("cpuset", "cpu", "memory"))
    b1 = make_pod("b1", "reclaimed_cores", k8s_qos="BestEffort")
    b2 = make_pod("b2", "reclaimed_cores", k8s_qos="BestEffort")
    web = make_pod("web", cpu="100m", k8s_qos="Burstable")
    for p in (b1, b2, web):
        tree.add_pod(p)
    reclaim = ReclaimPlan("n1", "2026-12-01T00:00:00Z", 3600, 1000, 512 * MiB, 100)
    iso, rep = _isolate([b1, b2, web], [], tree.driver(), reclaim=reclaim)
    assert iso.root is not None and not rep.errors
    root = tree.driver().qos_dir("BestEffort", "memory")
    assert int(_read(f"{root}/memory.limit_in_bytes")) == 512 * MiB
    assert int(_read(f"{root}/memory.soft_limit_in_bytes")) == int(512 * MiB * 0.95) // 4096 * 4096
    assert int(_read(f"{tree.driver().qos_dir('Burstable', 'memory')}/memory.limit_in_bytes")) > 2**60  # online untouched
    _, again = _isolate([b1, b2, web], [], tree.driver(), reclaim=reclaim)
    assert again.changes == []
