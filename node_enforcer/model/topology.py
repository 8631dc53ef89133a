"""The node's CPU and NUMA topology (what `collect.topology` reads from sysfs) and cpu lists.

A physical core is identified by (physical_package_id, core_id): core ids restart on every socket.
Its threads are the SMT siblings that the policy hands out together to dedicated pods.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Iterable


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
    numa_distances: dict[int, tuple[int, ...]] = field(default_factory=dict)  # node*/distance, where sysfs has it

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

    @classmethod
    def uniform(cls, threads: int, numa_nodes: int = 1, threads_per_core: int = 2) -> "Topology":
        """A machine known only by its counts (a Node's `capacity.cpu` and `tidewise.io/numa-nodes`),
        numbered as Linux numbers one: NUMA node n is socket n, its cores are consecutive, and a
        core's threads are `cores` apart (32 threads, 2 per core: core 0 holds cpus 0 and 16). For
        offline plans (the demo) where there is no sysfs to read; ValueError when the counts do not
        divide."""
        if threads <= 0 or numa_nodes <= 0 or threads_per_core <= 0 or threads % (numa_nodes * threads_per_core):
            raise ValueError(f"{threads} threads do not split into {numa_nodes} NUMA node(s) of "
                             f"{threads_per_core}-thread cores")
        n_cores = threads // threads_per_core
        per_numa = n_cores // numa_nodes
        cores = tuple(Core(socket=i // per_numa, core_id=i % per_numa, numa=i // per_numa,
                           cpus=tuple(i + t * n_cores for t in range(threads_per_core))) for i in range(n_cores))
        numa_cpus = {n: frozenset(c for core in cores if core.numa == n for c in core.cpus) for n in range(numa_nodes)}
        return cls(cores=cores, numa_cpus=numa_cpus)

    def summary(self) -> str:
        sockets = len({c.socket for c in self.cores})
        return (f"{sockets} socket(s), {len(self.numa_cpus)} NUMA node(s), {len(self.cores)} cores, "
                f"{len(self.cpus)} threads")
