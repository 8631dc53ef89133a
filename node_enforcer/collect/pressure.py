"""Memory pressure from /proc: `meminfo` (MemTotal, MemAvailable) and memory PSI (`some avg10` of
/proc/pressure/memory, or of a cgroup's own `memory.pressure`), with the root injectable."""
from __future__ import annotations

import os
import re

from node_enforcer.model.pressure import Pressure


def read_pressure(proc_root: str = "/proc", psi_path: str | None = None) -> Pressure:
    """/proc/meminfo and memory PSI (`psi_path` may point at a cgroup's `memory.pressure`)."""
    with open(os.path.join(proc_root, "meminfo"), encoding="utf-8") as fh:
        info = {m.group(1): int(m.group(2)) * 1024 for m in re.finditer(r"^(\w+):\s+(\d+)", fh.read(), re.M)}
    psi = None
    path = psi_path or os.path.join(proc_root, "pressure/memory")
    try:
        with open(path, encoding="utf-8") as fh:
            m = re.search(r"^some\s.*?avg10=([0-9.]+)", fh.read(), re.M)
            psi = float(m.group(1)) if m else None
    except OSError:
        pass
    return Pressure(info.get("MemTotal", 0), info.get("MemAvailable", info.get("MemFree", 0)), psi)


def read_psi_some_avg10(path: str) -> float | None:
    """`some avg10` of a PSI file (/proc/pressure/io, a cgroup's io.pressure): the share of the
    last 10 s in which some task stalled; None where the file is missing or PSI is disabled."""
    try:
        with open(path, encoding="utf-8") as fh:
            m = re.search(r"^some\s.*?avg10=([0-9.]+)", fh.read(), re.M)
    except OSError:  # no such file, or EOPNOTSUPP when the kernel booted with psi=0
        return None
    return float(m.group(1)) if m else None
