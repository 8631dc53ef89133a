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

Reclaimed pods' memory caps come from `batch_memory`: together they never exceed what the plan lends.

Deterministic and stable: pods are visited in a fixed order; a dedicated pod keeps the cores it
already holds (from the previous allocation or the checkpoint) while they stay valid; the reclaim
pool takes the highest cores, so that a change of size moves only the cores at its edge.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping, Sequence

from contracts.qos import QosLevel
from contracts.reclaim import ReclaimPlan
from node_enforcer.model.pod import Pod
from node_enforcer.model.qos import QosSource, QosSpec, parse_qos
from node_enforcer.model.topology import Topology
from node_enforcer.policy.allocation import (OOM_SCORE_ADJ_MIN, RECLAIMED_CPU_WEIGHT, CpuAllocation, PodAllocation,
                                             PolicySettings, Refusal)
from node_enforcer.policy.batch_memory import batch_memory
from node_enforcer.policy.cores import CorePlanner, named_share_pools


class _Annotations:
    """The default `QosSource`: the annotations as they are, nothing logged."""

    def resolve(self, pod: Pod) -> QosSpec:
        return parse_qos(pod.annotations)


@dataclass(frozen=True)
class _Pools:
    """The cores carved out before each pod is placed (what `_place` reads)."""

    reserve: frozenset[int]
    share: frozenset[int]
    reclaim: frozenset[int]
    reclaimed_cpus: frozenset[int]  # where reclaimed pods run: the reclaim pool, or the share pool
    named: dict[str, frozenset[int]]
    dedicated: dict[str, frozenset[int]]
    refused_uids: frozenset[str]
    memory_caps: Mapping[str, int]  # reclaimed pod uid -> its memory.max (batch_memory); empty without a plan


def _order(pod: Pod) -> tuple[int, str, str, str, str]:
    return (-pod.priority, pod.created or "~", pod.namespace, pod.name, pod.uid)


def _oom(spec: QosSpec) -> int | None:
    if spec.oom_priority is None:
        return None
    return max(OOM_SCORE_ADJ_MIN, min(1000, -spec.oom_priority))


def _dedicated(planner: CorePlanner, ordered: Sequence[Pod], specs: Mapping[str, QosSpec],
               previous: Mapping[str, frozenset[int]]) -> tuple[dict[str, frozenset[int]], list[Refusal]]:
    """Exclusive cores per dedicated pod, and the requests that cannot be met."""
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
    return dedicated, refused


def _carve(topology: Topology, s: PolicySettings, planner: CorePlanner, ordered: Sequence[Pod],
           specs: Mapping[str, QosSpec], reclaim: ReclaimPlan | None, previous: Mapping[str, frozenset[int]],
           memory_caps: Mapping[str, int]) -> tuple[_Pools, list[Refusal], list[str]]:
    """Reserve, dedicated, share/reclaim and named pools, in that order; (pools, refusals, notes)."""
    reserve = planner.reserve()
    dedicated, refused = _dedicated(planner, ordered, specs, previous)
    refused_uids = frozenset(r.uid for r in refused)
    shared_pods = [p for p in ordered if specs[p.uid].level is QosLevel.SHARED or p.uid in refused_uids]
    demand = sum(p.cpu_request_millis for p in shared_pods)
    if reclaim is not None and reclaim.shared_demand_millicpu is not None:
        demand = max(demand, int(reclaim.shared_demand_millicpu))
    share, reclaim_pool = planner.reclaim(demand, reclaim)
    notes = list(planner.notes)
    if not share:
        share = reserve
        notes.append("no core left for the share pool: shared pods run on the reserve pool")
    reclaimed_cpus = reclaim_pool or share  # floor 0 and no room: batch runs on the share pool at weight 1
    named, share = named_share_pools(topology, s, share, reclaim_pool,
                                     [p for p in shared_pods if p.uid not in refused_uids], specs, notes)
    return (_Pools(reserve, share, reclaim_pool, reclaimed_cpus, named, dedicated, refused_uids, memory_caps),
            refused, notes)


def _reclaimed(pod: Pod, spec: QosSpec, pools: _Pools, all_mems: frozenset[int], s: PolicySettings) -> PodAllocation:
    """A batch pod: the reclaim pool at the lowest weight, idle, with a CPU quota and a memory cap."""
    reclaim_millis = len(pools.reclaimed_cpus) * 1000
    limit = pod.cpu_limit_millis
    quota = min(limit, reclaim_millis) if limit else reclaim_millis
    # its share of the plan (at most its own limit); without a plan, its own limit
    mem_max = pools.memory_caps.get(pod.uid, pod.memory_limit_bytes or None)
    mem_high = None if mem_max is None else int(mem_max * s.reclaimed_memory_high_ratio)
    return PodAllocation(pod.uid, pod.key, spec.level.value, "reclaim", pools.reclaimed_cpus, all_mems,
                         cpu_weight=RECLAIMED_CPU_WEIGHT, cpu_quota_millis=max(quota, 10),
                         cpu_idle=True, memory_max_bytes=mem_max, memory_high_bytes=mem_high,
                         oom_score_adj=_oom(spec))


def _shared(pod: Pod, spec: QosSpec, pools: _Pools, topology: Topology, numa_load: dict[int, int],
            notes: list[str]) -> PodAllocation:
    """A shared pod: its pool (plain or named), bound to one NUMA node when asked."""
    refused = pod.uid in pools.refused_uids
    if refused:
        notes.append("dedicated_cores refused; running in the share pool")
    pool_name = "share"
    if spec.cpuset_pool and not refused:
        if f"share-{spec.cpuset_pool}" in pools.named:
            pool_name = f"share-{spec.cpuset_pool}"
        else:
            notes.append(f"cpuset_pool {spec.cpuset_pool!r} has no room of its own; in the share pool")
    pool_cpus = pools.named.get(pool_name, pools.share)
    cpus, mems = pool_cpus, frozenset(topology.numa_nodes)
    if spec.numa_binding and len(topology.numa_nodes) > 1:
        # bind to the node with the least shared demand bound so far that has cpus in the pool
        options = [n for n in topology.numa_nodes if pool_cpus & topology.numa_cpus[n]]
        if options:
            node = min(options, key=lambda n: (numa_load[n], n))
            numa_load[node] += pod.cpu_request_millis
            cpus, mems = pool_cpus & topology.numa_cpus[node], frozenset({node})
        else:
            notes.append("numa_binding: no NUMA node has share cpus; not bound")
    return PodAllocation(pod.uid, pod.key, spec.level.value, pool_name, cpus, mems,
                         oom_score_adj=_oom(spec), notes=tuple(notes))


def _place(pod: Pod, spec: QosSpec, pools: _Pools, topology: Topology, s: PolicySettings,
           numa_load: dict[int, int]) -> PodAllocation:
    """One pod's allocation in the pools carved for it."""
    all_mems = frozenset(topology.numa_nodes)
    notes: list[str] = []
    if spec.problem:
        notes.append(f"malformed annotation, treated as {spec.level.value}: {spec.problem}")
    if pod.uid in pools.dedicated:
        cpus = pools.dedicated[pod.uid]
        if len(cpus) * 1000 != pod.cpu_request_millis:
            notes.append(f"CPU request {pod.cpu_request_millis}m rounded up to {len(cpus)} cpus "
                         f"({len(cpus) // topology.threads_per_core} whole core(s))")
        return PodAllocation(pod.uid, pod.key, spec.level.value, "dedicated", cpus,
                             frozenset(topology.numa_of(c) for c in cpus), oom_score_adj=_oom(spec),
                             notes=tuple(notes))
    if spec.level is QosLevel.SYSTEM:
        return PodAllocation(pod.uid, pod.key, spec.level.value, "reserve" if pools.reserve else "share",
                             pools.reserve or pools.share, all_mems, oom_score_adj=_oom(spec))
    if spec.level is QosLevel.RECLAIMED:
        return _reclaimed(pod, spec, pools, all_mems, s)
    return _shared(pod, spec, pools, topology, numa_load, notes)


def plan(
    topology: Topology,
    pods: Sequence[Pod],
    reclaim: ReclaimPlan | None = None,
    settings: PolicySettings | None = None,
    previous: Mapping[str, frozenset[int]] | None = None,
    resolver: QosSource | None = None,
    root_memory: bool = True,
) -> CpuAllocation:
    """Compute the node's allocation. `previous` maps pod uid -> cpus it holds as dedicated;
    `root_memory`: the reclaimed root's memory cap may hold batch as a whole (else the plan is split)."""
    s = settings or PolicySettings()
    resolver = resolver or _Annotations()
    specs = {p.uid: resolver.resolve(p) for p in pods}
    problems = tuple((p.key, specs[p.uid].problem or "") for p in pods if specs[p.uid].problem)
    ordered = sorted(pods, key=_order)
    reclaimed = {p.uid for p in pods if specs[p.uid].level is QosLevel.RECLAIMED}
    memory = batch_memory(pods, reclaimed, reclaim, s.reclaimed_memory_floor_bytes, root_memory)
    pools, refused, notes = _carve(topology, s, CorePlanner(topology, s), ordered, specs, reclaim, previous or {},
                                   {} if memory is None else memory.caps)
    if memory is not None:
        notes.append(memory.note)
    numa_load = {n: 0 for n in topology.numa_nodes}
    out = tuple(_place(pod, specs[pod.uid], pools, topology, s, numa_load) for pod in ordered)
    named_pools = {"reserve": pools.reserve, "share": pools.share, "reclaim": pools.reclaim, **pools.named}
    return CpuAllocation(pools=named_pools, dedicated=pools.dedicated, pods=out, refused=tuple(refused),
                         problems=problems, notes=tuple(notes), batch_memory=memory)
