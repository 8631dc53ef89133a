"""Disk I/O, network and reclaimed-root isolation: the pure policy, the device reader, the keyed
cgroup files on an in-memory tree, tc through a recording runner, and the command's bad input."""
import json
import os

import pytest

from contracts.reclaim import ReclaimPlan
from node_enforcer.collect.devices import read_block_devices
from node_enforcer.enforce.apply import EnforceReport
from node_enforcer.enforce.cgroups import V1Driver, V2Driver
from node_enforcer.enforce.files import MemoryFiles
from node_enforcer.enforce.isolation import enforce_isolation
from node_enforcer.enforce.tc import Tc, parse_classes
from node_enforcer.model.devices import BlockDevice
from node_enforcer.model.pressure import Pressure
from node_enforcer.policy.eviction import EvictionSettings, choose_victims
from node_enforcer.policy.io import IO_ANNOTATION, IoSettings, plan_io, pressure_factor
from node_enforcer.policy.isolation import IsolationSettings, RootMemory, plan_isolation
from node_enforcer.policy.network import NetworkSettings, plan_network
from node_enforcer.policy.plan import plan
from tidewise.cli import main
from tests.node_enforcer.conftest import MIXED_PODS, TWO_SOCKET, make_pod

MiB = 2**20
VDA, SDB = BlockDevice("vda", 254, 0), BlockDevice("sdb", 8, 16)


def test_static_limits_annotation_override_and_a_bad_annotation_reported():
    s = IoSettings(enabled=True, read_bps=20 * MiB)
    out = plan_io([("u1", "ns/a", {}), ("u2", "ns/b", {IO_ANNOTATION: '{"read_bps": "5Mi", "write_iops": 50}'}),
                   ("u3", "ns/c", {IO_ANNOTATION: '{"read_bps": -1}'})], [VDA, SDB], None, s)
    a, b, c = out
    assert [lim.device for lim in a.limits] == ["254:0", "8:16"] and a.limits[0].read_bps == 20 * MiB
    assert a.limits[0].write_bps is None and a.weight == 10 and a.problem is None
    assert b.limits[0].read_bps == 5 * MiB and b.limits[0].write_iops == 50
    assert c.limits[0].read_bps == 20 * MiB and "read_bps=-1" in c.problem  # settings apply, problem named
    assert plan_io([("u1", "ns/a", {})], [VDA], None, IoSettings()) == []  # off by default


def test_io_pressure_tightens_limits_linearly():
    s = IoSettings(enabled=True, read_bps=40 * MiB, psi_low=10, psi_high=40, min_factor=0.25)
    assert pressure_factor(None, s) == pressure_factor(5, s) == 1.0
    assert pressure_factor(25, s) == pytest.approx(0.625) and pressure_factor(90, s) == 0.25
    calm, hot = (plan_io([("u", "ns/a", {})], [VDA], psi, s)[0].limits[0] for psi in (2.0, 40.0))
    assert calm.read_bps == 40 * MiB and calm.write_bps is None  # an idle disk: batch unthrottled beyond the static
    assert hot.read_bps == 10 * MiB and hot.write_bps == int(s.pressure_bps * 0.25)


def test_block_devices_skip_partitions_and_virtual_ones_and_report_missing_names(tmp_path):
    for name, dev, where in (("vda", "254:0", "devices/pci0/virtio1/block/vda"),
                             ("loop0", "7:0", "devices/virtual/block/loop0")):
        real = tmp_path / where
        real.mkdir(parents=True)
        (real / "dev").write_text(dev + "\n")
        (tmp_path / "block").mkdir(exist_ok=True)
        os.symlink(real, tmp_path / "block" / name)
    (tmp_path / "devices/pci0/virtio1/block/vda/vda1").mkdir()  # a partition lives below its disk
    devices, problems = read_block_devices(str(tmp_path))
    assert devices == [BlockDevice("vda", 254, 0)] and problems == []
    devices, problems = read_block_devices(str(tmp_path), include=("loop0", "nvme9n1"))
    assert [d.name for d in devices] == ["loop0", "vda"] and devices[0].virtual
    assert problems == ["I/O device 'nvme9n1' named in the settings is not in " f"{tmp_path}/block; ignored"]
    assert read_block_devices(str(tmp_path / "nope"))[0] == []


def _tree_v2(pod):
    d = f"/cg/kubepods/besteffort/pod{pod.uid}"
    return MemoryFiles({f"{d}/io.max": "", f"{d}/io.weight": "default 100\n", f"{d}/cgroup.procs": "",
                        "/cg/kubepods/besteffort/memory.max": "max", "/cg/kubepods/besteffort/memory.high": "max"})


def test_v2_io_max_and_weight_written_once_keyed_by_device(two_socket):
    batch = make_pod("batch", "reclaimed_cores", k8s_qos="BestEffort")
    files, driver = _tree_v2(batch), V2Driver("/cg")
    s = IsolationSettings(io=IoSettings(enabled=True, write_bps=MiB))
    reclaim = ReclaimPlan("n1", "2026-12-01T00:00:00Z", 3600, 1000, 1024 * MiB, 0)
    iso = plan_isolation(plan(two_socket, [batch], reclaim), [batch], reclaim, [VDA, SDB], None, s)
    rep = EnforceReport()
    enforce_isolation(iso, [batch], driver, files, rep)
    d = driver.pod_dir(batch)
    assert files.files[f"{d}/io.max"] == ("254:0 rbps=max wbps=1048576 riops=max wiops=max\n"
                                          "8:16 rbps=max wbps=1048576 riops=max wiops=max\n")
    assert "default 10" in files.files[f"{d}/io.weight"]
    assert files.files["/cg/kubepods/besteffort/memory.high"] == str(int(1024 * MiB * 0.95) // 4096 * 4096)
    again = EnforceReport()
    enforce_isolation(iso, [batch], driver, files, again)
    assert again.changes == [] and again.errors == []


def test_reclaimed_root_lifted_when_online_pods_share_the_qos_cgroup(two_socket):
    batch = make_pod("batch", "reclaimed_cores", k8s_qos="BestEffort")
    batch2 = make_pod("batch2", "reclaimed_cores", k8s_qos="BestEffort")
    idle_web = make_pod("web", k8s_qos="BestEffort")  # a shared_cores pod without requests
    pods = [batch, batch2, idle_web]
    reclaim = ReclaimPlan("n1", "2026-12-01T00:00:00Z", 3600, 1000, 1024 * MiB, 0)
    alloc = plan(two_socket, pods, reclaim)
    iso = plan_isolation(alloc, pods, reclaim, [], None, IsolationSettings())
    # no cap on the cgroup the online pod shares (a stale one is lifted); the pods' own caps hold batch
    assert iso.root == RootMemory("BestEffort", None, None)
    assert [alloc.pod(p.key).memory_max_bytes for p in (batch, batch2)] == [512 * MiB, 512 * MiB]
    assert "split among 2 reclaimed pods" in alloc.batch_memory.note and "online pod(s) (default/web" in \
        alloc.batch_memory.note
    for driver, cap, high, unlimited in ((V2Driver("/cg"), "memory.max", "memory.high", "max"),
                                         (V1Driver("/cg"), "memory.limit_in_bytes", "memory.soft_limit_in_bytes", "-1")):
        root = driver.qos_dir("BestEffort", "memory")
        files = MemoryFiles({f"{root}/{cap}": str(1024 * MiB), f"{root}/{high}": str(900 * MiB)})
        rep = EnforceReport()
        enforce_isolation(iso, pods, driver, files, rep)
        assert files.files[f"{root}/{cap}"] == unlimited and files.files[f"{root}/{high}"] == unlimited
        # ... but not while a pod of that cgroup failed to take its own cap
        files = MemoryFiles({f"{root}/{cap}": str(1024 * MiB), f"{root}/{high}": str(900 * MiB)})
        enforce_isolation(iso, pods, driver, files, EnforceReport(failed=["default/batch2"]))
        assert files.files[f"{root}/{cap}"] == str(1024 * MiB)


def test_v1_net_prio_for_pod_and_containers_and_v2_reported_unsupported(two_socket):
    batch = make_pod("batch", "reclaimed_cores", k8s_qos="BestEffort", containers=2)
    d = f"/cg/net_prio/kubepods/besteffort/pod{batch.uid}"
    files = MemoryFiles({f"{d}/net_prio.ifpriomap": "lo 0\neth0 0\n",
                         **{f"{d}/{c.id}/net_prio.ifpriomap": "lo 0\neth0 0\n" for c in batch.containers}})
    iso = plan_isolation(plan(two_socket, [batch]), [batch], None, [], None,
                         IsolationSettings(network=NetworkSettings(enabled=True, device="eth0"), root_memory=False))
    rep = EnforceReport()
    enforce_isolation(iso, [batch], V1Driver("/cg"), files, rep)
    assert len(rep.changes) == 3 and all(f.endswith("eth0 65584\nlo 0\n") or "eth0 65584" in f
                                         for p, f in files.files.items() if "ifpriomap" in p)
    v2 = EnforceReport()
    enforce_isolation(iso, [batch], V2Driver("/cg"), MemoryFiles(), v2)
    assert "cgroup v2 has no net_prio" in v2.unsupported[0] and v2.changes == []


class FakeTc:
    """Answers `tc` reads from a state it updates on writes: a recording stand-in for the kernel."""

    def __init__(self, qdisc="noqueue"):
        self.calls, self.root, self.classes = [], qdisc, {}

    def __call__(self, argv):
        self.calls.append(argv)
        if argv[1:3] == ["-j", "qdisc"]:
            return json.dumps([{"kind": self.root, "handle": "1:" if self.root == "htb" else "0:", "root": True,
                                "options": {"default": "0x10"}}])
        if argv[1:3] == ["class", "show"]:
            return "".join(f"class htb {cid} {'root' if p == '1:' else 'parent ' + p} "
                           f"{'' if prio is None else f'prio {prio} '}rate {r}bit ceil {c}bit burst 1600b\n"
                           for cid, (p, r, c, prio) in self.classes.items())
        if argv[1:3] == ["-j", "filter"]:
            return json.dumps([{"kind": "cgroup"}] if getattr(self, "cgroup_filter", False) else [])
        if argv[1:3] == ["filter", "add"]:
            self.cgroup_filter = True
        if argv[1:3] == ["qdisc", "replace"]:
            self.root = "htb"
        if argv[1:3] == ["class", "replace"]:
            a = argv
            prio = int(a[a.index("prio") + 1]) if "prio" in a else None
            self.classes[a[a.index("classid") + 1]] = (a[a.index("parent") + 1], int(a[a.index("rate") + 1][:-3]),
                                                     int(a[a.index("ceil") + 1][:-3]), prio)
        return ""


def test_tc_builds_the_htb_tree_once_then_runs_nothing():
    net = plan_network(["u1"], NetworkSettings(enabled=True, device="eth0", reclaimed_bit_rate=2_000_000_000))
    kernel = FakeTc()
    first, problems = Tc(run=kernel).ensure(net)
    assert problems == [] and [c.new for c in first] == [
        "qdisc replace dev eth0 root handle 1: htb default 10",
        "class replace dev eth0 parent 1: classid 1:1 htb rate 10000000000bit ceil 10000000000bit",
        "class replace dev eth0 parent 1:1 classid 1:10 htb rate 8000000000bit ceil 10000000000bit prio 0",
        "class replace dev eth0 parent 1:1 classid 1:30 htb rate 2000000000bit ceil 2000000000bit prio 7"]
    writes = len(kernel.calls)
    assert Tc(run=kernel).ensure(net) == ([], []) and all(c[1] in ("-j", "class") and "replace" not in c
                                                        for c in kernel.calls[writes:])
    dry = Tc(run=FakeTc(), dry_run=True)
    assert len(dry.ensure(net)[0]) == 4 and all(c[1] == "-j" for c in dry.run.calls)  # read only


def test_tc_rereads_the_tree_every_nth_pass_and_repairs_drift():
    net = plan_network(["u1"], NetworkSettings(enabled=True, device="eth0"))
    kernel = FakeTc()
    tc = Tc(run=kernel, check_every=3)
    assert len(tc.ensure(net)[0]) == 4
    reads = len(kernel.calls)
    assert tc.ensure(net) == ([], []) and tc.ensure(net) == ([], []) and len(kernel.calls) == reads  # not read
    kernel.root = "noqueue"  # someone replaced the qdisc: found on the 3rd pass after the last read
    assert [c.new.split()[0] for c in tc.ensure(net)[0]] == ["qdisc", "class", "class", "class"]
    other = plan_network(["u1", "u2"], NetworkSettings(enabled=True, device="eth0", reclaimed_bit_rate=5 * 10**8))
    assert [c.new.split()[7] for c in tc.ensure(other)[0]] == ["1:10", "1:30"]  # a new plan: read at once


def test_tc_classid_mode_adds_the_cgroup_filter_once():
    net = plan_network(["u1"], NetworkSettings(enabled=True, device="eth0", classifier="classid"))
    kernel = FakeTc()
    first, _ = Tc(run=kernel).ensure(net)
    assert first[-1].new == "filter add dev eth0 parent 1: protocol all prio 10 cgroup"
    assert Tc(run=kernel).ensure(net) == ([], [])


def test_tc_class_text_is_parsed_with_si_rates():
    got = parse_classes("class htb 1:30 parent 1:1 prio 7 rate 8Mbit ceil 8Mbit burst 1600b cburst 1600b\n"
                        "class htb 1:1 root rate 1Gbit ceil 1Gbit burst 1375b cburst 1375b\n")
    assert got["1:30"] == {"parent": "1:1", "prio": 7, "rate": 8_000_000, "ceil": 8_000_000}
    assert got["1:1"]["parent"] == "1:" and got["1:1"]["rate"] == 10**9


def test_memory_psi_alone_evicts_batch_only(two_socket):
    web = make_pod("web", cpu="1")
    psi = Pressure(64 << 30, 32 << 30, 55.0)
    assert choose_victims(psi, [web], plan(two_socket, [web]), {web.uid: 1 << 30}, EvictionSettings()) == []
    batch = make_pod("batch", "reclaimed_cores")
    got = choose_victims(psi, [web, batch], plan(two_socket, [web, batch]), {}, EvictionSettings())
    assert [p.name for p, _ in got] == ["batch"]


@pytest.mark.parametrize("flags,message", [
    (["--io-limits", "--io-read-bps", "fast"], "--io-read-bps 'fast': give a positive quantity like 50Mi"),
    (["--net-device", "eth0", "--net-reclaimed-rate", "20Gbit"], "reclaimed_bit_rate 20000000000 must be below"),
    (["--net-device", "eth0", "--net-link-rate", "lots"], "--net-link-rate 'lots': give a positive rate"),
])
def test_bad_isolation_flags_exit_2_with_one_line(flags, message, capsys, tmp_path):
    rc = main(["enforce", "--once", "--dry-run", "--node", "fixture-node", "--pods-from", "file", "--pods", MIXED_PODS,
               "--sysfs-root", TWO_SOCKET, "--cgroup-root", os.path.join(TWO_SOCKET, "fs/cgroup"), "--no-eviction",
               *flags])
    err = capsys.readouterr().err.strip()
    assert rc == 2 and message in err and len(err.splitlines()) == 1 and "Traceback" not in err


def _fixture_copy(tmp_path):
    """The 2-socket fixture's sysfs and cgroup v2 tree, plus one disk and the io files of the batch pods."""
    import shutil

    sysfs = tmp_path / "sys"
    shutil.copytree(os.path.join(TWO_SOCKET, "devices"), sysfs / "devices")
    disk = sysfs / "devices/pci0/block/sda"
    disk.mkdir(parents=True)
    (disk / "dev").write_text("8:0\n")
    (sysfs / "block").mkdir()
    os.symlink(disk, sysfs / "block/sda")
    cg = tmp_path / "cgroup"
    shutil.copytree(os.path.join(TWO_SOCKET, "fs", "cgroup"), cg)
    for pod in (cg / "kubepods/besteffort").glob("pod*"):
        (pod / "io.max").write_text("")
        (pod / "io.weight").write_text("default 100\n")
    return sysfs, cg


def _enforce(sysfs, cg, tmp_path, *extra):
    return main([*extra, "enforce", "--once", "--node", "fixture-node", "--pods-from", "file", "--pods", MIXED_PODS,
                 "--sysfs-root", str(sysfs), "--cgroup-root", str(cg), "--checkpoint", str(tmp_path / "ck.json"),
                 "--no-eviction"])


def test_io_limits_from_the_config_file_written_once_by_the_command(tmp_path, capsys):
    sysfs, cg = _fixture_copy(tmp_path)
    cfg = tmp_path / "tw.yaml"
    quiet = tmp_path / "io.pressure"  # not this machine's /proc/pressure/io: a busy host tightened the limits
    quiet.write_text("some avg10=0.00 avg60=0.00 avg300=0.00 total=0\n")
    cfg.write_text(f"enforcer:\n  io: {{enabled: true, read_bps: 1048576, psi_path: {quiet}}}\n")
    assert _enforce(sysfs, cg, tmp_path, "--config", str(cfg)) == 0
    out = capsys.readouterr().out
    assert "disk I/O: 2 reclaimed pod(s)" in out
    for pod in (cg / "kubepods/besteffort").glob("pod*"):
        assert (pod / "io.max").read_text().strip() == "8:0 rbps=1048576 wbps=max riops=max wiops=max"
        assert (pod / "io.weight").read_text().strip() == "default 10"
    assert _enforce(sysfs, cg, tmp_path, "--config", str(cfg)) == 0
    assert "wrote 0 value(s) (nothing differs)" in capsys.readouterr().out


@pytest.mark.parametrize("section,message", [
    ("io: 5", "'enforcer': io must be a mapping of keys, not int"),
    ("io: {read_bsp: 1}", "unknown key(s) ['read_bsp']"),
    ("io: {enabled: true, weight: 0}", "enforcer.io.weight 0: give an integer in 1..10000"),
    ("network: {enabled: true, device: eth0, classifier: magic}", "enforcer.network.classifier 'magic'"),
    ("io: {enabled: true, psi_low: ten}", "enforcer.io.psi_low 'ten': give a number"),
    ("io: {devices: sda}", "enforcer.io.devices 'sda': give a list of device names"),
    ("reclaimed_root_memory_high_ratio: 1.5", "reclaimed_root_memory_high_ratio 1.5: give a fraction in (0, 1]"),
])
def test_bad_isolation_settings_exit_2_with_one_line(section, message, tmp_path, capsys):
    sysfs, cg = _fixture_copy(tmp_path)
    cfg = tmp_path / "tw.yaml"
    cfg.write_text(f"enforcer:\n  {section}\n")
    assert main(["--config", str(cfg), *["enforce", "--once", "--dry-run", "--node", "fixture-node", "--pods-from",
                 "file", "--pods", MIXED_PODS, "--sysfs-root", str(sysfs), "--cgroup-root", str(cg),
                 "--no-eviction"]]) == 2
    err = capsys.readouterr().err.strip()
    assert message in err and len(err.splitlines()) == 1


def test_agent_runs_isolation_and_report_steps_and_a_tc_failure_is_reported_not_raised(two_socket):
    from node_enforcer.agent import Agent
    from node_enforcer.enforce.cnr import CnrPublisher
    from node_enforcer.enforce.tc import TcError
    from node_enforcer.settings import EnforcerSettings

    class Api:
        def __init__(self):
            self.status = None

        def get_cnr(self, name):
            return None if self.status is None else {"status": self.status}

        def create_cnr(self, name):
            pass

        def patch_cnr_status(self, name, status):
            self.status = status

    def broken(argv):
        raise TcError("tc: Operation not permitted")

    batch = make_pod("batch", "reclaimed_cores", k8s_qos="BestEffort")
    api = Api()
    s = EnforcerSettings(node="n1", checkpoint="", network=NetworkSettings(enabled=True, device="eth0"))
    agent = Agent(s, two_socket, lambda: [batch], V2Driver("/cg"), _tree_v2(batch), tc=Tc(run=broken),
                  cnr=CnrPublisher(api, "n1"))
    res = agent.reconcile_once()
    assert list(res.timings) == ["pods", "reclaim", "restore", "policy", "enforce", "isolate", "report"]
    assert res.error is None and res.topology_report == "created" and api.status["topologyZone"]
    assert any("egress not shaped" in u for u in res.report.unsupported)  # the device read failed: reported
    assert agent.reconcile_once().topology_report == "unchanged"


def test_v1_net_cls_classid_for_pod_and_containers(two_socket):
    batch = make_pod("batch", "reclaimed_cores", k8s_qos="BestEffort")
    d = f"/cg/net_cls/kubepods/besteffort/pod{batch.uid}"
    files = MemoryFiles({f"{d}/net_cls.classid": "0", f"{d}/{batch.containers[0].id}/net_cls.classid": "0"})
    iso = plan_isolation(plan(two_socket, [batch]), [batch], None, [], None, IsolationSettings(
        network=NetworkSettings(enabled=True, device="eth0", classifier="classid"), root_memory=False))
    rep = EnforceReport()
    enforce_isolation(iso, [batch], V1Driver("/cg"), files, rep)
    assert sorted(c.path for c in rep.changes) == sorted(files.files) and set(files.files.values()) == {"65584"}
    again = EnforceReport()
    enforce_isolation(iso, [batch], V1Driver("/cg"), files, again)
    assert again.changes == []


def test_a_malformed_io_annotation_is_logged_once_and_never_stops_the_agent(two_socket, caplog, tmp_path):
    from node_enforcer.agent import Agent
    from node_enforcer.settings import EnforcerSettings

    batch = make_pod("batch", "reclaimed_cores", k8s_qos="BestEffort")
    batch = type(batch)(**{**batch.__dict__, "annotations": {**batch.annotations, IO_ANNOTATION: "{oops"}})
    quiet = tmp_path / "io.pressure"  # not this machine's /proc/pressure/io: a busy host tightened the limit
    quiet.write_text("some avg10=0.00 avg60=0.00 avg300=0.00 total=0\n")
    s = EnforcerSettings(node="n1", checkpoint="", io=IoSettings(enabled=True, read_bps=MiB, psi_path=str(quiet)))
    agent = Agent(s, two_socket, lambda: [batch], V2Driver("/cg"), _tree_v2(batch), devices=[VDA])
    first, second = agent.reconcile_once(), agent.reconcile_once()
    assert first.error is None and first.isolation.io[0].problem.startswith(f"{IO_ANNOTATION} is not JSON")
    assert first.isolation.io[0].limits[0].read_bps == MiB  # the settings' limit still applies
    assert second.report.changes == []
    assert sum("is not JSON" in r.message for r in caplog.records) == 1
