"""A memory-pressure reading of the node (what `collect.pressure` reads, `policy.eviction` judges)."""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Pressure:
    mem_total_bytes: int
    mem_available_bytes: int
    psi_some_avg10: float | None  # None where the kernel has no PSI
