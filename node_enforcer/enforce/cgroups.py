"""cgroup drivers: where a pod's cgroups live and which files carry an allocation.

Path conventions (the kubelet's `--cgroup-driver`):

- cgroupfs: `kubepods/pod<uid>` (Guaranteed), `kubepods/burstable/pod<uid>`,
  `kubepods/besteffort/pod<uid>`; containers are `<container id>` sub-directories.
- systemd: `kubepods.slice/kubepods-pod<uid_>.slice`,
  `kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod<uid_>.slice` (dashes in the uid
  become underscores); containers are `cri-containerd-<id>.scope`, `crio-<id>.scope`, `docker-<id>.scope`.

Drivers:

- `V1Driver`: one hierarchy per controller (`<root>/<controller>/<parent>/...`): `cpuset.cpus`,
  `cpuset.mems`; `cpu.shares`, `cpu.cfs_quota_us`, `cpu.idle` (where the kernel has it);
  `memory.limit_in_bytes`.
- `V2Driver`: one unified hierarchy (`<root>/<parent>/...`): `cpuset.cpus`, `cpuset.mems`,
  `cpu.weight`, `cpu.max`, `cpu.idle`, `memory.max`, `memory.high`.

A driver turns a `PodAllocation` into an ordered list of (file, value); `enforce` reads, compares
and writes only what differs. A file the kernel does not offer (a controller not enabled on that
hierarchy) is reported as unsupported and skipped, never an error.
"""
from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Mapping

from node_enforcer.enforce.files import PAGE, FilePort
from node_enforcer.model.pod import Pod
from node_enforcer.model.topology import format_cpulist, parse_cpulist
from node_enforcer.policy.allocation import CFS_PERIOD_US, PodAllocation

CONVENTIONS = ("cgroupfs", "systemd")
V1_CONTROLLERS = ("cpuset", "cpu", "memory")


def pod_cgroup(convention: str, k8s_qos: str, uid: str) -> str:
    """The pod's cgroup, relative to the folder that holds `kubepods` / `kubepods.slice`."""
    qos = k8s_qos.lower()
    if convention == "cgroupfs":
        return f"kubepods/pod{uid}" if qos == "guaranteed" else f"kubepods/{qos}/pod{uid}"
    if convention == "systemd":
        u = uid.replace("-", "_")
        if qos == "guaranteed":
            return f"kubepods.slice/kubepods-pod{u}.slice"
        return f"kubepods.slice/kubepods-{qos}.slice/kubepods-{qos}-pod{u}.slice"
    raise ValueError(f"cgroup driver {convention!r}: use one of {CONVENTIONS}")


def container_id_of(dirname: str) -> str:
    """`cri-containerd-abc.scope` -> `abc`; a cgroupfs directory name is the id itself."""
    name = dirname[:-len(".scope")] if dirname.endswith(".scope") else dirname
    for prefix in ("cri-containerd-", "crio-", "docker-", "containerd-"):
        if name.startswith(prefix):
            return name[len(prefix):]
    return name


@dataclass(frozen=True)
class Desired:
    path: str
    value: str
    # cpuset files of a pod and its containers must be widened parent-first and narrowed
    # children-first; `enforce` orders writes with these two fields
    group: str = ""
    is_parent: bool = False


@dataclass
class PodCgroups:
    """What a driver found for one pod: its desired writes and what it could not apply."""

    pod: str
    found: bool
    desired: list[Desired] = field(default_factory=list)
    pids: list[int] = field(default_factory=list)
    unsupported: list[str] = field(default_factory=list)


def _pids(files: FilePort, dirs: list[str]) -> list[int]:
    out: set[int] = set()
    for d in dirs:
        text = files.read(os.path.join(d, "cgroup.procs")) or ""
        out.update(int(x) for x in text.split() if x.strip().isdigit())
    return sorted(out)


class CgroupDriver:
    """Base of the v1 and v2 drivers: the path convention, the root and the parent folder."""

    version = 0

    def __init__(self, root: str, convention: str = "cgroupfs", parent: str | Mapping[str, str] = "") -> None:
        if convention not in CONVENTIONS:
            raise ValueError(f"cgroup driver {convention!r}: use one of {CONVENTIONS}")
        self.root, self.convention, self.parent = root, convention, parent

    def _parent(self, controller: str) -> str:
        if isinstance(self.parent, str):
            return self.parent
        return self.parent.get(controller, self.parent.get("*", ""))

    def pod_dir(self, pod: Pod, controller: str = "") -> str:
        raise NotImplementedError

    def qos_dir(self, k8s_qos: str, controller: str = "") -> str:
        """The k8s QoS class's own cgroup (`kubepods/besteffort`), the parent of its pods'."""
        raise NotImplementedError

    def cgroups(self, alloc: PodAllocation, pod: Pod, files: FilePort) -> PodCgroups:
        raise NotImplementedError

    def read_cpuset(self, pod: Pod, files: FilePort) -> frozenset[int] | None:
        """The cpus a pod's cgroup holds now (to rebuild a lost checkpoint)."""
        text = files.read(os.path.join(self.pod_dir(pod, "cpuset"), "cpuset.cpus"))
        try:
            return parse_cpulist(text) if text and text.strip() else None
        except ValueError:
            return None

    def memory_usage(self, pod: Pod, files: FilePort) -> int | None:
        raise NotImplementedError


def _cpuset_writes(out: PodCgroups, pod_dir: str, containers: list[str], alloc: PodAllocation, files: FilePort) -> None:
    for name, value in (("cpuset.cpus", format_cpulist(alloc.cpus)), ("cpuset.mems", format_cpulist(alloc.mems))):
        if not value:
            continue
        if not files.exists(os.path.join(pod_dir, name)):
            out.unsupported.append(os.path.join(pod_dir, name))
            continue
        out.desired.append(Desired(os.path.join(pod_dir, name), value, group=name, is_parent=True))
        for c in containers:
            out.desired.append(Desired(os.path.join(c, name), value, group=name))


class V1Driver(CgroupDriver):
    version = 1

    def pod_dir(self, pod: Pod, controller: str = "cpuset") -> str:
        return os.path.join(self.root, controller, self._parent(controller),
                            pod_cgroup(self.convention, pod.k8s_qos, pod.uid))

    def qos_dir(self, k8s_qos: str, controller: str = "memory") -> str:
        return os.path.join(self.root, controller, self._parent(controller),
                            os.path.dirname(pod_cgroup(self.convention, k8s_qos, "x")))

    def cgroups(self, alloc: PodAllocation, pod: Pod, files: FilePort) -> PodCgroups:
        out = PodCgroups(pod=pod.key, found=False)
        dirs: dict[str, str] = {}
        for ctl in V1_CONTROLLERS:
            d = self.pod_dir(pod, ctl)
            if files.exists(d):
                dirs[ctl] = d
            else:
                out.unsupported.append(d)
        if not dirs:
            return out
        out.found = True
        if "cpuset" in dirs:
            d = dirs["cpuset"]
            _cpuset_writes(out, d, [os.path.join(d, c) for c in files.listdir(d)], alloc, files)
        if "cpu" in dirs:
            d = dirs["cpu"]
            idle_path = os.path.join(d, "cpu.idle")
            has_idle = files.exists(idle_path)
            if has_idle and alloc.cpu_idle:  # an idle group refuses cpu.shares writes (EINVAL): one or the other
                out.desired.append(Desired(idle_path, "1"))
            if alloc.cpu_weight is not None and not (alloc.cpu_idle and has_idle):
                # runc's mapping, inverted: weight = 1 + (shares - 2) * 9999 / 262142, so weight 1 = shares 2
                shares = 2 + (alloc.cpu_weight - 1) * 262142 // 9999
                out.desired.append(Desired(os.path.join(d, "cpu.shares"), str(shares)))
            if alloc.cpu_quota_millis is not None:
                quota = alloc.cpu_quota_millis * CFS_PERIOD_US // 1000
                out.desired.append(Desired(os.path.join(d, "cpu.cfs_period_us"), str(CFS_PERIOD_US)))
                out.desired.append(Desired(os.path.join(d, "cpu.cfs_quota_us"), str(quota)))
        if "memory" in dirs and alloc.memory_max_bytes is not None:
            out.desired.append(Desired(os.path.join(dirs["memory"], "memory.limit_in_bytes"),
                                       str(alloc.memory_max_bytes // PAGE * PAGE)))
        if alloc.oom_score_adj is not None:  # the processes matter only for oom_score_adj
            ctl = next(c for c in ("cpuset", "cpu", "memory") if c in dirs)
            out.pids = _pids(files, [dirs[ctl]] + [os.path.join(dirs[ctl], c) for c in files.listdir(dirs[ctl])])
        return out

    def memory_usage(self, pod: Pod, files: FilePort) -> int | None:
        text = files.read(os.path.join(self.pod_dir(pod, "memory"), "memory.usage_in_bytes"))
        return int(text) if text and text.strip().isdigit() else None


class V2Driver(CgroupDriver):
    version = 2

    def pod_dir(self, pod: Pod, controller: str = "") -> str:
        return os.path.join(self.root, self._parent("unified"), pod_cgroup(self.convention, pod.k8s_qos, pod.uid))

    def qos_dir(self, k8s_qos: str, controller: str = "") -> str:
        return os.path.join(self.root, self._parent("unified"),
                            os.path.dirname(pod_cgroup(self.convention, k8s_qos, "x")))

    def cgroups(self, alloc: PodAllocation, pod: Pod, files: FilePort) -> PodCgroups:
        d = self.pod_dir(pod)
        out = PodCgroups(pod=pod.key, found=files.exists(d))
        if not out.found:
            out.unsupported.append(d)
            return out
        containers = [os.path.join(d, c) for c in files.listdir(d)]
        _cpuset_writes(out, d, containers, alloc, files)
        wanted: list[tuple[str, str | None]] = [
            ("cpu.idle", "1" if alloc.cpu_idle else None),
            # an idle group ignores cpu.weight (and rejects writes on some kernels): skip it there
            ("cpu.weight", None if alloc.cpu_weight is None or
             (alloc.cpu_idle and files.exists(os.path.join(d, "cpu.idle"))) else str(alloc.cpu_weight)),
            ("cpu.max", None if alloc.cpu_quota_millis is None else
             f"{alloc.cpu_quota_millis * CFS_PERIOD_US // 1000} {CFS_PERIOD_US}"),
            ("memory.max", None if alloc.memory_max_bytes is None else str(alloc.memory_max_bytes // PAGE * PAGE)),
            ("memory.high", None if alloc.memory_high_bytes is None else str(alloc.memory_high_bytes // PAGE * PAGE)),
        ]
        for name, value in wanted:
            if value is None:
                continue
            path = os.path.join(d, name)
            if files.exists(path):
                out.desired.append(Desired(path, value))
            elif name != "cpu.idle":  # cpu.idle is optional by design (kernels before 5.15)
                out.unsupported.append(path)
        if alloc.oom_score_adj is not None:
            out.pids = _pids(files, [d] + containers)
        return out

    def memory_usage(self, pod: Pod, files: FilePort) -> int | None:
        text = files.read(os.path.join(self.pod_dir(pod), "memory.current"))
        return int(text) if text and text.strip().isdigit() else None


def detect_version(root: str) -> int:
    """2 when `root` is a unified hierarchy (it has cgroup.controllers), else 1."""
    return 2 if os.path.exists(os.path.join(root, "cgroup.controllers")) else 1


def make_driver(root: str, convention: str = "cgroupfs", version: int | None = None,
                parent: str | Mapping[str, str] = "") -> CgroupDriver:
    version = version or detect_version(root)
    return (V2Driver if version == 2 else V1Driver)(root, convention, parent)
