"""Batch egress capped by cgroup on a real veth pair with HTB, on this machine's kernel.

The test builds its own network namespace `tw-test-<pid>` and a veth pair: the host end (in the
root namespace: `net_prio.ifpriomap` names devices of the root namespace only) is the "uplink" the
agent shapes; the peer end, in the namespace, runs the receiver. Classifier: this kernel has no
`cls_cgroup` (CONFIG_NET_CLS_CGROUP is off) and net_cls/net_prio are not mounted, so the test mounts
the v1 `net_prio` hierarchy on a temporary folder (unmounted in teardown) and the agent uses the
`priority` classifier: the reclaimed pod's `net_prio.ifpriomap` maps the uplink to 0x10030 and HTB
takes such packets straight into class 1:30. A sender moved into the pod's cgroup pushes 2 MB over
loopback-only addresses (198.18.0.0/15, the benchmarking range); the receiver's rate must be held to
the class's cap within a generous tolerance. A second pass changes nothing (tc and cgroup files).
"""
import os
import subprocess
import sys
import time

import pytest

from node_enforcer.collect.topology import read_topology
from node_enforcer.enforce.apply import EnforceReport, enforce
from node_enforcer.enforce.files import HostFiles
from node_enforcer.enforce.isolation import enforce_isolation
from node_enforcer.enforce.tc import Tc
from node_enforcer.policy.allocation import PolicySettings
from node_enforcer.policy.isolation import IsolationSettings, plan_isolation
from node_enforcer.policy.network import NetworkSettings
from node_enforcer.policy.plan import plan
from testsupport.realcgroups import V1_ROOT, CgroupsNotWritable, RealTree
from tests.node_enforcer.conftest import make_pod

pytestmark = pytest.mark.integration
CAP = 8_000_000  # bit/s: 2 MB take ~2 s at the cap
HOST_IP, PEER_IP = "198.18.77.1", "198.18.77.2"

RECEIVER = """
import socket, sys, time
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind((sys.argv[1], int(sys.argv[2]))); s.listen(1); print("ready", flush=True)
c, _ = s.accept(); n = 0; t0 = None
while True:
    d = c.recv(65536)
    if not d: break
    t0 = t0 or time.monotonic(); n += len(d)
print(n, n * 8 / (time.monotonic() - t0), flush=True)
"""
SENDER = """
import os, socket, sys
with open(sys.argv[1], "w") as fh: fh.write(str(os.getpid()))  # into the pod's net_prio cgroup first
s = socket.create_connection((sys.argv[2], int(sys.argv[3])), timeout=20)
buf = b"x" * 65536; n = 0
while n < 2_000_000: s.sendall(buf); n += len(buf)
s.close()
"""


def _ip(*args):
    subprocess.run(["ip", *args], check=True, capture_output=True, timeout=10)


@pytest.fixture
def link(request):
    tag = str(os.getpid())[-6:]
    ns, host, peer = f"tw-test-{os.getpid()}", f"twh{tag}", f"twp{tag}"
    _ip("netns", "add", ns)
    request.addfinalizer(lambda: subprocess.run(["ip", "netns", "del", ns], capture_output=True, timeout=10))
    _ip("link", "add", host, "type", "veth", "peer", "name", peer)
    request.addfinalizer(lambda: subprocess.run(["ip", "link", "del", host], capture_output=True, timeout=10))
    _ip("link", "set", peer, "netns", ns)
    _ip("addr", "add", f"{HOST_IP}/30", "dev", host)
    _ip("link", "set", host, "up")
    _ip("-n", ns, "addr", "add", f"{PEER_IP}/30", "dev", peer)
    _ip("-n", ns, "link", "set", peer, "up")
    return ns, host


def _net_prio_mount():
    """Where the v1 net_prio hierarchy is mounted already, or None."""
    with open("/proc/self/mounts") as fh:
        for line in fh:
            _, path, fstype, options = line.split()[:4]
            if fstype == "cgroup" and "net_prio" in options.split(","):
                return path
    return None


@pytest.fixture
def cgroot(tmp_path, request):
    """A v1 root folder: the machine's cpuset/cpu/memory hierarchies plus our own net_prio mount."""
    root = tmp_path / "cg"
    root.mkdir()
    for ctl in ("cpuset", "cpu", "memory"):
        (root / ctl).symlink_to(os.path.join(V1_ROOT, ctl))
    existing = _net_prio_mount()
    if existing:  # e.g. systemd's hybrid /sys/fs/cgroup/net_cls,net_prio: use it, mount nothing
        (root / "net_prio").symlink_to(existing)
        return str(root)
    (root / "net_prio").mkdir()
    subprocess.run(["mount", "-t", "cgroup", "-o", "net_prio", "tidewise-test", str(root / "net_prio")],
                   check=True, capture_output=True, timeout=10)
    request.addfinalizer(lambda: subprocess.run(["umount", str(root / "net_prio")], capture_output=True, timeout=10))
    return str(root)


def test_batch_egress_is_held_to_its_htb_cap_and_a_second_pass_changes_nothing(link, cgroot, request):
    ns, dev = link
    try:
        tree = RealTree(1, "cgroupfs", controllers=("cpuset", "cpu", "memory", "net_prio"), v1_root=cgroot)
    except CgroupsNotWritable as exc:
        pytest.fail(str(exc))
    request.addfinalizer(tree.close)  # runs before the unmount (finalizers run last-in first-out)
    batch = make_pod("batch", "reclaimed_cores", k8s_qos="BestEffort")
    tree.add_pod(batch)
    driver = tree.driver()
    settings = IsolationSettings(network=NetworkSettings(enabled=True, device=dev, link_bit_rate=1_000_000_000,
                                                         reclaimed_bit_rate=CAP), root_memory=False)

    def one_pass():
        alloc = plan(read_topology("/sys"), [batch], None, PolicySettings(reserved_cpus=0, reclaim_floor_cpus=1))
        iso = plan_isolation(alloc, [batch], None, [], None, settings)
        report = EnforceReport()
        enforce(alloc, [batch], driver, HostFiles())
        enforce_isolation(iso, [batch], driver, HostFiles(), report)
        changes, problems = Tc().ensure(iso.net)
        return report, changes, problems

    report, tc_changes, problems = one_pass()
    assert not report.errors and not problems and report.unsupported == []
    assert [c.new.split()[0] for c in tc_changes] == ["qdisc", "class", "class", "class"]
    pod_cg = driver.pod_dir(batch, "net_prio")
    assert f"{dev} {0x10030}" in open(os.path.join(pod_cg, "net_prio.ifpriomap")).read()

    again, tc_again, _ = one_pass()
    assert again.changes == [] and tc_again == []

    receiver = subprocess.Popen(["ip", "netns", "exec", ns, sys.executable, "-c", RECEIVER, PEER_IP, "5201"],
                                stdout=subprocess.PIPE, text=True)
    request.addfinalizer(receiver.kill)
    assert receiver.stdout.readline().strip() == "ready"
    container = os.path.join(pod_cg, batch.containers[0].id)
    subprocess.run([sys.executable, "-c", SENDER, os.path.join(container, "cgroup.procs"), PEER_IP, "5201"],
                   check=True, timeout=30)
    received, rate = receiver.stdout.readline().split()
    assert int(received) >= 2_000_000
    assert float(rate) <= CAP * 1.3, f"batch egress {float(rate):.0f} bit/s exceeds the {CAP} bit/s cap"
    assert float(rate) >= CAP * 0.3  # the class did carry it (not dropped, not the default class starved)
    stats = subprocess.run(["tc", "-s", "class", "show", "dev", dev, "classid", "1:30"], capture_output=True,
                           text=True, timeout=10).stdout
    assert int(stats.split("Sent ")[1].split()[0]) >= 2_000_000  # the bytes went through class 1:30
