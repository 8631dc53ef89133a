"""Apply a `CpuAllocation` to the cgroups: read, compare, write only what differs, log old -> new.

Idempotent: a second run over the same allocation writes nothing. cpuset files are ordered so
that the kernel accepts every write (v1 requires a child's cpus to lie within its parent's): the
pod's cgroup is first widened to old ∪ new, then its containers are set, then the pod is narrowed.
One pod whose cgroups refuse a write is logged and skipped; the others are still enforced.
"""
from __future__ import annotations

import logging
import os
from dataclasses import dataclass, field
from typing import Mapping, Sequence

from node_enforcer.enforce.cgroups import Desired, CgroupDriver
from node_enforcer.enforce.files import Change, FilePort
from node_enforcer.model.pod import Pod
from node_enforcer.model.topology import format_cpulist, parse_cpulist
from node_enforcer.policy.allocation import CpuAllocation

log = logging.getLogger(__name__)


@dataclass
class EnforceReport:
    changes: list[Change] = field(default_factory=list)
    missing: list[str] = field(default_factory=list)  # pods without a cgroup yet (not started)
    unsupported: list[str] = field(default_factory=list)  # files this kernel/hierarchy does not offer
    errors: list[str] = field(default_factory=list)  # pod: what failed
    failed: list[str] = field(default_factory=list)  # the pods (namespace/name) whose writes failed

    def summary(self) -> str:
        return (f"{len(self.changes)} write(s), {len(self.missing)} pod(s) without cgroups, "
                f"{len(self.unsupported)} unsupported file(s), {len(self.errors)} error(s)")


def _apply_cpuset(files: FilePort, parent: Desired, children: list[Desired]) -> None:
    current = files.read(parent.path)
    try:
        old = parse_cpulist(current or "")
    except ValueError:
        old = frozenset()
    new = parse_cpulist(parent.value)
    if current is not None and old == new:  # the usual, no-op pass: only the containers to check
        for child in children:
            files.ensure(child.path, child.value)
        return
    if old and not old <= new:
        files.ensure(parent.path, format_cpulist(old | new))  # widen first; narrowed below
    elif old != new:
        files.ensure(parent.path, parent.value)
    for child in children:
        files.ensure(child.path, child.value)
    files.ensure(parent.path, parent.value)


def enforce(allocation: CpuAllocation, pods: Sequence[Pod], driver: CgroupDriver, files: FilePort,
            proc_root: str = "/proc") -> EnforceReport:
    by_uid: Mapping[str, Pod] = {p.uid: p for p in pods}
    report = EnforceReport()
    start = len(files.changes)
    for alloc in allocation.pods:
        pod = by_uid.get(alloc.uid)
        if pod is None:
            continue
        try:
            found = driver.cgroups(alloc, pod, files)
            report.unsupported.extend(found.unsupported if found.found else [])
            if not found.found:
                report.missing.append(pod.key)
                continue
            groups: dict[str, list[Desired]] = {}
            for d in found.desired:
                if d.group:
                    groups.setdefault(d.group, []).append(d)
            for members in groups.values():
                parent = next(d for d in members if d.is_parent)
                _apply_cpuset(files, parent, [d for d in members if not d.is_parent])
            for d in found.desired:
                if not d.group:
                    files.ensure(d.path, d.value)
            if alloc.oom_score_adj is not None:
                for pid in found.pids:
                    path = os.path.join(proc_root, str(pid), "oom_score_adj")
                    if files.exists(path):  # the process may have exited since cgroup.procs was read
                        files.ensure(path, str(alloc.oom_score_adj))
        except OSError as exc:
            msg = f"{pod.key}: {exc.strerror or exc} ({exc.filename})"
            report.errors.append(msg)
            report.failed.append(pod.key)
            log.error("enforce %s", msg, extra={"pod": pod.key})
    report.changes = files.changes[start:]
    return report
