"""Drivers, path conventions, writers and `enforce` on cgroup-shaped trees (real files in tmp_path,
and the in-memory writer). The real kernel is exercised in tests/integration/test_cgroup*.py."""
import os

import pytest

from contracts.reclaim import ReclaimPlan
from node_enforcer.enforce.apply import enforce
from node_enforcer.enforce.cgroups import V1Driver, V2Driver, container_id_of, detect_version, make_driver, pod_cgroup
from node_enforcer.enforce.files import DryRunFiles, HostFiles, MemoryFiles, normalise
from node_enforcer.policy.allocation import PolicySettings
from node_enforcer.policy.plan import plan
from tests.node_enforcer.conftest import make_pod

UID = "0a1b2c3d-0000-4000-8000-000000000001"


@pytest.mark.parametrize("conv,qos,path", [
    ("cgroupfs", "Guaranteed", f"kubepods/pod{UID}"),
    ("cgroupfs", "Burstable", f"kubepods/burstable/pod{UID}"),
    ("cgroupfs", "BestEffort", f"kubepods/besteffort/pod{UID}"),
    ("systemd", "Guaranteed", "kubepods.slice/kubepods-pod0a1b2c3d_0000_4000_8000_000000000001.slice"),
    ("systemd", "Burstable", "kubepods.slice/kubepods-burstable.slice/"
                             "kubepods-burstable-pod0a1b2c3d_0000_4000_8000_000000000001.slice"),
    ("systemd", "BestEffort", "kubepods.slice/kubepods-besteffort.slice/"
                              "kubepods-besteffort-pod0a1b2c3d_0000_4000_8000_000000000001.slice"),
])
def test_path_conventions(conv, qos, path):
    assert pod_cgroup(conv, qos, UID) == path


def test_container_ids_and_bad_convention():
    assert container_id_of("cri-containerd-abc123.scope") == "abc123"
    assert container_id_of("crio-ff.scope") == "ff" and container_id_of("docker-9.scope") == "9"
    assert container_id_of("abc123") == "abc123"
    with pytest.raises(ValueError, match="cgroupfs"):
        pod_cgroup("upstart", "Burstable", UID)


@pytest.mark.parametrize("path,a,b", [
    ("x/cpuset.cpus", "0-3", "0,1,2,3\n"), ("x/memory.limit_in_bytes", "-1", "9223372036854771712"),
    ("x/memory.limit_in_bytes", "100001", "98304"), ("x/cpu.max", "max", "max 100000"),
    ("x/cpu.cfs_quota_us", "-1", "-1\n"), ("x/memory.max", "4097", "4096")])
def test_normalise_equal(path, a, b):
    assert normalise(path, a) == normalise(path, b)


def test_normalise_differs():
    assert normalise("x/cpuset.cpus", "0-3") != normalise("x/cpuset.cpus", "0-2")
    assert normalise("x/cpu.max", "200000 100000") != normalise("x/cpu.max", "max 100000")


V1_FILES = {"cpuset": {"cpuset.cpus": "", "cpuset.mems": "", "cgroup.procs": ""},
            "cpu": {"cpu.shares": "1024", "cpu.cfs_quota_us": "-1", "cpu.cfs_period_us": "100000", "cpu.idle": "0"},
            "memory": {"memory.limit_in_bytes": "9223372036854771712", "memory.usage_in_bytes": "52428800"}}
V2_FILES = {"cpuset.cpus": "", "cpuset.mems": "", "cpu.weight": "100", "cpu.max": "max 100000", "cpu.idle": "0",
            "memory.max": "max", "memory.high": "max", "memory.current": "1048576", "cgroup.procs": ""}


def v1_tree(pods, conv="cgroupfs", containers=("ctr1",), controllers=("cpuset", "cpu", "memory")):
    files = {}
    for pod in pods:
        for ctl in controllers:
            d = f"/cg/{ctl}/{pod_cgroup(conv, pod.k8s_qos, pod.uid)}"
            for f, v in V1_FILES[ctl].items():
                files[f"{d}/{f}"] = v
            for c in containers:
                for f, v in V1_FILES[ctl].items():
                    files[f"{d}/{c}/{f}"] = v
    return files


def v2_tree(root, pods, conv="cgroupfs", containers=("cri-containerd-ctr1.scope",), skip=()):
    for pod in pods:
        d = os.path.join(root, pod_cgroup(conv, pod.k8s_qos, pod.uid))
        for sub in ("",) + tuple(containers):
            os.makedirs(os.path.join(d, sub), exist_ok=True)
            for f, v in V2_FILES.items():
                if f not in skip:
                    with open(os.path.join(d, sub, f), "w") as fh:
                        fh.write(v + "\n")


def _pods():
    return [make_pod("web", cpu="2", k8s_qos="Burstable"),
            make_pod("batch", "reclaimed_cores", limit_memory="3Gi", k8s_qos="BestEffort"),
            make_pod("db", "dedicated_cores", cpu="4", memory="1Gi", limit_cpu="4", limit_memory="1Gi")]


@pytest.mark.parametrize("conv", ["cgroupfs", "systemd"])
def test_v1_enforce_writes_then_nothing(two_socket, conv):
    pods = _pods()
    alloc = plan(two_socket, pods, ReclaimPlan("n1", "2026-11-30T00:00:00Z", 3600, 8000, 2 * 2**30))
    w = MemoryFiles(v1_tree(pods, conv))
    driver = V1Driver("/cg", conv)
    rep = enforce(alloc, pods, driver, w, proc_root="/proc-none")
    assert not rep.errors and not rep.missing
    batch = alloc.pod("default/batch")
    bdir = f"/cg/%s/{pod_cgroup(conv, 'BestEffort', pods[1].uid)}"
    assert normalise("cpuset.cpus", w.files[bdir % "cpuset" + "/ctr1/cpuset.cpus"]) == \
        normalise("cpuset.cpus", ",".join(map(str, sorted(batch.cpus))))
    assert w.files[bdir % "cpu" + "/cpu.cfs_quota_us"] == str(batch.cpu_quota_millis * 100)
    assert w.files[bdir % "cpu" + "/cpu.idle"] == "1"
    assert w.files[bdir % "cpu" + "/cpu.shares"] == "1024"  # an idle group takes no shares write
    assert w.files[bdir % "memory" + "/memory.limit_in_bytes"] == str(2 * 2**30)  # min(3Gi limit, 2Gi plan)
    web_quota = f"/cg/cpu/{pod_cgroup(conv, 'Burstable', pods[0].uid)}/cpu.cfs_quota_us"
    assert w.files[web_quota] == "-1"  # online pods' quota is the kubelet's business
    again = enforce(alloc, pods, driver, w, proc_root="/proc-none")
    assert again.changes == []


def test_v1_shares_without_cpu_idle(two_socket):
    pods = [make_pod("batch", "reclaimed_cores", k8s_qos="BestEffort")]
    files = {k: v for k, v in v1_tree(pods).items() if not k.endswith("cpu.idle")}
    w = MemoryFiles(files)
    enforce(plan(two_socket, pods), pods, V1Driver("/cg"), w)
    assert w.files[f"/cg/cpu/kubepods/besteffort/pod{pods[0].uid}/cpu.shares"] == "2"


def test_cpuset_widen_then_narrow_order(two_socket):
    """A pod moving from 0-3 to 2-5 is first widened to 0-5, then its containers, then narrowed."""
    pods = [make_pod("web", cpu="1", k8s_qos="Burstable")]
    files = v1_tree(pods, controllers=("cpuset",))
    d = f"/cg/cpuset/kubepods/burstable/pod{pods[0].uid}"
    files[f"{d}/cpuset.cpus"] = "0-3"
    files[f"{d}/ctr1/cpuset.cpus"] = "0-3"
    alloc = plan(two_socket, pods, settings=PolicySettings(reserved_cpus=0))
    target = alloc.pod("default/web").cpus
    w = MemoryFiles(files)
    enforce(alloc, pods, V1Driver("/cg"), w)
    cpus_writes = [(c.path.replace(d, "POD"), c.new) for c in w.changes if c.path.endswith("cpuset.cpus")]
    assert cpus_writes[0][0] == "POD/cpuset.cpus" and set(range(4)) <= _set(cpus_writes[0][1])
    assert cpus_writes[1][0] == "POD/ctr1/cpuset.cpus" and _set(cpus_writes[1][1]) == target
    assert cpus_writes[-1] == ("POD/cpuset.cpus", cpus_writes[1][1])
    # at every step the container's cpus stay within the pod's (the kernel's v1 rule)
    state = {"POD/cpuset.cpus": {0, 1, 2, 3}, "POD/ctr1/cpuset.cpus": {0, 1, 2, 3}}
    for path, value in cpus_writes:
        state[path] = _set(value)
        assert state["POD/ctr1/cpuset.cpus"] <= state["POD/cpuset.cpus"]


def _set(text):
    from node_enforcer.model.topology import parse_cpulist

    return set(parse_cpulist(text))


@pytest.mark.parametrize("conv", ["cgroupfs", "systemd"])
def test_v2_enforce_on_a_file_tree(tmp_path, two_socket, conv):
    pods = _pods()
    v2_tree(str(tmp_path), pods, conv)
    (tmp_path / "cgroup.controllers").write_text("cpuset cpu memory\n")
    driver = make_driver(str(tmp_path), conv)
    assert isinstance(driver, V2Driver) and detect_version(str(tmp_path)) == 2
    alloc = plan(two_socket, pods, ReclaimPlan("n1", "2026-11-30T00:00:00Z", 3600, 8000, 2 * 2**30))
    rep = enforce(alloc, pods, driver, HostFiles())
    assert rep.changes and not rep.errors and not rep.unsupported
    bdir = tmp_path / pod_cgroup(conv, "BestEffort", pods[1].uid)
    assert (bdir / "cpu.max").read_text() == f"{alloc.pod('default/batch').cpu_quota_millis * 100} 100000"
    assert (bdir / "memory.max").read_text() == str(2 * 2**30)
    assert (bdir / "memory.high").read_text() == str(int(2 * 2**30 * 0.9) // 4096 * 4096)
    assert (bdir / "cpu.idle").read_text() == "1" and (bdir / "cpu.weight").read_text().strip() == "100"
    ddir = tmp_path / pod_cgroup(conv, "Guaranteed", pods[2].uid)
    assert _set((ddir / "cri-containerd-ctr1.scope" / "cpuset.cpus").read_text()) == alloc.pod("default/db").cpus
    assert _set((ddir / "cpuset.mems").read_text()) == alloc.pod("default/db").mems
    assert enforce(alloc, pods, driver, HostFiles()).changes == []


def test_v2_weight_written_where_cpu_idle_is_missing(tmp_path, two_socket):
    pods = [make_pod("batch", "reclaimed_cores", k8s_qos="BestEffort")]
    v2_tree(str(tmp_path), pods, skip=("cpu.idle",))
    enforce(plan(two_socket, pods), pods, V2Driver(str(tmp_path)), HostFiles())
    assert (tmp_path / f"kubepods/besteffort/pod{pods[0].uid}/cpu.weight").read_text() == "1"


def test_v2_missing_controller_files_are_reported_not_errors(tmp_path, two_socket):
    pods = [make_pod("batch", "reclaimed_cores", limit_memory="1Gi", k8s_qos="BestEffort")]
    v2_tree(str(tmp_path), pods, skip=("memory.max", "memory.high", "cpuset.cpus", "cpuset.mems"))
    rep = enforce(plan(two_socket, pods), pods, V2Driver(str(tmp_path)), HostFiles())
    assert not rep.errors
    assert {os.path.basename(u) for u in rep.unsupported} == {"memory.max", "memory.high", "cpuset.cpus", "cpuset.mems"}
    assert any(c.path.endswith("cpu.max") for c in rep.changes)


def test_dry_run_writes_nothing_and_reports_the_diff(tmp_path, two_socket):
    pods = _pods()
    v2_tree(str(tmp_path), pods)
    before = {p: open(p).read() for p in _files(tmp_path)}
    w = DryRunFiles()
    rep = enforce(plan(two_socket, pods), pods, V2Driver(str(tmp_path)), w)
    assert rep.changes and {p: open(p).read() for p in _files(tmp_path)} == before
    # the dry run sees its own writes: a second pass over it has nothing left to do
    assert enforce(plan(two_socket, pods), pods, V2Driver(str(tmp_path)), w).changes == []
    # and a real run makes exactly the changes the dry run announced
    real = enforce(plan(two_socket, pods), pods, V2Driver(str(tmp_path)), HostFiles())
    assert [(c.path, c.new) for c in real.changes] == [(c.path, c.new) for c in rep.changes]


def _files(root):
    return sorted(os.path.join(d, f) for d, _, fs in os.walk(root) for f in fs)


def test_missing_pod_cgroup_and_write_error_are_per_pod(tmp_path, two_socket):
    pods = _pods()
    v2_tree(str(tmp_path), pods[1:])  # web has no cgroup yet
    d = tmp_path / pod_cgroup("cgroupfs", "Guaranteed", pods[2].uid)
    (d / "cpuset.cpus").unlink()
    (d / "cpuset.cpus").mkdir()  # writing it fails with EISDIR, like a kernel refusing a value
    rep = enforce(plan(two_socket, pods), pods, V2Driver(str(tmp_path)), HostFiles())
    assert rep.missing == ["default/web"]
    assert len(rep.errors) == 1 and rep.errors[0].startswith("default/db:")
    assert any("besteffort" in c.path for c in rep.changes)  # the other pod was still enforced


def test_oom_score_adj_written_for_the_pods_processes(tmp_path, two_socket):
    pods = [make_pod("batch", "reclaimed_cores", mem_enh={"oom_priority": -500}, k8s_qos="BestEffort")]
    v2_tree(str(tmp_path / "cg"), pods)
    cdir = tmp_path / "cg" / f"kubepods/besteffort/pod{pods[0].uid}/cri-containerd-ctr1.scope"
    (cdir / "cgroup.procs").write_text("4242\n4243\n")
    for pid in (4242, 4243):
        (tmp_path / "proc" / str(pid)).mkdir(parents=True)
        (tmp_path / "proc" / str(pid) / "oom_score_adj").write_text("0\n")
    enforce(plan(two_socket, pods), pods, V2Driver(str(tmp_path / "cg")), HostFiles(), proc_root=str(tmp_path / "proc"))
    assert (tmp_path / "proc/4242/oom_score_adj").read_text() == "500"
    assert (tmp_path / "proc/4243/oom_score_adj").read_text() == "500"


def test_cgroup_parent_per_controller(two_socket):
    pods = [make_pod("web", cpu="1", k8s_qos="Burstable")]
    driver = V1Driver("/cg", parent={"memory": "sandbox/x", "*": "t1"})
    assert driver.pod_dir(pods[0], "memory") == f"/cg/memory/sandbox/x/kubepods/burstable/pod{pods[0].uid}"
    assert driver.pod_dir(pods[0], "cpuset") == f"/cg/cpuset/t1/kubepods/burstable/pod{pods[0].uid}"
