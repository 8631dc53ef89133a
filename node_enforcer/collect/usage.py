"""What batch (`reclaimed_cores`) pods use now, read from their cgroups, for the agent's /metrics.

CPU is the cgroup's cumulative counter (v2 `cpu.stat` `usage_usec`; v1 `cpuacct.usage`, in ns, in
the cpuacct hierarchy, which most v1 hosts co-mount with cpu); `node_enforcer.metrics` turns two
passes' counters into cores. Memory is the pods' `memory.current` / `memory.usage_in_bytes` summed.
A pod whose files are missing (not started yet, or another --cgroup-driver) is left out, not zero.
"""
from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Sequence

from node_enforcer.model.pod import Pod

if TYPE_CHECKING:  # collect reads through the driver's paths and the file port; it imports no enforcer
    from node_enforcer.enforce.cgroups import CgroupDriver
    from node_enforcer.enforce.files import FilePort
    from node_enforcer.policy.allocation import CpuAllocation

RECLAIM_POOL = "reclaim"  # PodAllocation.pool of a batch pod


@dataclass(frozen=True)
class BatchUsage:
    cpu_seconds: dict[str, float] = field(default_factory=dict)  # pod uid -> its cgroup's CPU seconds so far
    memory_bytes: int = 0  # the batch pods' memory in use, summed


def cpu_seconds(driver: "CgroupDriver", pod: Pod, files: "FilePort") -> float | None:
    """The pod cgroup's cumulative CPU time in seconds; None when its counter cannot be read."""
    if driver.version == 2:
        stat = files.read(os.path.join(driver.pod_dir(pod), "cpu.stat")) or ""
        for line in stat.splitlines():
            key, _, value = line.partition(" ")
            if key == "usage_usec" and value.strip().isdigit():
                return int(value) / 1e6
        return None
    for controller in ("cpuacct", "cpu"):  # `cpu` is the co-mounted `cpu,cpuacct` on most v1 hosts
        text = files.read(os.path.join(driver.pod_dir(pod, controller), "cpuacct.usage"))
        if text and text.strip().isdigit():
            return int(text) / 1e9
    return None


def read_batch_usage(driver: "CgroupDriver", files: "FilePort", pods: Sequence[Pod],
                     alloc: "CpuAllocation") -> BatchUsage:
    """CPU counters and memory of the pods the allocation puts in the reclaim pool."""
    batch = {p.uid for p in alloc.pods if p.pool == RECLAIM_POOL}
    cpu: dict[str, float] = {}
    memory = 0
    for pod in pods:
        if pod.uid not in batch:
            continue
        if (seconds := cpu_seconds(driver, pod, files)) is not None:
            cpu[pod.uid] = seconds
        memory += driver.memory_usage(pod, files) or 0
    return BatchUsage(cpu, memory)
