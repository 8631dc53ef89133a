"""Block devices as the I/O policy sees them: a name and the `major:minor` that cgroup files key on."""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class BlockDevice:
    name: str  # vda, nvme0n1 (a whole disk, never a partition: the kernel throttles whole disks)
    major: int
    minor: int
    virtual: bool = False  # loop, zram, ram, dm-*: under /sys/devices/virtual

    @property
    def key(self) -> str:
        """`254:0`, how blkio.throttle.* and io.max name a device."""
        return f"{self.major}:{self.minor}"
