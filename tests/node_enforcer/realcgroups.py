"""A throw-away Kubernetes-shaped sub-tree on the machine's real cgroups, for the integration tests
(tests/integration/test_cgroup*.py) and the enforcer benchmark.

Each controller gets `<own cgroup>/tidewise-test-<random>/` (under this process's own cgroup, so
that the stand-in containers stay inside whatever limits the machine puts on us), holding
`kubepods/...` in the cgroupfs or systemd convention. Real `sleep` processes stand in for
containers. `close()` kills them and removes every directory it made, even after a failure.
"""
from __future__ import annotations

import os
import subprocess
import uuid
from typing import Iterable

from node_enforcer.cgroups import V1Driver, V2Driver, pod_cgroup
from node_enforcer.pods import Pod

V1_ROOT = "/sys/fs/cgroup"
V2_ROOT = "/sys/fs/cgroup/unified"
V1_CONTROLLERS = ("cpuset", "cpu", "memory")


class CgroupsNotWritable(Exception):
    pass


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
    def __init__(self, version: int = 1, convention: str = "cgroupfs") -> None:
        self.version, self.convention = version, convention
        self.name = f"tidewise-test-{uuid.uuid4().hex[:10]}"
        self.made: list[str] = []  # directories, in creation order
        self.procs: list[subprocess.Popen] = []
        self.parents: dict[str, str] = {}
        try:
            if version == 1:
                for ctl in V1_CONTROLLERS:
                    rel = os.path.join(own_cgroup(ctl), self.name)
                    self.parents[ctl] = rel
                    self._mkdir(os.path.join(V1_ROOT, ctl, rel), ctl)
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
            return V1Driver(V1_ROOT, self.convention, parent=dict(self.parents))
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
            return [(ctl, os.path.join(V1_ROOT, ctl, self.parents[ctl], rel)) for ctl in V1_CONTROLLERS]
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
        for ctl in V1_CONTROLLERS:
            p = os.path.join(V1_ROOT, ctl, own_cgroup(ctl), name)
            if os.path.exists(p):
                out.append(p)
        p = os.path.join(V2_ROOT, own_cgroup(""), name)
        if os.path.exists(p):
            out.append(p)
    return out
