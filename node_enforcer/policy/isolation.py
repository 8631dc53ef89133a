"""Isolation beyond CPU time and memory size, for reclaimed (batch) pods. Pure.

- disk I/O (`policy.io`): per pod and device, static or pressure-driven;
- network egress (`policy.network`): an HTB class with a cap, chosen by cgroup;
- the reclaimed root's memory: the k8s QoS cgroup that holds the batch pods (BestEffort, as
  Katalyst's reclaimed pods are) gets `memory.max` = the plan's reclaimable memory and
  `memory.high` at `root_memory_high_ratio` of it (Katalyst's 0.95): the kernel reclaims and throttles
  batch as a whole before the OOM killer is needed. Written only when that cgroup holds batch pods
  and nothing else (`policy.batch_memory` decides, and then splits the plan among the pods when it
  cannot be used), and only with a plan (no plan: the pods' own limits alone apply). When online pods
  share it, a cap there would cap them too: it is lifted (unlimited), the split holding batch.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Sequence

from contracts.qos import QosLevel
from contracts.reclaim import ReclaimPlan
from node_enforcer.model.devices import BlockDevice
from node_enforcer.model.pod import Pod
from node_enforcer.policy.allocation import CpuAllocation, PolicySettings
from node_enforcer.policy.batch_memory import BatchMemory
from node_enforcer.policy.io import IoSettings, PodIo, plan_io
from node_enforcer.policy.network import NetPlan, NetworkSettings, plan_network


@dataclass(frozen=True)
class IsolationSettings:
    io: IoSettings = field(default_factory=IoSettings)
    network: NetworkSettings = field(default_factory=NetworkSettings)
    root_memory: bool = True  # cap the reclaimed root (see the module docstring)
    root_memory_high_ratio: float = 0.95  # Katalyst's default: throttle by reclaim at 95% of the cap


@dataclass(frozen=True)
class RootMemory:
    k8s_qos: str  # BestEffort / Burstable: the QoS cgroup under kubepods
    memory_max_bytes: int | None  # None: unlimited (online pods share it; the batch pods' own caps hold them)
    memory_high_bytes: int | None


@dataclass(frozen=True)
class IsolationPlan:
    io: tuple[PodIo, ...] = ()
    io_psi: float | None = None
    net: NetPlan | None = None
    root: RootMemory | None = None
    notes: tuple[str, ...] = ()

    def to_dict(self) -> dict[str, object]:
        return {
            "io": [{"pod": p.key, "factor": round(p.factor, 3), "weight": p.weight, "problem": p.problem,
                    "limits": [lim.__dict__ for lim in p.limits]} for p in self.io],
            "io_psi_some_avg10": self.io_psi,
            "network": None if self.net is None else {
                "device": self.net.device, "classifier": self.net.classifier,
                "classes": [c.__dict__ for c in self.net.classes], "reclaimed_pods": len(self.net.reclaimed_uids)},
            "reclaimed_root": None if self.root is None else self.root.__dict__,
            "notes": list(self.notes)}


    def summary(self) -> list[str]:
        """Short human lines for `tidewise enforce --once`."""
        lines = []
        if self.io:
            psi = "-" if self.io_psi is None else f"{self.io_psi:.1f}%"
            lines.append(f"disk I/O: {len(self.io)} reclaimed pod(s), online I/O PSI {psi}, "
                         f"limits x{self.io[0].factor:.2f}")
        lines += [f"malformed I/O annotation on {p.key}: {p.problem}" for p in self.io if p.problem]
        if self.net is not None:
            cap = self.net.classes[-1]
            lines.append(f"network: {self.net.device} HTB, reclaimed egress capped at {cap.rate} bit/s "
                         f"({self.net.classifier}, {len(self.net.reclaimed_uids)} pod(s))")
        root = self.root
        if root is not None and root.memory_max_bytes is None:
            lines.append(f"reclaimed root ({root.k8s_qos}): no cap (online pods share it); the plan is split "
                         "among the reclaimed pods")
        elif root is not None and root.memory_max_bytes is not None:
            lines.append(f"reclaimed root ({root.k8s_qos}): memory.max {root.memory_max_bytes >> 20} MiB, "
                         f"memory.high {(root.memory_high_bytes or 0) >> 20} MiB")
        return lines + [f"note: {n}" for n in self.notes]


def root_memory(memory: BatchMemory | None, s: IsolationSettings) -> RootMemory | None:
    """What the reclaimed root's cgroup gets: the plan's cap when batch holds it alone, unlimited
    when online pods share it with batch (the split holds batch), else nothing is written."""
    if not s.root_memory or memory is None:
        return None
    if memory.root_qos is not None:
        return RootMemory(memory.root_qos, memory.lent_bytes, int(memory.lent_bytes * s.root_memory_high_ratio))
    if memory.shared_qos is not None:
        return RootMemory(memory.shared_qos, None, None)
    return None


def plan_isolation(allocation: CpuAllocation, pods: Sequence[Pod], reclaim: ReclaimPlan | None,
                   devices: Sequence[BlockDevice], io_psi: float | None, s: IsolationSettings,
                   ps: PolicySettings | None = None) -> IsolationPlan:
    """What the I/O, network and reclaimed-root controllers should hold for this allocation. The
    root's memory follows the allocation's `batch_memory` (decided from `reclaim` and `ps` by the policy)."""
    reclaimed = {a.uid for a in allocation.pods if a.qos == QosLevel.RECLAIMED.value}
    batch = [(p.uid, p.key, p.annotations) for p in pods if p.uid in reclaimed]
    io = plan_io(batch, devices, io_psi, s.io)
    root = root_memory(allocation.batch_memory, s)
    return IsolationPlan(tuple(io), io_psi, plan_network([u for u, _, _ in batch], s.network), root)
