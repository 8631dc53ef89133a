"""The reclaim plan: what batch (`reclaimed_cores`) work may borrow on one node over the next window.

Serve computes it from forecasts (autoscaler/logic/reclaim.py) and publishes it in the node's own
`tidewise.io/reclaim-plan` annotation (`plan_document`); the node agent reads it back
(`plan_from_annotation`), or offline from a file holding that annotation's JSON or the Node carrying
it (`document_in`, then `plan_from_document`), and sizes its `reclaim` CPU pool and memory caps from
it. One dataclass and one schema for both ends and every source, so they cannot drift apart; units
are exact (integer millicpu and bytes).

A plan the agent cannot trust — missing, malformed, another schema, another node's, not yet valid
or past its `valid_until` — is refused with an `InputError` saying why; the agent then uses
`zero_plan` (reclaim nothing beyond the pool's floor): it fails closed instead of lending the online
pods' room on stale numbers. An absurd plan grants no more than a well-formed one: a validity longer
than `MAX_PLAN_WINDOW` is honoured only that long after `generated_at`, and the agent bounds the
amounts by its node's capacity (`within_capacity`); each such cut is said in the plan's `reasons`.
"""
from __future__ import annotations

import datetime as dt
import json
import math
from dataclasses import asdict, dataclass, field, replace
from typing import Any, Mapping

from contracts.annotations import PLAN_ANNOTATION
from contracts.errors import InputError

PLAN_SCHEMA = 1
CLOCK_SKEW = dt.timedelta(minutes=5)  # a plan "generated" up to this far ahead of the agent's clock is accepted
# The longest validity a plan is honoured for, from its generated_at. Serve publishes its reclaim
# window (serve.reclaim.window, 1 h by default) and rewrites a plan once half of it is left; a day
# is the horizon of the forecast it publishes beside it. A plan "valid until 9999" from a forgery or
# a bug is cut here, so that reclaiming still stops within a day of serve's last write.
MAX_PLAN_WINDOW = dt.timedelta(hours=24)


@dataclass
class NumaReclaim:
    """Reclaimable resources of one NUMA node."""

    millicpu: int
    memory_bytes: int


@dataclass
class ReclaimPlan:
    """What batch work may borrow on one node from `window_start` for `window_seconds`."""

    node: str
    window_start: str  # ISO-8601 UTC
    window_seconds: int
    reclaimed_millicpu: int
    reclaimed_memory_bytes: int
    # forecast quantile of the shared (online) pool's CPU demand over the window, in millicpu
    shared_demand_millicpu: int | None = None
    numa: dict[int, NumaReclaim] = field(default_factory=dict)
    reasons: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["numa"] = {str(k): v for k, v in d["numa"].items()}
        return d

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "ReclaimPlan":
        """The inverse of `to_dict`, trusting its input (use `plan_from_dict` for outside input)."""
        d = dict(d)
        numa = {int(k): NumaReclaim(**v) for k, v in (d.pop("numa", None) or {}).items()}
        return cls(numa=numa, **d)

    def expired(self, now: dt.datetime) -> bool:
        return now >= utc(self.window_start) + dt.timedelta(seconds=self.window_seconds)


def utc(text: str) -> dt.datetime:
    """An ISO-8601 time (`Z` or an offset; naive read as UTC) as an aware datetime."""
    t = dt.datetime.fromisoformat(str(text).replace("Z", "+00:00"))
    return t.replace(tzinfo=dt.timezone.utc) if t.tzinfo is None else t


def zero_plan(node: str, now: dt.datetime) -> ReclaimPlan:
    """What a refused plan is replaced by: nothing to reclaim (the policy keeps its floor)."""
    return ReclaimPlan(node=node, window_start=now.strftime("%Y-%m-%dT%H:%M:%SZ"), window_seconds=0,
                       reclaimed_millicpu=0, reclaimed_memory_bytes=0)


def plan_document(plan: ReclaimPlan) -> dict[str, Any]:
    """The plan as the node's `tidewise.io/reclaim-plan` annotation carries it (docs/node-enforcer.md,
    "Reclaim plan").

    Valid from `generated_at` (the decision time) until `valid_until` (the end of the window the
    forecast covers): an agent that reads it later refuses it and reclaims nothing. `numa` is
    per NUMA node from per-zone usage; empty with `numa_layout` "unknown" when serve does not know
    the node's NUMA count (the agent then treats the node as one zone)."""
    until = utc(plan.window_start) + dt.timedelta(seconds=plan.window_seconds)
    return {
        "schema": PLAN_SCHEMA, "node": plan.node, "generated_at": plan.window_start,
        "valid_until": until.astimezone(dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "reclaimed_millicpu": plan.reclaimed_millicpu, "reclaimed_memory_bytes": plan.reclaimed_memory_bytes,
        "shared_demand_millicpu": plan.shared_demand_millicpu,
        "numa_layout": "known" if plan.numa else "unknown",
        "numa": {str(k): {"millicpu": v.millicpu, "memory_bytes": v.memory_bytes} for k, v in sorted(plan.numa.items())},
    }


class _NotWhole(ValueError):
    pass


def _whole(value: Any, name: str) -> int:
    """An amount of a plan as an integer: a JSON integer, a digit string or a float without a fraction
    (1.7e10); never a bool, a fraction, an infinity or NaN (json reads `Infinity` and `NaN`)."""
    if isinstance(value, float) and math.isfinite(value) and value.is_integer():
        return int(value)
    if isinstance(value, bool) or not isinstance(value, (int, str)):
        raise _NotWhole(f"{name} {value!r} is not a whole number; amounts are integers (millicpu, bytes)")
    return int(value)


def plan_from_dict(d: Mapping[str, Any], what: str = "reclaim plan") -> ReclaimPlan:
    """A plan from outside input (`ReclaimPlan.to_dict()` keys), checked; InputError names `what`."""
    try:
        numa = {int(k): NumaReclaim(_whole(v["millicpu"], f"numa {k} millicpu"),
                                    _whole(v["memory_bytes"], f"numa {k} memory_bytes"))
                for k, v in (d.get("numa") or {}).items()}
        demand = d.get("shared_demand_millicpu")
        plan = ReclaimPlan(
            node=str(d["node"]), window_start=str(d["window_start"]), window_seconds=int(d["window_seconds"]),
            reclaimed_millicpu=_whole(d["reclaimed_millicpu"], "reclaimed_millicpu"),
            reclaimed_memory_bytes=_whole(d["reclaimed_memory_bytes"], "reclaimed_memory_bytes"),
            shared_demand_millicpu=None if demand is None else _whole(demand, "shared_demand_millicpu"), numa=numa,
        )
        plan.expired(dt.datetime.now(dt.timezone.utc))  # window_start must parse
    except _NotWhole as exc:
        raise InputError(f"{what}: {exc}") from None
    except (KeyError, TypeError, ValueError, AttributeError, OverflowError) as exc:
        raise InputError(f"{what}: not a ReclaimPlan ({type(exc).__name__}: {exc}); expected the keys of "
                         "ReclaimPlan.to_dict()") from None
    if plan.reclaimed_millicpu < 0 or plan.reclaimed_memory_bytes < 0 or (plan.shared_demand_millicpu or 0) < 0:
        raise InputError(f"{what}: reclaimed amounts and the shared demand must not be negative")
    return plan


def _document(text: str | None, what: str) -> dict[str, Any]:
    if not text:
        raise InputError(f"{what}: not set (is `tidewise serve --apply` running with serve.reclaim enabled?)")
    try:
        doc = json.loads(text)
        if not isinstance(doc, dict):
            raise ValueError("not a JSON object")
    except ValueError as exc:
        raise InputError(f"{what}: not JSON: {exc}") from None
    return doc


def plan_from_annotation(text: str | None, node: str, now: dt.datetime) -> ReclaimPlan:
    """Parse and check the node's `tidewise.io/reclaim-plan` annotation; InputError says why it is refused."""
    what = f"node {node} annotation {PLAN_ANNOTATION}"
    plan = plan_from_document(_document(text, what), node, what)
    check_plan_in_force(plan, now, what, start_key="generated_at")
    return plan


def plan_from_document(doc: Mapping[str, Any], node: str | None, what: str) -> ReclaimPlan:
    """The plan in an annotation document (`plan_document`'s keys), checked for its schema, its node
    (any node when `node` is None) and its window, not yet against a clock (`check_plan_in_force`)."""
    if doc.get("schema") != PLAN_SCHEMA:
        raise InputError(f"{what}: schema {doc.get('schema')!r}, this agent reads {PLAN_SCHEMA}")
    if node is not None and doc.get("node") != node:
        raise InputError(f"{what}: the plan is for node {doc.get('node')!r}")
    try:
        generated, until = utc(doc["generated_at"]), utc(doc["valid_until"])
        window = int((until - generated).total_seconds())
        plan = plan_from_dict(dict(doc, window_start=doc["generated_at"], window_seconds=window), what)
    except (KeyError, TypeError, ValueError) as exc:
        raise InputError(f"{what}: {type(exc).__name__}: {exc}") from None
    if window <= 0:
        raise InputError(f"{what}: valid_until {doc['valid_until']} is not after generated_at {doc['generated_at']}")
    longest = int(MAX_PLAN_WINDOW.total_seconds())
    if window > longest:  # honoured as if it said generated_at + MAX_PLAN_WINDOW: never longer than serve's
        plan.window_seconds = longest
        plan.reasons.append(f"valid_until {doc['valid_until']} is more than {longest // 3600} h after generated_at "
                            f"{doc['generated_at']}: honoured only until {_iso(generated + MAX_PLAN_WINDOW)}")
    return plan


def _iso(t: dt.datetime) -> str:
    return t.astimezone(dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def document_in(data: Any, what: str) -> dict[str, Any]:
    """The annotation document held by `data`: the document itself (the annotation's JSON, as serve
    writes it) or a Node object carrying it in `metadata.annotations` (what `serve --sink file`
    writes under recommendations/node/, or `kubectl get node N -o json`). InputError names the fix."""
    fix = (f"give the {PLAN_ANNOTATION} annotation's JSON (schema {PLAN_SCHEMA}) or the Node carrying it "
           "(recommendations/node/<node>.yaml of `tidewise serve --sink file`, or `kubectl get node <node> -o yaml`)")
    if not isinstance(data, Mapping):
        raise InputError(f"{what}: a {type(data).__name__}, not a reclaim plan; {fix}")
    if data.get("kind") == "Node" or "metadata" in data:
        annotations = (data.get("metadata") or {}).get("annotations") or {}
        text = annotations.get(PLAN_ANNOTATION) if isinstance(annotations, Mapping) else None
        if not text:
            raise InputError(f"{what}: a Node without the {PLAN_ANNOTATION} annotation (was serve.reclaim enabled?); "
                             f"{fix}")
        return _document(str(text), f"{what}: annotation {PLAN_ANNOTATION}")
    if "window_start" in data and "schema" not in data:
        raise InputError(f"{what}: ReclaimPlan.to_dict() keys (window_start), a format no longer read; {fix}")
    return dict(data)


def check_plan_in_force(plan: ReclaimPlan, now: dt.datetime, what: str, start_key: str = "window_start") -> None:
    """The checks a plan passes before the agent uses it, read from the annotation or from a file
    alike; InputError says why it is refused. Its window must not be empty, must have begun (a plan
    generated more than CLOCK_SKEW ahead, say in 2099, is a wrong clock or a forgery that would
    never expire), must not have ended, and the per-NUMA amounts must fit the node's."""
    start = utc(plan.window_start)
    until = start + dt.timedelta(seconds=plan.window_seconds)
    if plan.window_seconds <= 0:
        raise InputError(f"{what}: its window ({plan.window_start} + {plan.window_seconds} s) is empty")
    if start > now + CLOCK_SKEW:
        raise InputError(f"{what}: {start_key} {plan.window_start} is in the future (clock skew?)")
    if now >= until:
        cut = "".join(f"; {r}" for r in plan.reasons)  # a validity cut to MAX_PLAN_WINDOW says so
        raise InputError(f"{what}: expired at {until.astimezone(dt.timezone.utc):%Y-%m-%dT%H:%M:%SZ} (its window "
                         f"began {plan.window_start}; is `tidewise serve` running?){cut}")
    if any(v.millicpu < 0 or v.memory_bytes < 0 for v in plan.numa.values()) or \
            sum(v.millicpu for v in plan.numa.values()) > plan.reclaimed_millicpu or \
            sum(v.memory_bytes for v in plan.numa.values()) > plan.reclaimed_memory_bytes:
        raise InputError(f"{what}: per-NUMA amounts are negative or exceed the node's total")


@dataclass(frozen=True)
class NodeCapacity:
    """What a node has (its online CPUs and its memory), for `within_capacity`."""

    millicpu: int
    memory_bytes: int | None  # None: unknown, so nothing can be lent
    numa_millicpu: Mapping[int, int] = field(default_factory=dict)  # each NUMA node's CPUs
    numa_memory_bytes: Mapping[int, int] = field(default_factory=dict)  # each NUMA node's memory, where known


def within_capacity(plan: ReclaimPlan, cap: NodeCapacity) -> ReclaimPlan:
    """`plan` with no amount above what the node has: the totals at most the node's CPUs and memory,
    each NUMA node's at most its own, a NUMA node the machine lacks dropped. A plan lending 1e30
    bytes then lends the node's memory, never more than a well-formed plan could; each cut is added
    to `reasons`. Unknown memory lends none (fail closed)."""
    reasons = list(plan.reasons)
    cpu = min(plan.reclaimed_millicpu, cap.millicpu)
    mem = min(plan.reclaimed_memory_bytes, cap.memory_bytes if cap.memory_bytes is not None else 0)
    if cpu < plan.reclaimed_millicpu:
        reasons.append(f"reclaimed_millicpu {plan.reclaimed_millicpu} is more than the node's {cap.millicpu}m: "
                       "cut to it")
    if mem < plan.reclaimed_memory_bytes:
        reasons.append(f"reclaimed_memory_bytes {plan.reclaimed_memory_bytes} is more than the node's memory "
                       f"({'unknown' if cap.memory_bytes is None else cap.memory_bytes}): cut to {mem}")
    numa: dict[int, NumaReclaim] = {}
    for n, z in sorted(plan.numa.items()):
        if cap.numa_millicpu and n not in cap.numa_millicpu:
            reasons.append(f"NUMA node {n} is not on this machine: nothing lent there")
            continue
        numa[n] = NumaReclaim(min(z.millicpu, cap.numa_millicpu.get(n, cpu)),
                              min(z.memory_bytes, cap.numa_memory_bytes.get(n, mem)))
        if numa[n] != z:
            reasons.append(f"NUMA node {n}: {z.millicpu}m and {z.memory_bytes} bytes are more than it has: "
                           f"cut to {numa[n].millicpu}m and {numa[n].memory_bytes} bytes")
    for attr, total in (("millicpu", cpu), ("memory_bytes", mem)):
        zones = sum(getattr(z, attr) for z in numa.values())
        if zones > total:  # zones cut to the node's total each may sum above it: scaled down to it
            for z in numa.values():
                setattr(z, attr, getattr(z, attr) * total // zones)
    return replace(plan, reclaimed_millicpu=cpu, reclaimed_memory_bytes=mem, numa=numa, reasons=reasons)
