"""A throw-away Kubernetes-shaped sub-tree on the machine's real cgroups, for the integration tests
(tests/integration/test_cgroup*.py) and the enforcer benchmark.

Each controller gets `<own cgroup>/tidewise-test-<pid>-<start time>-<random>/` (under this
process's own cgroup, so that the stand-in containers stay inside whatever limits the machine puts
on us), holding `kubepods/...` in the cgroupfs or systemd convention. Real `sleep` processes stand
in for containers. `close()` kills them and removes every directory it made, even after a failure.

A run killed mid-test (SIGKILL, a CI timeout) never reaches `close()`. Its tree names the process
that made it (pid and start time, so a reused pid does not look alive), and the first tree a later
process makes first removes every such tree whose maker is gone (`remove_stale_trees`): processes
left in it are moved out and killed, then the cgroups are removed bottom-up.
"""
from __future__ import annotations

import errno
import os
import re
import signal
import subprocess
import time
import uuid
from typing import Iterable

from node_enforcer.enforce.cgroups import V1Driver, V2Driver, pod_cgroup
from node_enforcer.model.pod import Pod

V1_ROOT = "/sys/fs/cgroup"
V2_ROOT = "/sys/fs/cgroup/unified"
V1_CONTROLLERS = ("cpuset", "cpu", "memory")
SWEPT = V1_CONTROLLERS + ("blkio",)  # hierarchies a test tree may use (blkio: the I/O limit tests)


PREFIX = "tidewise-test-"
# tidewise-test-<pid>-<start time in clock ticks since boot>-<random>; older names (no pid) are left alone
_OWNED = re.compile(rf"^{PREFIX}(\d+)-(\d+)-[0-9a-f]+$")


class CgroupsNotWritable(Exception):
    pass


def start_time(pid: int) -> str | None:
    """A process's start time (field 22 of /proc/PID/stat), or None when there is no such process.
    With the pid it names one process for good: a later process reusing the pid starts later."""
    try:
        with open(f"/proc/{pid}/stat", encoding="utf-8") as fh:
            stat = fh.read()
    except (FileNotFoundError, ProcessLookupError):
        return None
    # the command name (field 2) may hold spaces and parentheses: split after its last ')'
    return stat[stat.rindex(")") + 2:].split()[19]


def tree_name(pid: int | None = None) -> str:
    pid = os.getpid() if pid is None else pid
    return f"{PREFIX}{pid}-{start_time(pid)}-{uuid.uuid4().hex[:8]}"


def is_stale(name: str) -> bool:
    """A test tree whose maker process is gone (a pid that is dead, or alive but started at
    another time: reused)."""
    m = _OWNED.match(name)
    return m is not None and start_time(int(m.group(1))) != m.group(2)


def default_roots() -> list[str]:
    return [os.path.join(V1_ROOT, ctl) for ctl in SWEPT] + [V2_ROOT]


def remove_stale_trees(roots: Iterable[str] | None = None) -> list[str]:
    """Remove every stale test tree anywhere under `roots` (default: the v1 controllers' and the
    v2 hierarchies: a killed run may have had another own cgroup than this one). Returns them."""
    removed = []
    for root in default_roots() if roots is None else roots:
        if not os.path.isdir(root):
            continue
        for folder, subdirs, _ in os.walk(root):
            for d in [d for d in subdirs if is_stale(d)]:
                _remove_tree(os.path.join(folder, d))
                removed.append(os.path.join(folder, d))
                subdirs.remove(d)
    return removed


def _procs(cgroup: str) -> list[int]:
    try:
        return [int(x) for x in _read(os.path.join(cgroup, "cgroup.procs")).split()]
    except FileNotFoundError:
        return []


def _remove_tree(path: str) -> None:
    """Empty each cgroup of `path` of its processes (moved to the tree's parent, then killed: they
    are the stand-in `sleep`s of the dead run) and remove the cgroups, deepest first."""
    parent = os.path.dirname(path)
    cgroups = [d for d, _, _ in os.walk(path, topdown=False)]
    for cg in cgroups:
        for pid in _procs(cg):
            try:
                _write(os.path.join(parent, "cgroup.procs"), str(pid))
            except OSError:
                pass  # the parent may not take processes (v2 inner node): killed where it is
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
    for cg in cgroups:
        for _ in range(500):  # a killed process leaves its cgroup once it has exited: up to ~10 s
            try:
                os.rmdir(cg)
                break
            except FileNotFoundError:
                break
            except OSError as exc:
                if exc.errno != errno.EBUSY:
                    raise
                # busy: a process still leaving, or one that has left cgroup.procs while the kernel
                # still counts it (seen under load on cgroup v1): both pass within the wait
                time.sleep(0.02)
        else:
            raise OSError(f"stale test cgroup {cg} still busy after ~10 s (processes {_procs(cg)})")


_swept = False


def sweep_once() -> list[str]:
    """`remove_stale_trees`, once per process (before its first tree)."""
    global _swept
    if _swept:
        return []
    _swept = True
    return remove_stale_trees()


def own_cgroup(controller: str) -> str:
    """This process's cgroup path in a v1 controller's hierarchy ('' for v2's `0::`)."""
    with open("/proc/self/cgroup", encoding="utf-8") as fh:
        for line in fh:
            _, ctls, path = line.rstrip("\n").split(":", 2)
            if (controller == "" and ctls == "") or controller in ctls.split(","):
                return path.lstrip("/")
    return ""


def _write(path: str, value: str) -> None:
    with open(path, "w", encoding="utf-8") as fh:
        fh.write(value)


def _read(path: str) -> str:
    with open(path, encoding="utf-8") as fh:
        return fh.read().strip()


class RealTree:
    def __init__(self, version: int = 1, convention: str = "cgroupfs", name: str | None = None,
                 controllers: tuple[str, ...] = V1_CONTROLLERS, v1_root: str | None = None) -> None:
        """`controllers` and `v1_root` (v1 only): the hierarchies to build in, e.g. blkio too, or a
        folder whose `<controller>` entries point at the mounts (a test's own net_prio mount)."""
        self.version, self.convention = version, convention
        self.controllers, self.v1_root = controllers, v1_root or V1_ROOT  # the module's, read now (tests patch it)
        self.name = name or tree_name()
        self.made: list[str] = []  # directories, in creation order
        self.procs: list[subprocess.Popen] = []
        self.parents: dict[str, str] = {}
        sweep_once()  # what killed runs left behind, before this run adds its own
        try:
            if version == 1:
                for ctl in controllers:
                    rel = os.path.join(own_cgroup(ctl), self.name)
                    self.parents[ctl] = rel
                    self._mkdir(os.path.join(self.v1_root, ctl, rel), ctl)
            else:
                rel = os.path.join(own_cgroup(""), self.name)
                self.parents["unified"] = rel
                self._mkdir(os.path.join(V2_ROOT, rel), "unified")
        except OSError as exc:
            self.close()
            raise CgroupsNotWritable(
                f"cannot create cgroups ({exc.strerror}: {exc.filename}); the node-enforcer integration tests need "
                f"root and a writable cgroup v{version} hierarchy under {V1_ROOT if version == 1 else V2_ROOT}"
            ) from exc

    def driver(self) -> V1Driver | V2Driver:
        if self.version == 1:
            return V1Driver(self.v1_root, self.convention, parent=dict(self.parents))
        return V2Driver(V2_ROOT, self.convention, parent=dict(self.parents))

    def _mkdir(self, path: str, ctl: str) -> None:
        if os.path.isdir(path):
            return
        os.mkdir(path)
        self.made.append(path)
        if ctl == "cpuset":  # v1: a cpuset takes no task until its cpus and mems are set
            parent = os.path.dirname(path)
            _write(os.path.join(path, "cpuset.cpus"), _read(os.path.join(parent, "cpuset.cpus")))
            _write(os.path.join(path, "cpuset.mems"), _read(os.path.join(parent, "cpuset.mems")))

    def _dirs(self, rel: str) -> list[tuple[str, str]]:
        if self.version == 1:
            return [(ctl, os.path.join(self.v1_root, ctl, self.parents[ctl], rel)) for ctl in self.controllers]
        return [("unified", os.path.join(V2_ROOT, self.parents["unified"], rel))]

    def add_pod(self, pod: Pod, start: bool = True) -> list[int]:
        """Make the pod's cgroups (and its containers'), start one `sleep` per container, move it in."""
        rel = pod_cgroup(self.convention, pod.k8s_qos, pod.uid)
        pids = []
        for ctl, d in self._dirs(rel):
            parts = rel.split("/")
            base = d[: -len(rel)].rstrip("/")
            for i in range(1, len(parts) + 1):
                self._mkdir(os.path.join(base, *parts[:i]), ctl)
        for c in pod.containers:
            cid = c.id or c.name
            leaf = cid if self.convention == "cgroupfs" else f"cri-containerd-{cid}.scope"
            for ctl, d in self._dirs(rel):
                self._mkdir(os.path.join(d, leaf), ctl)
            if not start:
                continue
            proc = subprocess.Popen(["sleep", "600"], stdin=subprocess.DEVNULL)
            self.procs.append(proc)
            for _, d in self._dirs(rel):
                _write(os.path.join(d, leaf, "cgroup.procs"), str(proc.pid))
            pids.append(proc.pid)
        return pids

    def close(self) -> None:
        for p in self.procs:
            p.kill()
        for p in self.procs:
            p.wait(timeout=10)
        self.procs.clear()
        for path in reversed(self.made):
            try:
                os.rmdir(path)
            except FileNotFoundError:
                pass
        self.made.clear()

    def __enter__(self) -> "RealTree":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def leftovers(names: Iterable[str]) -> list[str]:
    """Test sub-trees still present (should be none after close)."""
    out = []
    for name in names:
        for ctl in SWEPT:
            p = os.path.join(V1_ROOT, ctl, own_cgroup(ctl), name)
            if os.path.exists(p):
                out.append(p)
        p = os.path.join(V2_ROOT, own_cgroup(""), name)
        if os.path.exists(p):
            out.append(p)
    return out
