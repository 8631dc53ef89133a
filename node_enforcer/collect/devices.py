"""The node's block devices from sysfs (`/sys/block`), for the I/O limits of reclaimed pods.

`/sys/block` lists whole disks only (partitions live below them), each with its `dev` file
(`major:minor`). A device whose sysfs path runs through `devices/virtual` (loop, zram, ram, most
dm-*) is skipped unless named in `include`: throttling a loop device throttles nothing real, and a
zram swap device must never be slowed for the pods that page to it. A configured name that does not
exist is reported, never fatal (the agent runs on nodes with different disks).
"""
from __future__ import annotations

import os
import re
from typing import Sequence

from node_enforcer.model.devices import BlockDevice


def read_block_devices(sysfs_root: str = "/sys", include: Sequence[str] = (),
                       exclude: Sequence[str] = ()) -> tuple[list[BlockDevice], list[str]]:
    """(devices to limit, problems): physical whole disks plus `include`, minus `exclude`."""
    block = os.path.join(sysfs_root, "block")
    problems: list[str] = []
    try:
        names = sorted(os.listdir(block))
    except OSError as exc:
        return [], [f"{block}: {exc.strerror or exc}; no device gets an I/O limit"]
    out = []
    for name in names:
        path = os.path.join(block, name)
        try:
            with open(os.path.join(path, "dev"), encoding="utf-8") as fh:
                m = re.fullmatch(r"(\d+):(\d+)", fh.read().strip())
        except OSError:
            m = None
        if m is None:
            problems.append(f"{path}/dev unreadable; device {name} skipped")
            continue
        virtual = "/devices/virtual/" in os.path.realpath(path)
        if name in exclude or (virtual and name not in include):
            continue
        out.append(BlockDevice(name, int(m.group(1)), int(m.group(2)), virtual))
    known = set(names)
    problems += [f"I/O device {n!r} named in the settings is not in {block}; ignored" for n in include
                 if n not in known]
    return out, problems
