"""The policy's vocabulary: its settings, what it reads of a reclaim plan, and the plan it returns
(`CpuAllocation`: pools, each pod's cpuset, mems and limits, refusals with reasons)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

from node_enforcer.model.topology import format_cpulist
from node_enforcer.policy.batch_memory import BatchMemory

CFS_PERIOD_US = 100_000  # the kernel's default CFS period; quotas are written against it
RECLAIMED_CPU_WEIGHT = 1  # v2 cpu.weight minimum (v1 cpu.shares 2): online work always wins
OOM_SCORE_ADJ_MIN = -998  # -1000 would make a process unkillable; the kubelet uses -997/-998 too


@dataclass(frozen=True)
class PolicySettings:
    reserved_cpus: int = 2  # threads for the kubelet, runtime and system_cores pods; rounded up to whole cores
    reclaim_floor_cpus: int = 2  # batch keeps at least this many threads, even at the online peak
    min_share_cpus: int = 1  # shared/system pods keep at least this many threads (rounded up to a core)
    share_headroom: float = 0.10  # margin over the shared pool's demand (requests or forecast), 10%
    reclaimed_memory_high_ratio: float = 0.9  # v2 memory.high as a fraction of memory.max: throttle before OOM
    # A plan that lends no memory (zero, refused, expired) still caps batch: 64 MiB lets a batch
    # process exit cleanly, not work. Fail closed: "0" must not read as "no limit".
    reclaimed_memory_floor_bytes: int = 64 << 20


@dataclass(frozen=True)
class PodAllocation:
    uid: str
    key: str  # namespace/name
    qos: str  # the resolved QosLevel value
    pool: str  # reserve | dedicated | share | share-<cpuset_pool> | reclaim
    cpus: frozenset[int]
    mems: frozenset[int]
    cpu_weight: int | None = None  # v2 scale 1..10000; None = leave the kubelet's value
    cpu_quota_millis: int | None = None  # None = no quota written
    cpu_idle: bool = False
    memory_max_bytes: int | None = None
    memory_high_bytes: int | None = None
    oom_score_adj: int | None = None
    notes: tuple[str, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        return {
            "uid": self.uid, "pod": self.key, "qos": self.qos, "pool": self.pool,
            "cpus": format_cpulist(self.cpus), "mems": format_cpulist(self.mems),
            "cpu_weight": self.cpu_weight, "cpu_quota_millis": self.cpu_quota_millis, "cpu_idle": self.cpu_idle,
            "memory_max_bytes": self.memory_max_bytes, "memory_high_bytes": self.memory_high_bytes,
            "oom_score_adj": self.oom_score_adj, "notes": list(self.notes),
        }


@dataclass(frozen=True)
class Refusal:
    uid: str
    key: str
    reason: str


@dataclass(frozen=True)
class CpuAllocation:
    """The plan: pools, each pod's cpuset/mems/limits, refusals and malformed annotations."""

    pools: Mapping[str, frozenset[int]]  # reserve, share, reclaim, share-<cpuset_pool>...
    dedicated: Mapping[str, frozenset[int]]  # pod uid -> its exclusive cpus
    pods: tuple[PodAllocation, ...]
    refused: tuple[Refusal, ...] = ()
    problems: tuple[tuple[str, str], ...] = ()  # (pod, malformed annotation)
    notes: tuple[str, ...] = ()
    batch_memory: BatchMemory | None = None  # how reclaimed pods are held to the plan's memory (None: no plan)

    def pod(self, key_or_uid: str) -> PodAllocation:
        for p in self.pods:
            if key_or_uid in (p.key, p.uid):
                return p
        raise KeyError(key_or_uid)

    def to_dict(self) -> dict[str, Any]:
        return {
            "pools": {k: format_cpulist(v) for k, v in sorted(self.pools.items())},
            "dedicated": {k: format_cpulist(v) for k, v in sorted(self.dedicated.items())},
            "pods": [p.to_dict() for p in self.pods],
            "refused": [{"uid": r.uid, "pod": r.key, "reason": r.reason} for r in self.refused],
            "problems": [{"pod": k, "problem": v} for k, v in self.problems],
            "notes": list(self.notes),
            "batch_memory": None if self.batch_memory is None else self.batch_memory.to_dict(),
        }
