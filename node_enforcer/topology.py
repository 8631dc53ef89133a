"""CPU and NUMA topology from sysfs (`/sys/devices/system/{node,cpu}`), with the root injectable.

A physical core is identified by (physical_package_id, core_id): core ids restart on every socket.
Its threads are the SMT siblings that the policy hands out together to dedicated pods.
"""
from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from typing import Iterable

from predictor.errors import InputError


def parse_cpulist(text: str) -> frozenset[int]:
    """`0-3,8,10-11` -> {0,1,2,3,8,10,11}; an empty string is the empty set."""
    out: set[int] = set()
    for part in text.strip().split(","):
        part = part.strip()
        if not part:
            continue
        m = re.fullmatch(r"(\d+)(?:-(\d+))?", part)
        if not m:
            raise ValueError(f"cpu list {text!r}: {part!r} is not N or N-M")
        lo = int(m.group(1))
        hi = int(m.group(2)) if m.group(2) is not None else lo
        if hi < lo:
            raise ValueError(f"cpu list {text!r}: range {part!r} runs backwards")
        out.update(range(lo, hi + 1))
    return frozenset(out)


def format_cpulist(cpus: Iterable[int]) -> str:
    """{0,1,2,3,8} -> `0-3,8` (the kernel's own format, so that reads compare equal)."""
    ordered = sorted(set(cpus))
    parts: list[str] = []
    i = 0
    while i < len(ordered):
        j = i
        while j + 1 < len(ordered) and ordered[j + 1] == ordered[j] + 1:
            j += 1
        parts.append(str(ordered[i]) if i == j else f"{ordered[i]}-{ordered[j]}")
        i = j + 1
    return ",".join(parts)


@dataclass(frozen=True)
class Core:
    """One physical core: its socket, its per-socket core id, its NUMA node and its threads."""

    socket: int
    core_id: int
    numa: int
    cpus: tuple[int, ...]  # SMT siblings, ascending


@dataclass(frozen=True)
class Topology:
    cores: tuple[Core, ...]  # ordered by lowest thread id
    numa_cpus: dict[int, frozenset[int]]
    numa_memory_bytes: dict[int, int] = field(default_factory=dict)

    @property
    def cpus(self) -> frozenset[int]:
        return frozenset(c for core in self.cores for c in core.cpus)

    @property
    def numa_nodes(self) -> tuple[int, ...]:
        return tuple(sorted(self.numa_cpus))

    @property
    def threads_per_core(self) -> int:
        return max((len(c.cpus) for c in self.cores), default=1)

    def core_of(self, cpu: int) -> Core:
        return self._core_index()[cpu]

    def numa_of(self, cpu: int) -> int:
        return self._core_index()[cpu].numa

    def _core_index(self) -> dict[int, Core]:
        idx = self.__dict__.get("_idx")
        if idx is None:
            idx = {cpu: core for core in self.cores for cpu in core.cpus}
            object.__setattr__(self, "_idx", idx)
        return idx

    def summary(self) -> str:
        sockets = len({c.socket for c in self.cores})
        return (f"{sockets} socket(s), {len(self.numa_cpus)} NUMA node(s), {len(self.cores)} cores, "
                f"{len(self.cpus)} threads")


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
    return Topology(cores=tuple(out), numa_cpus=numa_cpus, numa_memory_bytes=numa_mem)
