"""The reclaim plan the serving loop publishes for this node.

Two sources. In a cluster (`--reclaim-plan-from api`, what deploy/enforcer-daemonset.yaml runs):
`tidewise serve --apply` writes it to the node's own `tidewise.io/reclaim-plan` annotation
(autoscaler/output/objects.py `plan_document`: schema version, generated-at, valid-until, totals
and per-NUMA amounts) and the agent reads it with a `get` of its Node. Offline (`--reclaim-plan
FILE`): a file holding `predictor.types.ReclaimPlan.to_dict()`.

A plan the agent cannot trust — missing, malformed, another schema, another node's, not yet valid
or past its `valid_until` — is refused and replaced by `zero_plan` (reclaim nothing beyond the
pool's floor): the agent fails closed instead of lending the online pods' room on stale numbers.

The annotation's name and schema are copied here from autoscaler/output/objects.py, since the agent
must not import autoscaler; tests/integration/test_plan_delivery.py checks that both ends agree. It is read into `ReclaimInput`, a small
frozen copy of the fields the policy uses, rather than into `ReclaimPlan` itself: importing
`predictor.types` pulls in numpy and pandas (about 120 MiB of resident memory), which the
per-node agent must not pay (its budget is 80 MiB). The policy accepts either type.
"""
from __future__ import annotations

import datetime as dt
import json
import logging
import os
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping

from predictor.errors import InputError, TidewiseError

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class NumaInput:
    millicpu: int
    memory_bytes: int


@dataclass(frozen=True)
class ReclaimInput:
    node: str
    window_start: str
    window_seconds: int
    reclaimed_millicpu: int
    reclaimed_memory_bytes: int
    shared_demand_millicpu: int | None = None
    numa: Mapping[int, NumaInput] = field(default_factory=dict)

    def expired(self, now: dt.datetime) -> bool:
        return now >= _utc(self.window_start) + dt.timedelta(seconds=self.window_seconds)


PLAN_ANNOTATION = "tidewise.io/reclaim-plan"
PLAN_SCHEMA = 1
CLOCK_SKEW = dt.timedelta(minutes=5)  # a plan "generated" up to this far ahead of our clock is accepted


def _utc(text: str) -> dt.datetime:
    t = dt.datetime.fromisoformat(str(text).replace("Z", "+00:00"))
    return t.replace(tzinfo=dt.timezone.utc) if t.tzinfo is None else t


def zero_plan(node: str, now: dt.datetime) -> ReclaimInput:
    """What a refused plan is replaced by: nothing to reclaim (the policy keeps its floor)."""
    return ReclaimInput(node=node, window_start=now.strftime("%Y-%m-%dT%H:%M:%SZ"), window_seconds=0,
                        reclaimed_millicpu=0, reclaimed_memory_bytes=0)


def plan_from_annotation(text: str | None, node: str, now: dt.datetime) -> ReclaimInput:
    """Parse and check the node's `tidewise.io/reclaim-plan` annotation; InputError says why it is refused."""
    what = f"node {node} annotation {PLAN_ANNOTATION}"
    if not text:
        raise InputError(f"{what}: not set (is `tidewise serve --apply` running with serve.reclaim enabled?)")
    try:
        doc = json.loads(text)
        if not isinstance(doc, dict):
            raise ValueError("not a JSON object")
    except ValueError as exc:
        raise InputError(f"{what}: not JSON: {exc}") from None
    if doc.get("schema") != PLAN_SCHEMA:
        raise InputError(f"{what}: schema {doc.get('schema')!r}, this agent reads {PLAN_SCHEMA}")
    if doc.get("node") != node:
        raise InputError(f"{what}: the plan is for node {doc.get('node')!r}")
    try:
        generated, until = _utc(doc["generated_at"]), _utc(doc["valid_until"])
        window = int((until - generated).total_seconds())
        plan = reclaim_from_dict(dict(doc, window_start=doc["generated_at"], window_seconds=window), what)
    except (KeyError, TypeError, ValueError) as exc:
        raise InputError(f"{what}: {type(exc).__name__}: {exc}") from None
    if window <= 0:
        raise InputError(f"{what}: valid_until {doc['valid_until']} is not after generated_at {doc['generated_at']}")
    if generated > now + CLOCK_SKEW:
        raise InputError(f"{what}: generated_at {doc['generated_at']} is in the future (clock skew?)")
    if now >= until:
        raise InputError(f"{what}: expired at {doc['valid_until']} (is `tidewise serve` running?)")
    if any(v.millicpu < 0 or v.memory_bytes < 0 for v in plan.numa.values()) or \
            sum(v.millicpu for v in plan.numa.values()) > plan.reclaimed_millicpu or \
            sum(v.memory_bytes for v in plan.numa.values()) > plan.reclaimed_memory_bytes:
        raise InputError(f"{what}: per-NUMA amounts are negative or exceed the node's total")
    return plan


def reclaim_from_dict(d: Mapping[str, Any], what: str = "reclaim plan") -> ReclaimInput:
    try:
        numa = {int(k): NumaInput(int(v["millicpu"]), int(v["memory_bytes"]))
                for k, v in (d.get("numa") or {}).items()}
        demand = d.get("shared_demand_millicpu")
        plan = ReclaimInput(
            node=str(d["node"]), window_start=str(d["window_start"]), window_seconds=int(d["window_seconds"]),
            reclaimed_millicpu=int(d["reclaimed_millicpu"]), reclaimed_memory_bytes=int(d["reclaimed_memory_bytes"]),
            shared_demand_millicpu=None if demand is None else int(demand), numa=numa,
        )
        plan.expired(dt.datetime.now(dt.timezone.utc))  # window_start must parse
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        raise InputError(f"{what}: not a ReclaimPlan ({type(exc).__name__}: {exc}); expected the keys of "
                         "predictor.types.ReclaimPlan.to_dict()") from None
    if plan.reclaimed_millicpu < 0 or plan.reclaimed_memory_bytes < 0:
        raise InputError(f"{what}: reclaimed amounts must not be negative")
    return plan


def load_reclaim_plan(path: str, node: str | None = None) -> ReclaimInput:
    if not os.path.exists(path):
        raise InputError(f"--reclaim-plan {path}: no such file")
    try:
        with open(path, encoding="utf-8") as fh:
            data = json.load(fh)
    except ValueError as exc:
        raise InputError(f"--reclaim-plan {path}: not JSON: {exc}") from exc
    plan = reclaim_from_dict(data, f"--reclaim-plan {path}")
    if node and plan.node != node:
        raise InputError(f"--reclaim-plan {path} is for node {plan.node!r}, not {node!r}")
    return plan


def reclaim_loader(path: str | None, node: str,
                   now: Callable[[], dt.datetime] = lambda: dt.datetime.now(dt.timezone.utc),
                   annotations: Callable[[], Mapping[str, str]] | None = None,
                   ) -> Callable[[], ReclaimInput | None]:
    """Re-read the plan every pass (the publisher rewrites it): from the node's annotation when
    `annotations` is given (it returns this Node's annotations), else from the file at `path`.

    Fails closed: a plan that is missing, unreadable, malformed, another node's or expired is
    refused with a warning (once per distinct reason) and replaced by `zero_plan` — the reclaim pool
    keeps only its floor. No source at all (no path, no annotations) means no plan: None."""
    last: list[str] = [""]

    def warn(msg: str) -> None:  # once per distinct problem, not every pass
        log.log(logging.DEBUG if msg == last[0] else logging.WARNING, msg)
        last[0] = msg

    def read(at: dt.datetime) -> ReclaimInput:
        if annotations is not None:
            return plan_from_annotation(annotations().get(PLAN_ANNOTATION), node, at)
        p = load_reclaim_plan(path or "", node or None)
        if p.expired(at):
            raise TidewiseError(f"reclaim plan {path}: its window ({p.window_start} + {p.window_seconds} s) "
                                "has passed")
        return p

    def load() -> ReclaimInput | None:
        if annotations is None and not path:
            return None
        at = now()
        try:
            p = read(at)
        except TidewiseError as exc:
            warn(f"reclaim plan refused, reclaiming nothing beyond the floor: {exc}")
            return zero_plan(node, at)
        last[0] = ""
        return p

    return load
