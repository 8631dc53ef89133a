"""Carving the machine's physical cores into pools, for `policy.plan`: the reserve, each dedicated
pod's exclusive cores (NUMA-aware, best fit, refusals with reasons), the share/reclaim split and the
named `share-<cpuset_pool>` pools."""
from __future__ import annotations

import math
from typing import Iterable, Mapping, Sequence

from contracts.reclaim import ReclaimPlan
from node_enforcer.model.pod import Pod
from node_enforcer.model.qos import QosSpec
from node_enforcer.model.topology import Core, Topology
from node_enforcer.policy.allocation import PolicySettings


def _threads(cores: Iterable[Core]) -> frozenset[int]:
    return frozenset(c for core in cores for c in core.cpus)


def _cores_needed(millis: int, tpc: int) -> int:
    return max(1, math.ceil(math.ceil(millis / 1000) / tpc))


class CorePlanner:
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

    def reclaim(self, demand_millis: int, reclaim: ReclaimPlan | None) -> tuple[frozenset[int], frozenset[int]]:
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
            quota = {int(k): int(v.millicpu) // 1000 // tpc for k, v in reclaim.numa.items()}
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


def named_share_pools(topology: Topology, s: PolicySettings, share: frozenset[int], reclaim_pool: frozenset[int],
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
