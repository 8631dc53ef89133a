"""Kubernetes resource quantities, exactly: CPU as integer millicpu, memory as integer bytes.

One parser for both halves: serve (requests, VPA objects) and the node agent (pod specs) both go
through `parse_quantity`, which reads the number as a `Decimal`, so "0.1", "100m" and "1e-1" are
the same 100 millicpu with no float drift. Decisions are computed in floats (cores, bytes) and
rounded *up* once, at the edge, so that a request is never smaller than what the forecast asked for.

`parse_cpu_millis` / `parse_memory_bytes` are the agent's stricter reading of a pod's requests and
limits: no negative amounts, CPU only in cores or m/u/n, memory never in m/u/n (a memory amount in
millibytes, or a CPU amount in Gi, is a field mix-up to refuse, not to guess). Before the merge the
agent parsed through `float` and truncated bytes; it now rounds a fractional byte count up, like
serve (the exact reading wins: "1.5" bytes is 2, never less than asked).
"""
from __future__ import annotations

import functools
import math
import re
from decimal import Decimal, InvalidOperation
from typing import Any

# binary sizes, the units the Kubernetes `Ki`/`Mi`/`Gi` suffixes name: defined once for every package
KIB, MIB, GIB = 2**10, 2**20, 2**30

_SUFFIX = {
    "n": Decimal("1e-9"), "u": Decimal("1e-6"), "m": Decimal("1e-3"), "": Decimal(1),
    "k": Decimal(10) ** 3, "M": Decimal(10) ** 6, "G": Decimal(10) ** 9, "T": Decimal(10) ** 12,
    "P": Decimal(10) ** 15, "E": Decimal(10) ** 18,
    "Ki": Decimal(2) ** 10, "Mi": Decimal(2) ** 20, "Gi": Decimal(2) ** 30, "Ti": Decimal(2) ** 40,
    "Pi": Decimal(2) ** 50, "Ei": Decimal(2) ** 60,
}
_QUANTITY = re.compile(r"^([+-]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][+-]?\d+)?)(Ki|Mi|Gi|Ti|Pi|Ei|[numkMGTPE])?$")
_CPU_SUFFIXES = ("", "m", "u", "n")
_SUB_UNIT = ("m", "u", "n")


def _split(value: str | int | float) -> tuple[Decimal, str]:
    """The number and the suffix of a quantity; ValueError naming the text when it does not parse."""
    if isinstance(value, bool):
        raise ValueError(f"quantity {value!r} is a boolean, not a number")
    if isinstance(value, (int, float)):
        if isinstance(value, float) and not math.isfinite(value):
            raise ValueError(f"quantity {value!r} is not finite")
        return Decimal(str(value)), ""
    m = _QUANTITY.match(str(value).strip())
    if not m:
        raise ValueError(f"quantity {value!r} does not parse (expected e.g. 250m, 1.5, 512Mi, 2G)")
    try:
        return Decimal(m.group(1)), m.group(2) or ""
    except InvalidOperation as exc:  # pragma: no cover - the regex admits only decimals
        raise ValueError(f"quantity {value!r} does not parse") from exc


def parse_quantity(value: str | int | float) -> Decimal:
    """`"250m"` -> 0.25, `"1Gi"` -> 1073741824, `2` -> 2; raises ValueError naming the text."""
    if isinstance(value, str):
        return _parse_text(value)
    number, suffix = _split(value)
    return number * _SUFFIX[suffix]


@functools.lru_cache(maxsize=4096)
def _parse_text(value: str) -> Decimal:
    """A text quantity, read once: serve reads ~100,000 a run at 10,000 workloads, a few distinct ones
    (Decimal is immutable; a text that does not parse raises each time, nothing is cached)."""
    number, suffix = _split(value)
    return number * _SUFFIX[suffix]


def to_millicpu(value: str | int | float) -> int:
    """A CPU quantity as integer millicpu, rounded up (a request never shrinks by rounding)."""
    return int(math.ceil(parse_quantity(value) * 1000))


def to_bytes(value: str | int | float) -> int:
    """A memory quantity as integer bytes, rounded up."""
    return int(math.ceil(parse_quantity(value)))


def parse_cpu_millis(value: object) -> int:
    """A pod's CPU request or limit -> millicpu, rounded up: `500m` -> 500, `1.5` -> 1500, `2` -> 2000."""
    try:
        number, suffix = _split(value if isinstance(value, (int, float)) else str(value))
    except ValueError:
        raise ValueError(f"CPU quantity {value!r} does not parse (use 500m, 1, 1.5)") from None
    if suffix not in _CPU_SUFFIXES:
        raise ValueError(f"CPU quantity {value!r}: suffix {suffix!r} is not a CPU unit")
    if number < 0:
        raise ValueError(f"CPU quantity {value!r} is negative")
    return int(math.ceil(number * _SUFFIX[suffix] * 1000))


def parse_memory_bytes(value: object) -> int:
    """A pod's memory request or limit -> bytes, rounded up: `512Mi`, `1G`, `1e9`, `1000`."""
    try:
        number, suffix = _split(value if isinstance(value, (int, float)) else str(value))
    except ValueError:
        raise ValueError(f"memory quantity {value!r} does not parse (use 512Mi, 1Gi, 1G)") from None
    if suffix in _SUB_UNIT or number < 0:
        raise ValueError(f"memory quantity {value!r} does not parse (use 512Mi, 1Gi, 1G)")
    return int(math.ceil(number * _SUFFIX[suffix]))


def cores_to_millicpu(cores: float) -> int:
    """Cores (a float decision) -> millicpu, rounded up once float noise is removed."""
    if not math.isfinite(cores):
        raise ValueError(f"cpu {cores!r} is not finite")
    # round the float noise first (0.1 * 3 * 1000 = 300.00000000000006 must stay 300)
    return int(math.ceil(round(cores * 1000, 6)))


def bytes_ceil(value: float) -> int:
    """Bytes (a float decision) -> integer bytes, rounded up once float noise is removed."""
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


def readable_units(resource: str, units: float) -> str:
    """Units (millicpu for cpu, bytes for the rest) for a reader, to 3 significant figures: 850 ->
    `850m`, 1141 -> `1.14 cores`, 1787859657 -> `1.67 GiB` (the exact quantity is `format_units`)."""
    if not math.isfinite(units):
        return str(units)
    if resource == "cpu":
        milli = _three(units)
        return f"{milli}m" if abs(float(milli.replace(",", ""))) < 1000 else f"{_three(units / 1000)} cores"
    for suffix, size in (("TiB", 2**40), ("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if abs(units) >= size:
            return f"{_three(units / size)} {suffix}"
    return f"{_three(units)} B"


def _three(v: float) -> str:
    """3 significant figures, never in exponent form: 1.666 -> 1.67, 1234.5 -> 1235 -> `1,230`."""
    if v == 0:
        return "0"
    rounded = round(v, 2 - math.floor(math.log10(abs(v))))
    return f"{rounded:,.{max(0, 2 - math.floor(math.log10(abs(rounded))))}f}"


def to_units(resource: str, value: str | int | float) -> int:
    """Quantity -> the integer unit Tidewise decides in: millicpu for cpu, bytes for the rest."""
    return to_millicpu(value) if resource == "cpu" else to_bytes(value)


def format_units(resource: str, units: int) -> str:
    """Integer units (millicpu for cpu, bytes for the rest) -> the exact quantity text."""
    return format_millicpu(units) if resource == "cpu" else format_bytes(units)


class AbsurdScale(ValueError):
    """A figure no Kubernetes object can carry sensibly: a unit mistake in the input (nanocores read
    as cores, bytes as KiB). `autoscaler.logic.hpa.TooManyReplicas` is the replica-count case."""


# The largest machines sold have ~2,000 cores and ~32 TiB: a container using a million cores or a
# PiB is a unit mistake, and a request built on it (3.3e300 cores once went out with exit 0) is none.
MAX_CPU_CORES = 1e6
MAX_MEMORY_BYTES = float(2**50)
# A series in any other unit (replicas, a business metric, an id naming no resource) is held to the
# largest bound above: no usage figure in any unit comes near 1 PiB's count, and a value past it
# (1e300 among values of 4) breaks the arithmetic of every model (squares overflow past ~1e154).
MAX_ANY_UNIT = MAX_MEMORY_BYTES


def usage_limit(resource: str | None) -> tuple[float, str]:
    """(bound, what it is) of a usage figure: cores for cpu, bytes for memory, any unit for None."""
    if resource == "cpu":
        return MAX_CPU_CORES, f"{MAX_CPU_CORES:,.0f} cores, more than any machine holds"
    if resource == "memory":
        return MAX_MEMORY_BYTES, f"{MAX_MEMORY_BYTES:,.0f} bytes (1 PiB), more than any machine holds"
    return MAX_ANY_UNIT, f"{MAX_ANY_UNIT:,.0f} (1 PiB in bytes), more than any usage figure in any unit"


def usage_scale_problem(resource: str | None, value: float) -> str | None:
    """Why `value` cannot be a usage of `resource` (the module's bounds, either sign; nan and inf
    too), or None when it can."""
    limit, what = usage_limit(resource)
    if abs(value) <= limit:
        return None
    units = " (cores for cpu, bytes for memory)" if resource in ("cpu", "memory") else ""
    return f"value {value:.3g} is {'below -' if value < 0 else 'above '}{what}; check the units of the values{units}"


def usage_to_units(resource: str, usage: float) -> int:
    """A usage figure as the series carry it (cores for cpu, bytes for memory) -> integer units."""
    return cores_to_millicpu(usage) if resource == "cpu" else bytes_ceil(usage)
