"""The node forecast: how busy one node's online pods will be over the next day, at a coarse step.

Serve writes it in the node's `tidewise.io/node-forecast` annotation, next to the reclaim plan
(`autoscaler/logic/node_forecast.py` builds it from the same per-pod forecasts); the scheduler
extender (`extender/`) reads it to prefer nodes whose headroom lasts over a pod's
expected lifetime. The reclaim plan says what batch work may borrow *now*; this says how the
online demand moves *later*, which the plan cannot.

Document (JSON object, integer units; arrays hold one value per step from `start`):

    {"schema": 1, "node": "n1", "generated": "...Z", "valid_until": "...Z", "start": "...Z",
     "step_seconds": 3600, "quantile": 0.9,
     "allocatable_millicpu": 16000, "allocatable_memory_bytes": 68719476736,
     "online_cpu_millicores": [...], "online_memory_bytes": [...],
     "reclaimable_millicpu": [...], "reclaimable_memory_bytes": [...],
     "pods_without_forecast": 0}

`online_*` is the highest forecast quantile of the summed online (non-reclaimed) pods' usage
within each step; `reclaimable_*` is what the reclaim plan's formula (allocatable - reserve -
demand - margin, floored at 0) gives for that step before smoothing. A reader refuses a document
that is malformed, of another schema or node, or past `valid_until` (`ForecastRefused` says why):
it then scores the node neutrally instead of trusting old numbers.
"""
from __future__ import annotations

import datetime as dt
import json
from dataclasses import dataclass
from typing import Any, Mapping, Sequence

from contracts.annotations import FORECAST_ANNOTATION
from contracts.errors import InputError
from contracts.reclaim import CLOCK_SKEW, utc

FORECAST_SCHEMA = 1
SERIES = ("online_cpu_millicores", "online_memory_bytes", "reclaimable_millicpu", "reclaimable_memory_bytes")
MAX_STEPS = 24 * 14  # a fortnight of hours: a larger array is refused as a malformed (or hostile) annotation


class ForecastRefused(InputError):
    """A node forecast that cannot be used (message says why)."""


@dataclass(frozen=True)
class NodeForecast:
    """One node's forecast, checked. Arrays are tuples of ints, one value per `step_seconds` from `start`."""

    node: str
    generated: dt.datetime
    valid_until: dt.datetime
    start: dt.datetime
    step_seconds: int
    quantile: float
    allocatable_millicpu: int
    allocatable_memory_bytes: int
    online_cpu_millicores: tuple[int, ...]
    online_memory_bytes: tuple[int, ...]
    reclaimable_millicpu: tuple[int, ...]
    reclaimable_memory_bytes: tuple[int, ...]
    pods_without_forecast: int = 0

    def steps_over(self, now: dt.datetime, seconds: float) -> slice:
        """The steps covering [now, now + seconds): at least the step holding `now`; empty when the
        forecast ends before `now`."""
        first = max(0, int((now - self.start).total_seconds() // self.step_seconds))
        last = int(-(-((now - self.start).total_seconds() + max(0.0, seconds)) // self.step_seconds))
        return slice(first, max(first + 1, min(last, len(self.online_cpu_millicores))))

    def covered_seconds(self, now: dt.datetime) -> float:
        """How far past `now` the forecast reaches (0 when it has ended)."""
        end = self.start + dt.timedelta(seconds=self.step_seconds * len(self.online_cpu_millicores))
        return max(0.0, (end - now).total_seconds())


def _stamp(t: dt.datetime) -> str:
    return t.astimezone(dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def forecast_document(f: NodeForecast) -> dict[str, Any]:
    """The forecast as the annotation carries it (module docstring)."""
    return {
        "schema": FORECAST_SCHEMA, "node": f.node, "generated": _stamp(f.generated),
        "valid_until": _stamp(f.valid_until), "start": _stamp(f.start), "step_seconds": f.step_seconds,
        "quantile": f.quantile, "allocatable_millicpu": f.allocatable_millicpu,
        "allocatable_memory_bytes": f.allocatable_memory_bytes,
        **{k: list(getattr(f, k)) for k in SERIES},
        "pods_without_forecast": f.pods_without_forecast,
    }


def forecast_annotation(f: NodeForecast) -> str:
    """The annotation's text: compact JSON with sorted keys (stable, so unchanged numbers compare equal)."""
    return json.dumps(forecast_document(f), sort_keys=True, separators=(",", ":"))


def _ints(doc: Mapping[str, Any], key: str) -> tuple[int, ...]:
    values = doc.get(key)
    if not isinstance(values, list) or not values or len(values) > MAX_STEPS:
        raise ValueError(f"{key} must be a list of 1 to {MAX_STEPS} integers")
    if any(isinstance(v, bool) or not isinstance(v, int) or v < 0 for v in values):
        raise ValueError(f"{key} must hold non-negative integers")
    return tuple(values)


def _parse(doc: Mapping[str, Any]) -> NodeForecast:
    series = {k: _ints(doc, k) for k in SERIES}
    if len({len(v) for v in series.values()}) != 1:
        raise ValueError(f"{', '.join(SERIES)} must have the same length")
    step = doc["step_seconds"]
    if isinstance(step, bool) or not isinstance(step, int) or step <= 0:
        raise ValueError(f"step_seconds must be a positive integer, not {step!r}")
    return NodeForecast(
        node=str(doc["node"]), generated=utc(doc["generated"]), valid_until=utc(doc["valid_until"]),
        start=utc(doc["start"]), step_seconds=step, quantile=float(doc["quantile"]),
        allocatable_millicpu=int(doc["allocatable_millicpu"]),
        allocatable_memory_bytes=int(doc["allocatable_memory_bytes"]),
        pods_without_forecast=int(doc.get("pods_without_forecast") or 0), **series)


def forecast_from_annotation(text: str | None, node: str, now: dt.datetime) -> NodeForecast:
    """Parse and check a node's `tidewise.io/node-forecast` annotation; `ForecastRefused` says why not."""
    return check_forecast(parse_forecast(text, node), now)


def parse_forecast(text: str | None, node: str) -> NodeForecast:
    """The annotation parsed and checked for everything but time (a reader may cache this by text);
    `ForecastRefused` says why not."""
    what = f"node {node} annotation {FORECAST_ANNOTATION}"
    if not text:
        raise ForecastRefused(f"{what}: not set (is `tidewise serve --apply` running with serve.reclaim enabled?)")
    try:
        doc = json.loads(text)
    except (ValueError, RecursionError) as exc:
        raise ForecastRefused(f"{what}: not JSON: {exc}") from None
    if not isinstance(doc, dict) or doc.get("schema") != FORECAST_SCHEMA:
        schema = doc.get("schema") if isinstance(doc, dict) else None
        raise ForecastRefused(f"{what}: schema {schema!r}, this reader reads {FORECAST_SCHEMA}")
    if doc.get("node") != node:
        raise ForecastRefused(f"{what}: the forecast is for node {doc.get('node')!r}")
    try:
        f = _parse(doc)
    except (KeyError, TypeError, ValueError, OverflowError) as exc:
        raise ForecastRefused(f"{what}: {type(exc).__name__}: {exc}") from None
    return f


def check_forecast(f: NodeForecast, now: dt.datetime) -> NodeForecast:
    """`f` when it may be used at `now`; `ForecastRefused` when it is from the future or expired."""
    what = f"node {f.node} annotation {FORECAST_ANNOTATION}"
    if f.generated > now + CLOCK_SKEW:
        raise ForecastRefused(f"{what}: generated {_stamp(f.generated)} is in the future (clock skew?)")
    if now >= f.valid_until:
        raise ForecastRefused(f"{what}: expired at {_stamp(f.valid_until)} (is `tidewise serve` running?)")
    return f


def peak(values: Sequence[int], where: slice) -> int:
    """The highest value in `where` (0 for an empty slice)."""
    return max(values[where], default=0)
