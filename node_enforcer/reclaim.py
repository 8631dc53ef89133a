"""The reclaim plan the serving loop publishes for this node (`--reclaim-plan FILE`).

The file holds `predictor.types.ReclaimPlan.to_dict()`. It is read into `ReclaimInput`, a small
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
from typing import Any, Mapping

from predictor.errors import InputError

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
        start = dt.datetime.fromisoformat(self.window_start.replace("Z", "+00:00"))
        if start.tzinfo is None:
            start = start.replace(tzinfo=dt.timezone.utc)
        return now >= start + dt.timedelta(seconds=self.window_seconds)


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
