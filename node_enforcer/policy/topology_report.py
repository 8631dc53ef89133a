"""The node's micro-topology as Katalyst's CustomNodeResource `status.topologyZone`. Pure.

    Socket "0"
      └─ Numa "0": resources.capacity (cpu, memory), resources.allocatable (cpu less the reserve
         pool, memory, and the reclaimable amounts: reclaimed_millicpu from the reclaim pool's cores
         on that node, reclaimed_memory from the plan's per-NUMA split), allocations (each
         dedicated pod's cores and memory on that node, consumer `namespace/name/uid`),
         attributes (cpu list), siblings (the other NUMA nodes with their sysfs distance)

The centre (a NUMA-aware scheduler) reads it to place dedicated and NUMA-bound work. Quantities are
strings (cpu in cores, memory in bytes, reclaimed_millicpu in millicpu) and the whole status is
deterministic, so the publisher can compare it with what it wrote and write only on a change.
"""
from __future__ import annotations

from typing import Any, Mapping, Sequence

from contracts.qos import RECLAIMED_MEMORY, RECLAIMED_MILLICPU
from contracts.reclaim import ReclaimPlan
from node_enforcer.model.pod import Pod
from node_enforcer.model.topology import Topology, format_cpulist
from node_enforcer.policy.allocation import CpuAllocation


def _siblings(topology: Topology, node: int) -> list[dict[str, Any]]:
    row = topology.numa_distances.get(node)
    order = sorted(topology.numa_distances)
    out = []
    for other in topology.numa_nodes:
        if other == node:
            continue
        sib: dict[str, Any] = {"type": "Numa", "name": str(other)}
        if row is not None and len(row) == len(order) and other in order:
            sib["attributes"] = [{"name": "distance", "value": str(row[order.index(other)])}]
        out.append(sib)
    return out


def _allocations(node: int, topology: Topology, allocation: CpuAllocation,
                 pods: Mapping[str, Pod]) -> list[dict[str, Any]]:
    out = []
    for uid in sorted(allocation.dedicated):
        pod = pods.get(uid)
        cpus = frozenset(c for c in allocation.dedicated[uid] if topology.numa_of(c) == node)
        if pod is None or not cpus:
            continue
        nodes = {topology.numa_of(c) for c in allocation.dedicated[uid]}
        memory = sum(c.memory_request_bytes for c in pod.containers) // len(nodes)
        requests = {"cpu": str(len(cpus))} | ({"memory": str(memory)} if memory else {})
        out.append({"consumer": f"{pod.namespace}/{pod.name}/{pod.uid}", "requests": requests})
    return out


def _numa_zone(node: int, topology: Topology, allocation: CpuAllocation, pods: Mapping[str, Pod],
               reclaim: ReclaimPlan | None) -> dict[str, Any]:
    cpus = topology.numa_cpus[node]
    capacity = {"cpu": str(len(cpus))}
    if node in topology.numa_memory_bytes:
        capacity["memory"] = str(topology.numa_memory_bytes[node])
    allocatable = dict(capacity, cpu=str(len(cpus - allocation.pools.get("reserve", frozenset()))))
    allocatable[RECLAIMED_MILLICPU] = str(len(cpus & allocation.pools.get("reclaim", frozenset())) * 1000)
    if reclaim is not None:
        mem = reclaim.numa[node].memory_bytes if node in reclaim.numa else (
            0 if reclaim.numa else reclaim.reclaimed_memory_bytes // max(1, len(topology.numa_nodes)))
        allocatable[RECLAIMED_MEMORY] = str(mem)
    zone: dict[str, Any] = {"type": "Numa", "name": str(node),
                            "resources": {"capacity": capacity, "allocatable": allocatable},
                            "attributes": [{"name": "cpu_lists", "value": format_cpulist(cpus)}]}
    allocations = _allocations(node, topology, allocation, pods)
    if allocations:
        zone["allocations"] = allocations
    siblings = _siblings(topology, node)
    if siblings:
        zone["siblings"] = siblings
    return zone


def topology_status(topology: Topology, allocation: CpuAllocation, pods: Sequence[Pod],
                    reclaim: ReclaimPlan | None = None, policy: str = "none") -> dict[str, Any]:
    """The CNR `status` this node reports: `topologyPolicy` and the socket -> NUMA zone tree."""
    by_uid = {p.uid: p for p in pods}
    sockets: dict[int, set[int]] = {}
    for core in topology.cores:
        sockets.setdefault(core.socket, set()).add(core.numa)
    zones = []
    for socket in sorted(sockets):
        children = [_numa_zone(n, topology, allocation, by_uid, reclaim) for n in sorted(sockets[socket])]
        zones.append({"type": "Socket", "name": str(socket), "children": children})
    return {"topologyPolicy": policy, "topologyZone": zones}
