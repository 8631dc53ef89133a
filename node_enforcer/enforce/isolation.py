"""Apply an `IsolationPlan`: disk I/O limits, the network class of batch pods' cgroups and the
reclaimed root's memory, through the same file port (read, compare, write only what differs).

| what | cgroup v1 | cgroup v2 |
|---|---|---|
| bandwidth / IOPS per device | `blkio.throttle.{read,write}_{bps,iops}_device` | `io.max` |
| proportional weight | `blkio.bfq.weight` (BFQ) or `blkio.weight` (CFQ) | `io.weight` (`default N`) |
| network class | `net_prio.ifpriomap` or `net_cls.classid` (pod and containers) | none (eBPF only) |
| reclaimed root | `memory.limit_in_bytes`, `memory.soft_limit_in_bytes` | `memory.max`, `memory.high` |

A file the hierarchy does not offer is reported as unsupported, never an error. v1 has no
`memory.high`: the soft limit is the nearest (the kernel reclaims the group toward it under global
memory pressure, but does not throttle it). A root whose cap is lifted (online pods share it) gets
the kernel's unlimited, and only once every pod of that cgroup took its own cap: a pod whose cap
write failed keeps the root's cap above it until a later pass.
"""
from __future__ import annotations

import logging
import os
from typing import Mapping, Sequence

from node_enforcer.enforce.apply import EnforceReport
from node_enforcer.enforce.cgroups import CgroupDriver
from node_enforcer.enforce.files import PAGE, FilePort
from node_enforcer.model.pod import Pod
from node_enforcer.policy.io import IoLimit, PodIo
from node_enforcer.policy.isolation import IsolationPlan, RootMemory
from node_enforcer.policy.network import NetPlan

log = logging.getLogger(__name__)
V1_THROTTLE = (("read_bps", "blkio.throttle.read_bps_device"), ("write_bps", "blkio.throttle.write_bps_device"),
               ("read_iops", "blkio.throttle.read_iops_device"), ("write_iops", "blkio.throttle.write_iops_device"))


def _v2_io_max(lim: IoLimit) -> str:
    def v(x: int | None) -> str:
        return "max" if x is None else str(x)

    return f"rbps={v(lim.read_bps)} wbps={v(lim.write_bps)} riops={v(lim.read_iops)} wiops={v(lim.write_iops)}"


def _io_v1(d: str, io: PodIo, files: FilePort, report: EnforceReport) -> None:
    for attr, name in V1_THROTTLE:
        path = os.path.join(d, name)
        text = files.read(path)  # one read per file, not an exists() and a read per device
        if text is None:
            report.unsupported.append(path)
            continue
        for i, lim in enumerate(io.limits):
            # 0 removes a v1 limit; after a write the file is read again (the kernel merged the line)
            files.ensure_line(path, lim.device, str(getattr(lim, attr) or 0), text if i == 0 else None)
    if io.weight is not None:
        bfq, cfq = os.path.join(d, "blkio.bfq.weight"), os.path.join(d, "blkio.weight")
        if files.exists(bfq):  # BFQ: 1..1000, default 100, the same scale as v2 below 1000
            files.ensure(bfq, str(max(1, min(1000, io.weight))))
        elif files.exists(cfq):  # CFQ: 10..1000, default 500
            files.ensure(cfq, str(max(10, min(1000, io.weight * 5))))
        else:
            report.unsupported.append(f"{d}/blkio.weight (no BFQ/CFQ scheduler)")


def _io_v2(d: str, io: PodIo, files: FilePort, report: EnforceReport) -> None:
    path = os.path.join(d, "io.max")
    if not files.exists(path):
        report.unsupported.append(path)
    else:
        for lim in io.limits:
            files.ensure_line(path, lim.device, _v2_io_max(lim))
    if io.weight is not None:
        wpath = os.path.join(d, "io.weight")
        if files.exists(wpath):
            files.ensure_line(wpath, "default", str(io.weight))
        else:
            report.unsupported.append(wpath)


def _net(pod: Pod, net: NetPlan, driver: CgroupDriver, files: FilePort, report: EnforceReport) -> None:
    controller = "net_prio" if net.classifier == "priority" else "net_cls"
    if driver.version != 1:
        report.unsupported.append(f"{driver.pod_dir(pod)}: cgroup v2 has no {controller}; batch egress not classified")
        return
    d = driver.pod_dir(pod, controller)
    if not files.exists(d):
        report.unsupported.append(d)
        return
    for cg in [d] + [os.path.join(d, c) for c in files.listdir(d)]:  # containers copy the pod's value only at creation
        if controller == "net_prio":
            files.ensure_line(os.path.join(cg, "net_prio.ifpriomap"), net.device, str(net.mark))
        else:
            files.ensure(os.path.join(cg, "net_cls.classid"), str(net.mark))


def _root(root: RootMemory, driver: CgroupDriver, files: FilePort, report: EnforceReport) -> None:
    d = driver.qos_dir(root.k8s_qos, "memory")
    unlimited = "max" if driver.version == 2 else "-1"
    cap, high = (unlimited if v is None else str(v // PAGE * PAGE)
                 for v in (root.memory_max_bytes, root.memory_high_bytes))
    names = (("memory.max", cap), ("memory.high", high)) if driver.version == 2 else (
        ("memory.limit_in_bytes", cap), ("memory.soft_limit_in_bytes", high))
    for name, value in names:
        path = os.path.join(d, name)
        if files.exists(path):
            files.ensure(path, value)
        else:
            report.unsupported.append(path)


def enforce_root(root: RootMemory, driver: CgroupDriver, files: FilePort) -> EnforceReport:
    """Write the reclaimed root's memory alone (the agent does it before the pods' own caps, so that
    batch is never uncapped as a whole in between); the report says whether it took."""
    report = EnforceReport()
    start = len(files.changes)
    try:
        _root(root, driver, files, report)
    except OSError as exc:
        report.errors.append(f"reclaimed root {root.k8s_qos}: {exc.strerror or exc} ({exc.filename})")
    report.changes = files.changes[start:]
    return report


def enforce_isolation(plan: IsolationPlan, pods: Sequence[Pod], driver: CgroupDriver, files: FilePort,
                      report: EnforceReport) -> None:
    """Write what `plan` asks into the pods' cgroups; appends to `report` (changes, unsupported, errors)."""
    by_uid: Mapping[str, Pod] = {p.uid: p for p in pods}
    by_key: Mapping[str, Pod] = {p.key: p for p in pods}
    start, err_start = len(files.changes), len(report.errors)
    for io in plan.io:
        pod = by_uid.get(io.uid)
        if pod is None:
            continue
        d = driver.pod_dir(pod, "blkio")
        try:
            if not files.exists(d):
                report.unsupported.append(d)
            else:
                (_io_v1 if driver.version == 1 else _io_v2)(d, io, files, report)
        except OSError as exc:
            report.errors.append(f"{pod.key}: I/O limits: {exc.strerror or exc} ({exc.filename})")
    if plan.net is not None:
        for uid in plan.net.reclaimed_uids:
            if (pod := by_uid.get(uid)) is not None:
                try:
                    _net(pod, plan.net, driver, files, report)
                except OSError as exc:
                    report.errors.append(f"{pod.key}: network class: {exc.strerror or exc} ({exc.filename})")
    root = plan.root
    if root is not None and root.memory_max_bytes is None and \
            any(by_key[k].k8s_qos == root.k8s_qos for k in report.failed if k in by_key):
        log.warning("reclaimed root %s: cap kept, a pod in it did not take its own cap", root.k8s_qos)
        root = None
    if root is not None:
        try:
            _root(root, driver, files, report)
        except OSError as exc:
            report.errors.append(f"reclaimed root {root.k8s_qos}: {exc.strerror or exc} ({exc.filename})")
    report.changes.extend(files.changes[start:])
    for e in report.errors[err_start:]:
        log.error("isolation: %s", e)
