"""Kubernetes resource quantities, exactly: CPU as integer millicpu, memory as integer bytes.

Decisions are computed in floats (cores, bytes) and rounded *up* once, at the edge, so that a
request is never smaller than what the forecast asked for; parsing goes through `Decimal` so that
"0.1", "100m" and "1e-1" are the same 100 millicpu.
"""
from __future__ import annotations

import math
import re
from decimal import Decimal, InvalidOperation

_SUFFIX = {
    "n": Decimal("1e-9"), "u": Decimal("1e-6"), "m": Decimal("1e-3"), "": Decimal(1),
    "k": Decimal(10) ** 3, "M": Decimal(10) ** 6, "G": Decimal(10) ** 9, "T": Decimal(10) ** 12,
    "P": Decimal(10) ** 15, "E": Decimal(10) ** 18,
    "Ki": Decimal(2) ** 10, "Mi": Decimal(2) ** 20, "Gi": Decimal(2) ** 30, "Ti": Decimal(2) ** 40,
    "Pi": Decimal(2) ** 50, "Ei": Decimal(2) ** 60,
}
_QUANTITY = re.compile(r"^([+-]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][+-]?\d+)?)(Ki|Mi|Gi|Ti|Pi|Ei|[numkMGTPE])?$")


def parse_quantity(value: str | int | float) -> Decimal:
    """`"250m"` -> 0.25, `"1Gi"` -> 1073741824, `2` -> 2; raises ValueError naming the text."""
    if isinstance(value, bool):
        raise ValueError(f"quantity {value!r} is a boolean, not a number")
    if isinstance(value, (int, float)):
        if isinstance(value, float) and not math.isfinite(value):
            raise ValueError(f"quantity {value!r} is not finite")
        return Decimal(str(value))
    m = _QUANTITY.match(str(value).strip())
    if not m:
        raise ValueError(f"quantity {value!r} does not parse (expected e.g. 250m, 1.5, 512Mi, 2G)")
    try:
        return Decimal(m.group(1)) * _SUFFIX[m.group(2) or ""]
    except InvalidOperation as exc:  # pragma: no cover - the regex admits only decimals
        raise ValueError(f"quantity {value!r} does not parse") from exc


def to_millicpu(value: str | int | float) -> int:
    """A CPU quantity as integer millicpu, rounded up (a request never shrinks by rounding)."""
    return int(math.ceil(parse_quantity(value) * 1000))


def to_bytes(value: str | int | float) -> int:
    return int(math.ceil(parse_quantity(value)))


def cores_to_millicpu(cores: float) -> int:
    if not math.isfinite(cores):
        raise ValueError(f"cpu {cores!r} is not finite")
    # round the float noise first (0.1 * 3 * 1000 = 300.00000000000006 must stay 300)
    return int(math.ceil(round(cores * 1000, 6)))


def bytes_ceil(value: float) -> int:
    if not math.isfinite(value):
        raise ValueError(f"memory {value!r} is not finite")
    return int(math.ceil(round(value, 3)))


def format_millicpu(millicpu: int) -> str:
    """300 -> `300m`, 2000 -> `2`: the shortest exact form the API server itself would print."""
    return str(millicpu // 1000) if millicpu % 1000 == 0 else f"{millicpu}m"


def format_bytes(n: int) -> str:
    """Exact: `Mi`/`Gi` only when divisible, else the plain integer."""
    for suffix, size in (("Gi", 2**30), ("Mi", 2**20), ("Ki", 2**10)):
        if n and n % size == 0:
            return f"{n // size}{suffix}"
    return str(n)


def to_units(resource: str, value: str | int | float) -> int:
    """Quantity -> the integer unit Tidewise decides in: millicpu for cpu, bytes for the rest."""
    return to_millicpu(value) if resource == "cpu" else to_bytes(value)


def format_units(resource: str, units: int) -> str:
    return format_millicpu(units) if resource == "cpu" else format_bytes(units)


def usage_to_units(resource: str, usage: float) -> int:
    """A usage figure as the series carry it (cores for cpu, bytes for memory) -> integer units."""
    return cores_to_millicpu(usage) if resource == "cpu" else bytes_ceil(usage)
