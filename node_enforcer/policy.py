"""The allocation policy: topology + pods + reclaim plan in, a `CpuAllocation` out. Pure.

Pools, in the order they are carved out of the machine's cores:

1. `reserve` — whole cores for the kubelet, the runtime and `system_cores` pods (lowest cpu ids);
2. `dedicated` — exclusive whole physical cores (all SMT siblings) per `dedicated_cores` pod: from
   one NUMA node when `numa_binding`, a whole NUMA node when `numa_exclusive`; a request that cannot
   be met is refused with its reason (no partial allocation) and the pod runs in `share`;
3. `reclaim` — what the shared pool's demand leaves, capped by the reclaim plan, never below
   `reclaim_floor_cpus`; it shrinks first when the shared demand (its forecast) grows;
4. `share` — everything else, for `shared_cores` pods; a `cpuset_pool` name gets its own
   `share-<name>` pool carved from it (whole cores, sized by its pods' requests).

Deterministic and stable: pods are visited in a fixed order; a dedicated pod keeps the cores it
already holds (from the previous allocation or the checkpoint) while they stay valid; the reclaim
pool takes the highest cores, so that a change of size moves only the cores at its edge.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Iterable, Mapping, Protocol, Sequence

from node_enforcer.pods import Pod
from node_enforcer.qos import QosLevel, QosResolver, QosSpec
from node_enforcer.topology import Core, Topology, format_cpulist, parse_cpulist

CFS_PERIOD_US = 100_000  # the kernel's default CFS period; quotas are written against it
RECLAIMED_CPU_WEIGHT = 1  # v2 cpu.weight minimum (v1 cpu.shares 2): online work always wins
OOM_SCORE_ADJ_MIN = -998  # -1000 would make a process unkillable; the kubelet uses -997/-998 too


class ReclaimLike(Protocol):
    """The fields of `predictor.types.ReclaimPlan` that the policy reads (read-only, so that the
    agent's frozen `reclaim.ReclaimInput` satisfies it too)."""

    @property
    def reclaimed_millicpu(self) -> int: ...

    @property
    def reclaimed_memory_bytes(self) -> int: ...

    @property
    def shared_demand_millicpu(self) -> int | None: ...

    @property
    def numa(self) -> Mapping[int, Any]: ...  # node -> object with `millicpu` and `memory_bytes`


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
        }


def previous_dedicated(data: Mapping[str, str] | None) -> dict[str, frozenset[int]]:
    """`{uid: "0-1,16-17"}` (checkpoint shape) -> `{uid: frozenset}`; unreadable entries dropped."""
    out = {}
    for uid, text in (data or {}).items():
        try:
            out[str(uid)] = parse_cpulist(str(text))
        except ValueError:
            continue
    return out


def _threads(cores: Iterable[Core]) -> frozenset[int]:
    return frozenset(c for core in cores for c in core.cpus)


def _cores_needed(millis: int, tpc: int) -> int:
    return max(1, math.ceil(math.ceil(millis / 1000) / tpc))


class _Planner:
    def __init__(self, topo: Topology, settings: PolicySettings) -> None:
        self.topo, self.s = topo, settings
        self.tpc = topo.threads_per_core
        self.free: list[Core] = list(topo.cores)  # ordered by lowest thread id
        self.notes: list[str] = []

    def take(self, cores: Sequence[Core]) -> frozenset[int]:
        for c in cores:
            self.free.remove(c)
        return _threads(cores)

    def free_on(self, numa: int) -> list[Core]:
        return [c for c in self.free if c.numa == numa]

    def reserve(self) -> frozenset[int]:
        n = math.ceil(self.s.reserved_cpus / self.tpc) if self.s.reserved_cpus > 0 else 0
        if n >= len(self.free):
            n = max(0, len(self.free) - 1)
            self.notes.append(f"reserved_cpus {self.s.reserved_cpus} leaves no other core; reserving {n} core(s)")
        return self.take(self.free[:n])

    def keep_previous(self, pod: Pod, spec: QosSpec, cpus: frozenset[int]) -> frozenset[int] | None:
        """The cores a dedicated pod already holds, if they are still free and still fit its request."""
        index = {cpu: core for core in self.topo.cores for cpu in core.cpus}
        if not cpus or any(c not in index for c in cpus):
            return None
        cores = sorted({index[c] for c in cpus}, key=lambda c: c.cpus[0])
        if _threads(cores) != cpus or any(c not in self.free for c in cores):
            return None
        nodes = {c.numa for c in cores}
        if spec.numa_exclusive:
            if len(nodes) != 1 or len(cores) != len([c for c in self.topo.cores if c.numa in nodes]):
                return None
        elif len(cores) != _cores_needed(pod.cpu_request_millis, self.tpc):
            return None
        elif spec.numa_binding and len(nodes) != 1:
            return None
        return self.take(cores)

    def dedicated(self, pod: Pod, spec: QosSpec) -> tuple[frozenset[int] | None, str]:
        millis = pod.cpu_request_millis
        if millis <= 0:
            return None, "dedicated_cores needs a CPU request (whole CPUs)"
        need = _cores_needed(millis, self.tpc)
        min_share = math.ceil(self.s.min_share_cpus / self.tpc) if self.s.min_share_cpus > 0 else 0
        nodes = self.topo.numa_nodes
        if spec.numa_exclusive:
            whole = [n for n in nodes if len(self.free_on(n)) == len([c for c in self.topo.cores if c.numa == n])]
            fits = [n for n in whole if len(self.free_on(n)) >= need]
            if not fits:
                why = (f"no entirely free NUMA node with {need} core(s); free cores per node: "
                       + ", ".join(f"node{n}={len(self.free_on(n))}" for n in nodes))
                return None, why
            chosen = self.free_on(fits[0])
        else:
            fitting = [n for n in nodes if len(self.free_on(n)) >= need]
            if fitting:  # best fit: the node with the fewest free cores that still holds the request
                n = min(fitting, key=lambda n: (len(self.free_on(n)), n))
                chosen = self.free_on(n)[:need]
            elif spec.numa_binding:
                most = max(nodes, key=lambda n: (len(self.free_on(n)), -n))
                return None, (f"numa_binding needs {need} free core(s) on one NUMA node; the most is "
                              f"{len(self.free_on(most))} on node{most}")
            elif len(self.free) >= need:
                chosen = self.free[:need]
            else:
                return None, f"needs {need} free core(s); {len(self.free)} free"
        if len(self.free) - len(chosen) < min_share:
            return None, (f"taking {len(chosen)} core(s) would leave fewer than min_share_cpus="
                          f"{self.s.min_share_cpus} for shared pods")
        return self.take(chosen), ""

    def reclaim(self, demand_millis: int, reclaim: ReclaimLike | None) -> tuple[frozenset[int], frozenset[int]]:
        """Split the free cores into (share, reclaim)."""
        s, tpc, free = self.s, self.tpc, list(self.free)
        share_threads = max(math.ceil(demand_millis * (1 + s.share_headroom) / 1000), s.min_share_cpus, 0)
        share_cores = math.ceil(share_threads / tpc) if share_threads else 0
        want = len(free) - share_cores
        if reclaim is not None:
            want = min(want, int(reclaim.reclaimed_millicpu) // 1000 // tpc)
        floor = math.ceil(s.reclaim_floor_cpus / tpc) if s.reclaim_floor_cpus > 0 else 0
        if want < floor:
            self.notes.append(f"reclaim pool held at its floor ({s.reclaim_floor_cpus} cpus): the shared demand "
                              f"{demand_millis}m leaves {max(want, 0) * tpc}")
        n = min(max(want, floor), len(free))
        quota: dict[int, int] | None = None
        if reclaim is not None and reclaim.numa:
            quota = {int(k): int(getattr(v, "millicpu", 0)) // 1000 // tpc for k, v in reclaim.numa.items()}
        chosen: list[Core] = []
        by_node = {node: [c for c in free if c.numa == node] for node in self.topo.numa_nodes}
        while len(chosen) < n:
            # round-robin over NUMA nodes, the node with the most cores left first, each node's
            # highest core first: balanced across nodes and stable at the edges.
            candidates = [node for node, cs in by_node.items() if cs and (quota is None or quota.get(node, 0) > 0)]
            if not candidates and quota is not None:
                quota = None  # the per-node plan is smaller than the floor: fill from anywhere
                continue
            if not candidates:
                break
            node = max(candidates, key=lambda nd: (len(by_node[nd]), nd))
            chosen.append(by_node[node].pop())
            if quota is not None:
                quota[node] -= 1
        reclaim_cpus = _threads(chosen)
        share_cpus = _threads(free) - reclaim_cpus
        if len(share_cpus) < s.min_share_cpus or (not share_cpus and free):
            share_cpus = _threads(free)  # too small to split: batch overlaps the share pool at weight 1
            self.notes.append("reclaim pool overlaps the share pool (too few cores to split)")
        return share_cpus, reclaim_cpus


def _named_share_pools(topology: Topology, s: PolicySettings, share: frozenset[int], reclaim_pool: frozenset[int],
                       pods: Sequence[Pod], specs: Mapping[str, QosSpec], notes: list[str],
                       ) -> tuple[dict[str, frozenset[int]], frozenset[int]]:
    """Carve `share-<name>` pools for `cpuset_pool` names out of the share pool (whole cores, lowest
    first, sized by their pods' requests plus headroom, at least one core), as long as the plain
    share pool keeps `min_share_cpus`; returns (named pools, what is left of the share pool)."""
    demand: dict[str, int] = {}
    for p in pods:
        name = specs[p.uid].cpuset_pool
        if name:
            demand[name] = demand.get(name, 0) + p.cpu_request_millis
    if not demand:
        return {}, share
    tpc = topology.threads_per_core
    # only cores wholly in the share pool and not overlapped by the reclaim pool are carved
    cores = [c for c in topology.cores if set(c.cpus) <= share and not set(c.cpus) & reclaim_pool]
    keep = math.ceil(s.min_share_cpus / tpc) if s.min_share_cpus > 0 else 0
    named: dict[str, frozenset[int]] = {}
    for name in sorted(demand):
        need = max(1, math.ceil(math.ceil(demand[name] * (1 + s.share_headroom) / 1000) / tpc))
        if len(cores) - need < keep:
            notes.append(f"cpuset_pool {name!r} needs {need} core(s); the share pool cannot spare them")
            continue
        taken, cores = cores[:need], cores[need:]
        named[f"share-{name}"] = _threads(taken)
    left = share - frozenset(c for cpus in named.values() for c in cpus)
    return named, left


def _order(pod: Pod) -> tuple[Any, ...]:
    return (-pod.priority, pod.created or "~", pod.namespace, pod.name, pod.uid)


def _oom(spec: QosSpec) -> int | None:
    if spec.oom_priority is None:
        return None
    return max(OOM_SCORE_ADJ_MIN, min(1000, -spec.oom_priority))


def plan(
    topology: Topology,
    pods: Sequence[Pod],
    reclaim: ReclaimLike | None = None,
    settings: PolicySettings | None = None,
    previous: Mapping[str, frozenset[int]] | None = None,
    resolver: QosResolver | None = None,
) -> CpuAllocation:
    """Compute the node's allocation. `previous` maps pod uid -> cpus it holds as dedicated."""
    s = settings or PolicySettings()
    resolver = resolver or QosResolver()
    planner = _Planner(topology, s)
    all_mems = frozenset(topology.numa_nodes)
    specs = {p.uid: resolver.resolve(p) for p in pods}
    problems = tuple((p.key, specs[p.uid].problem or "") for p in pods if specs[p.uid].problem)
    ordered = sorted(pods, key=_order)
    previous = previous or {}

    reserve = planner.reserve()
    dedicated: dict[str, frozenset[int]] = {}
    refused: list[Refusal] = []
    dedicated_pods = [p for p in ordered if specs[p.uid].level is QosLevel.DEDICATED]
    # pods that already hold cores go first, so that a newcomer never displaces a running pod
    for pod in [p for p in dedicated_pods if p.uid in previous]:
        kept = planner.keep_previous(pod, specs[pod.uid], previous[pod.uid])
        if kept is not None:
            dedicated[pod.uid] = kept
    for pod in dedicated_pods:
        if pod.uid in dedicated:
            continue
        cpus, why = planner.dedicated(pod, specs[pod.uid])
        if cpus is None:
            refused.append(Refusal(pod.uid, pod.key, why))
        else:
            dedicated[pod.uid] = cpus
    refused_uids = {r.uid for r in refused}

    shared_pods = [p for p in ordered if specs[p.uid].level is QosLevel.SHARED or p.uid in refused_uids]
    demand = sum(p.cpu_request_millis for p in shared_pods)
    if reclaim is not None and reclaim.shared_demand_millicpu is not None:
        demand = max(demand, int(reclaim.shared_demand_millicpu))
    share, reclaim_pool = planner.reclaim(demand, reclaim)
    plan_notes = list(planner.notes)
    if not share:
        share = reserve
        plan_notes.append("no core left for the share pool: shared pods run on the reserve pool")
    reclaimed_cpus = reclaim_pool or share  # floor 0 and no room: batch runs on the share pool at weight 1
    named, share = _named_share_pools(topology, s, share, reclaim_pool,
                                      [p for p in shared_pods if p.uid not in refused_uids], specs, plan_notes)

    out: list[PodAllocation] = []
    numa_load = {n: 0 for n in topology.numa_nodes}
    reclaim_millis = len(reclaimed_cpus) * 1000
    cap = max(int(reclaim.reclaimed_memory_bytes), s.reclaimed_memory_floor_bytes) if reclaim is not None else None
    for pod in ordered:
        spec = specs[pod.uid]
        notes: list[str] = []
        if spec.problem:
            notes.append(f"malformed annotation, treated as shared_cores: {spec.problem}")
        oom = _oom(spec)
        if pod.uid in dedicated:
            cpus = dedicated[pod.uid]
            if len(cpus) * 1000 != pod.cpu_request_millis:
                notes.append(f"CPU request {pod.cpu_request_millis}m rounded up to {len(cpus)} cpus "
                             f"({len(cpus) // topology.threads_per_core} whole core(s))")
            out.append(PodAllocation(pod.uid, pod.key, spec.level.value, "dedicated", cpus,
                                     frozenset(topology.numa_of(c) for c in cpus), oom_score_adj=oom,
                                     notes=tuple(notes)))
        elif spec.level is QosLevel.SYSTEM:
            cpus = reserve or share
            out.append(PodAllocation(pod.uid, pod.key, spec.level.value, "reserve" if reserve else "share",
                                     cpus, all_mems, oom_score_adj=oom))
        elif spec.level is QosLevel.RECLAIMED:
            limit = pod.cpu_limit_millis
            quota = min(limit, reclaim_millis) if limit else reclaim_millis
            mem_candidates = [v for v in (pod.memory_limit_bytes, cap) if v]
            mem_max = min(mem_candidates) if mem_candidates else None
            mem_high = int(mem_max * s.reclaimed_memory_high_ratio) if mem_max else None
            out.append(PodAllocation(pod.uid, pod.key, spec.level.value, "reclaim", reclaimed_cpus, all_mems,
                                     cpu_weight=RECLAIMED_CPU_WEIGHT, cpu_quota_millis=max(quota, 10),
                                     cpu_idle=True, memory_max_bytes=mem_max, memory_high_bytes=mem_high,
                                     oom_score_adj=oom))
        else:
            if pod.uid in refused_uids:
                notes.append("dedicated_cores refused; running in the share pool")
            pool_name = "share"
            if spec.cpuset_pool and pod.uid not in refused_uids:
                if f"share-{spec.cpuset_pool}" in named:
                    pool_name = f"share-{spec.cpuset_pool}"
                else:
                    notes.append(f"cpuset_pool {spec.cpuset_pool!r} has no room of its own; in the share pool")
            pool_cpus = named.get(pool_name, share)
            cpus, mems = pool_cpus, all_mems
            if spec.numa_binding and len(topology.numa_nodes) > 1:
                # bind to the node with the least shared demand bound so far that has cpus in the pool
                options = [n for n in topology.numa_nodes if pool_cpus & topology.numa_cpus[n]]
                if options:
                    node = min(options, key=lambda n: (numa_load[n], n))
                    numa_load[node] += pod.cpu_request_millis
                    cpus, mems = pool_cpus & topology.numa_cpus[node], frozenset({node})
                else:
                    notes.append("numa_binding: no NUMA node has share cpus; not bound")
            out.append(PodAllocation(pod.uid, pod.key, spec.level.value, pool_name, cpus, mems,
                                     oom_score_adj=oom, notes=tuple(notes)))
    pools = {"reserve": reserve, "share": share, "reclaim": reclaim_pool, **named}
    return CpuAllocation(pools=pools, dedicated=dedicated, pods=tuple(out), refused=tuple(refused),
                         problems=problems, notes=tuple(plan_notes))
