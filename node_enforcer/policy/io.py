"""Disk I/O limits for reclaimed (batch) pods: pure, devices + pods + online I/O pressure in.

Static limits come from the settings (`io:` — per device, for every reclaimed pod) and may be
overridden per pod by the `tidewise.io/io-limits` annotation (a JSON object with `read_bps`,
`write_bps` — bytes/s as numbers or quantities like "50Mi" — and `read_iops`, `write_iops`). They
are dynamic too: when the online pods' I/O pressure (PSI `some avg10` of `io.pressure`) rises from
`psi_low` to `psi_high`, the bandwidth and IOPS limits shrink linearly to `min_factor` of their
static value (stateless, so a pass depends only on what it reads). A reclaimed pod with no static
limit gets the `pressure_*` fallback limits while pressure is above `psi_low`: batch may use an
idle disk fully, but never while online pods wait on it. `weight` (io.weight / blkio.weight) puts
batch behind everyone in the proportional scheduler at all times.

A malformed annotation is reported on the pod's plan and the settings' limits apply instead.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping, Sequence

from contracts.annotations import IO_ANNOTATION
from contracts.errors import InputError
from contracts.quantity import parse_memory_bytes
from node_enforcer.model.devices import BlockDevice
from contracts.qos import json_object_annotation

LIMIT_KEYS = ("read_bps", "write_bps", "read_iops", "write_iops")


@dataclass(frozen=True)
class IoSettings:
    enabled: bool = False  # off by default: a node's disks differ, limits need the operator's numbers
    devices: tuple[str, ...] = ()  # extra device names to limit even when virtual (e.g. dm-0 for LVM roots)
    exclude_devices: tuple[str, ...] = ()  # physical disks to leave alone
    read_bps: int | None = None  # per reclaimed pod and device, bytes/s; None = no static limit
    write_bps: int | None = None
    read_iops: int | None = None
    write_iops: int | None = None
    weight: int | None = 10  # v2 io.weight (1..10000, default 100): batch gets 1/10 of an online pod's share
    psi_path: str | None = None  # online I/O pressure; None = <proc_root>/pressure/io (the whole node)
    psi_low: float = 10.0  # % some avg10: below it, static limits as set
    psi_high: float = 40.0  # at and above it, limits at `min_factor` of their static value
    min_factor: float = 0.25
    # under pressure, a pod without static limits gets these (bytes/s, IOPS): 10 MiB/s, 100 IOPS
    pressure_bps: int = 10 << 20
    pressure_iops: int = 100

    def check(self) -> None:
        """InputError naming the first bad value (settings are read from a file)."""
        for key in LIMIT_KEYS + ("pressure_bps", "pressure_iops"):
            v = getattr(self, key)
            if v is not None and (isinstance(v, bool) or not isinstance(v, int) or v <= 0):
                raise InputError(f"enforcer.io.{key} {v!r}: give a positive integer (bytes/s or IOPS)")
        if self.weight is not None and not (isinstance(self.weight, int) and 1 <= self.weight <= 10000):
            raise InputError(f"enforcer.io.weight {self.weight!r}: give an integer in 1..10000 (io.weight scale)")
        for key in ("psi_low", "psi_high", "min_factor"):
            v = getattr(self, key)
            if isinstance(v, bool) or not isinstance(v, (int, float)):
                raise InputError(f"enforcer.io.{key} {v!r}: give a number")
        for key in ("devices", "exclude_devices"):
            v = getattr(self, key)
            if not isinstance(v, (list, tuple)) or not all(isinstance(n, str) and n for n in v):
                raise InputError(f"enforcer.io.{key} {v!r}: give a list of device names (sda, nvme0n1)")
        if not 0 <= self.psi_low < self.psi_high <= 100:
            raise InputError(f"enforcer.io psi_low {self.psi_low} / psi_high {self.psi_high}: need 0 <= low < high <= 100")
        if not 0 < self.min_factor <= 1:
            raise InputError(f"enforcer.io.min_factor {self.min_factor}: give a fraction in (0, 1]")


@dataclass(frozen=True)
class IoLimit:
    """One device's limits for one pod; None = unlimited."""

    device: str  # major:minor
    read_bps: int | None = None
    write_bps: int | None = None
    read_iops: int | None = None
    write_iops: int | None = None


@dataclass(frozen=True)
class PodIo:
    uid: str
    key: str
    limits: tuple[IoLimit, ...]
    weight: int | None
    factor: float  # what pressure did to the static limits (1.0 = nothing)
    problem: str | None = None  # a malformed annotation, when there was one


def parse_io_annotation(raw: str) -> dict[str, int]:
    """The `tidewise.io/io-limits` value -> {key: positive int}; ValueError naming what is wrong."""
    data = json_object_annotation(raw, IO_ANNOTATION, LIMIT_KEYS)
    out = {}
    for key, value in data.items():
        try:
            n = value if isinstance(value, int) and not isinstance(value, bool) else (
                parse_memory_bytes(value) if isinstance(value, str) and key.endswith("bps") else int(str(value)))
        except (ValueError, TypeError, InputError):
            n = -1
        if n <= 0:
            raise ValueError(f"{IO_ANNOTATION} {key}={value!r}: give a positive number"
                             + (" or a quantity like 50Mi" if key.endswith("bps") else ""))
        out[key] = n
    return out


def pressure_factor(psi: float | None, s: IoSettings) -> float:
    """1.0 at or below `psi_low` (or without PSI), `min_factor` at `psi_high`, linear between."""
    if psi is None or psi <= s.psi_low:
        return 1.0
    if psi >= s.psi_high:
        return s.min_factor
    return 1.0 - (psi - s.psi_low) / (s.psi_high - s.psi_low) * (1.0 - s.min_factor)


def _scaled(static: Mapping[str, int | None], factor: float, s: IoSettings) -> dict[str, int | None]:
    if factor >= 1.0:
        return dict(static)
    out: dict[str, int | None] = {}
    for key in LIMIT_KEYS:
        base = static.get(key) or (s.pressure_bps if key.endswith("bps") else s.pressure_iops)
        out[key] = max(1, int(base * factor))
    return out


def plan_io(reclaimed: Sequence[tuple[str, str, Mapping[str, str]]], devices: Sequence[BlockDevice],
            psi: float | None, s: IoSettings) -> list[PodIo]:
    """Per reclaimed pod (uid, key, annotations): its limits on every device, pressure applied
    (a limit without a static value starts from `pressure_bps` / `pressure_iops`)."""
    if not s.enabled:
        return []
    factor = pressure_factor(psi, s)
    out = []
    for uid, key, annotations in reclaimed:
        static: dict[str, int | None] = {k: getattr(s, k) for k in LIMIT_KEYS}
        problem = None
        raw = annotations.get(IO_ANNOTATION)
        if raw is not None:
            try:
                static.update(parse_io_annotation(raw))
            except ValueError as exc:
                problem = f"{exc}; the settings' limits apply"
        limits = _scaled(static, factor, s)
        out.append(PodIo(uid, key, tuple(IoLimit(d.key, **limits) for d in devices), s.weight, factor, problem))
    return out
