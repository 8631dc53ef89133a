"""CPU and NUMA topology from sysfs (`/sys/devices/system/{node,cpu}`), with the root injectable."""
from __future__ import annotations

import os
import re

from contracts.errors import InputError
from node_enforcer.model.topology import Core, Topology, parse_cpulist


def _read(path: str) -> str:
    with open(path, encoding="utf-8") as fh:
        return fh.read().strip()


def read_topology(sysfs_root: str = "/sys") -> Topology:
    """Read the online CPUs' topology under `sysfs_root` (a real `/sys` or a fixture tree)."""
    cpu_dir = os.path.join(sysfs_root, "devices/system/cpu")
    node_dir = os.path.join(sysfs_root, "devices/system/node")
    if not os.path.isdir(cpu_dir):
        raise InputError(f"sysfs root {sysfs_root}: no devices/system/cpu — pass the folder that holds /sys")
    online_path = os.path.join(cpu_dir, "online")
    if os.path.exists(online_path):
        online = parse_cpulist(_read(online_path))
    else:
        online = frozenset(int(n[3:]) for n in os.listdir(cpu_dir) if re.fullmatch(r"cpu\d+", n))
    numa_of: dict[int, int] = {}
    numa_cpus: dict[int, frozenset[int]] = {}
    numa_mem: dict[int, int] = {}
    distances: dict[int, tuple[int, ...]] = {}
    if os.path.isdir(node_dir):
        for name in sorted(os.listdir(node_dir)):
            m = re.fullmatch(r"node(\d+)", name)
            if not m:
                continue
            n = int(m.group(1))
            cpus = parse_cpulist(_read(os.path.join(node_dir, name, "cpulist"))) & online
            if not cpus:
                continue  # a memory-only node: nothing for the CPU policy
            numa_cpus[n] = cpus
            for cpu in cpus:
                numa_of[cpu] = n
            meminfo = os.path.join(node_dir, name, "meminfo")
            if os.path.exists(meminfo):
                mm = re.search(r"MemTotal:\s+(\d+)\s*kB", _read(meminfo))
                if mm:
                    numa_mem[n] = int(mm.group(1)) * 1024
            distance = os.path.join(node_dir, name, "distance")
            if os.path.exists(distance) and re.fullmatch(r"[\d ]+", _read(distance)):
                distances[n] = tuple(int(x) for x in _read(distance).split())
    if not numa_cpus:  # a kernel without NUMA: one node holding every CPU
        numa_cpus = {0: frozenset(online)}
        numa_of = {c: 0 for c in online}
    cores: dict[tuple[int, int], list[int]] = {}
    for cpu in sorted(online):
        topo = os.path.join(cpu_dir, f"cpu{cpu}", "topology")
        try:
            socket = int(_read(os.path.join(topo, "physical_package_id")))
            core_id = int(_read(os.path.join(topo, "core_id")))
        except (OSError, ValueError) as exc:
            raise InputError(f"sysfs root {sysfs_root}: cpu{cpu} topology unreadable: {exc}") from exc
        cores.setdefault((socket, core_id), []).append(cpu)
    out = []
    for (socket, core_id), threads in cores.items():
        nodes = {numa_of.get(c, 0) for c in threads}
        if len(nodes) != 1:
            raise InputError(f"sysfs root {sysfs_root}: core {socket}/{core_id} spans NUMA nodes {sorted(nodes)}")
        out.append(Core(socket=socket, core_id=core_id, numa=nodes.pop(), cpus=tuple(sorted(threads))))
    out.sort(key=lambda c: c.cpus[0])
    return Topology(cores=tuple(out), numa_cpus=numa_cpus, numa_memory_bytes=numa_mem, numa_distances=distances)
