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
pods' room on stale numbers.
"""
from __future__ import annotations

import datetime as dt
import json
from dataclasses import asdict, dataclass, field
from typing import Any, Mapping

from contracts.annotations import PLAN_ANNOTATION
from contracts.errors import InputError

PLAN_SCHEMA = 1
CLOCK_SKEW = dt.timedelta(minutes=5)  # a plan "generated" up to this far ahead of the agent's clock is accepted


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


def plan_from_dict(d: Mapping[str, Any], what: str = "reclaim plan") -> ReclaimPlan:
    """A plan from outside input (`ReclaimPlan.to_dict()` keys), checked; InputError names `what`."""
    try:
        numa = {int(k): NumaReclaim(int(v["millicpu"]), int(v["memory_bytes"]))
                for k, v in (d.get("numa") or {}).items()}
        demand = d.get("shared_demand_millicpu")
        plan = ReclaimPlan(
            node=str(d["node"]), window_start=str(d["window_start"]), window_seconds=int(d["window_seconds"]),
            reclaimed_millicpu=int(d["reclaimed_millicpu"]), reclaimed_memory_bytes=int(d["reclaimed_memory_bytes"]),
            shared_demand_millicpu=None if demand is None else int(demand), numa=numa,
        )
        plan.expired(dt.datetime.now(dt.timezone.utc))  # window_start must parse
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        raise InputError(f"{what}: not a ReclaimPlan ({type(exc).__name__}: {exc}); expected the keys of "
                         "ReclaimPlan.to_dict()") from None
    if plan.reclaimed_millicpu < 0 or plan.reclaimed_memory_bytes < 0:
        raise InputError(f"{what}: reclaimed amounts must not be negative")
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
    return plan


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
        raise InputError(f"{what}: expired at {until.astimezone(dt.timezone.utc):%Y-%m-%dT%H:%M:%SZ} (its window "
                         f"began {plan.window_start}; is `tidewise serve` running?)")
    if any(v.millicpu < 0 or v.memory_bytes < 0 for v in plan.numa.values()) or \
            sum(v.millicpu for v in plan.numa.values()) > plan.reclaimed_millicpu or \
            sum(v.memory_bytes for v in plan.numa.values()) > plan.reclaimed_memory_bytes:
        raise InputError(f"{what}: per-NUMA amounts are negative or exceed the node's total")
