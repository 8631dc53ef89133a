"""Tidal node pools, the pure part: how many nodes online service needs per forecast step, and
which tide nodes to lend to batch or hand back (Katalyst `TideNodePool`, issue 17).

A pool's nodes split into reserved online, reserved offline and tide nodes (`split_pool`). Online
demand per step (requests the online pods will hold: forecast replicas x per-pod requests) becomes
nodes per step (`nodes_needed`); `plan_pool` keeps online every node the forecast needs within the
lead time (a node handed back later than that would arrive after the ramp), lends only nodes the
forecast leaves idle for lead + min_dwell (a node lent for less is a drain and a refill for
nothing), moves at most `max_moves` nodes a run, and picks the cheapest nodes to move: fewest
pods to evict. The studies' tide simulator calls the same functions.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Sequence

import numpy as np

from autoscaler.model.tide_pool import PoolSplit
from autoscaler.settings import TideSettings

LEND, RETURN = "lend", "return"


def nodes_needed(demand_per_step: np.ndarray, node_capacity: np.ndarray | Sequence[float] | float,
                 headroom: float) -> np.ndarray:
    """Nodes (int, per step) that hold `demand_per_step` (steps, or steps x resources, in the units
    of `node_capacity`, one node's allocatable per resource) with `headroom` on top: ceil of the
    most constrained resource. Fluid packing; the headroom stands for fragmentation. ValueError on
    a non-finite demand or a capacity that is not positive (no decision from either)."""
    d = np.asarray(demand_per_step, dtype=float)
    if d.ndim == 1:
        d = d[:, None]
    cap = np.broadcast_to(np.asarray(node_capacity, dtype=float), (d.shape[1],))
    if not np.all(np.isfinite(d)):
        raise ValueError(f"{int(np.sum(~np.isfinite(d)))} non-finite demand values")
    if not np.all(cap > 0) or not np.all(np.isfinite(cap)):
        raise ValueError(f"node capacity {cap.tolist()} must be positive")
    if headroom < 0:
        raise ValueError(f"headroom {headroom} must be >= 0")
    # 1e-9 absorbs float noise: demand of exactly 3 nodes is 3 nodes, not 4
    per_resource = np.ceil(np.maximum(d, 0.0) * (1.0 + headroom) / cap - 1e-9)
    return per_resource.max(axis=1).astype(int)


def reserve_count(value: int | str | None, total: int) -> int:
    """Katalyst's int-or-percent `reserve.online|offline`: a count, or "N%" of `total` rounded up
    (a reserve is a floor: rounding down would reserve nothing on a small pool); ValueError else."""
    if value is None:
        return 0
    if isinstance(value, bool):
        raise ValueError(f"reserve {value!r} is neither a count nor a percentage")
    if isinstance(value, int):
        n = value
    elif isinstance(value, str) and value.endswith("%") and value[:-1].strip().isdigit():
        n = math.ceil(total * int(value[:-1]) / 100)
    elif isinstance(value, str) and value.strip().isdigit():
        n = int(value)
    else:
        raise ValueError(f"reserve {value!r} is neither a count nor a percentage like '20%'")
    if n < 0:
        raise ValueError(f"reserve {value!r} is negative")
    return min(n, total)


def split_pool(names: Sequence[str], reserve_online: int | str | None, reserve_offline: int | str | None,
               previous: PoolSplit | None = None) -> PoolSplit:
    """Reserved online, reserved offline and tide nodes. Stable: nodes the previous status reserved
    keep their role while they are still in the pool and the count allows; the rest are filled by
    name, so a node joining or leaving moves at most itself and one other."""
    pool = sorted(set(names))
    n_on = reserve_count(reserve_online, len(pool))
    n_off = min(reserve_count(reserve_offline, len(pool)), len(pool) - n_on)
    prev = previous or PoolSplit([], [], [])
    online = [n for n in prev.online if n in pool][:n_on]
    offline = [n for n in prev.offline if n in pool and n not in online][:n_off]
    rest = [n for n in pool if n not in online and n not in offline]
    online += rest[: n_on - len(online)]
    rest = [n for n in rest if n not in online]
    offline += rest[: n_off - len(offline)]
    tide = [n for n in rest if n not in offline]
    return PoolSplit(sorted(online), sorted(offline), tide)


@dataclass(frozen=True)
class TideNode:
    """One tide node as the plan reads it: its side now, what a move would evict, and whether it
    may be lent (`blocked`: why not, e.g. a pod that cannot be moved; `moved_at`: epoch seconds of
    Tidewise's last move of it, None when never)."""

    name: str
    lent: bool
    online_pods: int = 0
    batch_pods: int = 0
    moved_at: float | None = None
    blocked: str | None = None


@dataclass(frozen=True)
class NodeMove:
    node: str
    action: str  # LEND or RETURN
    reason: str


@dataclass
class PoolPlan:
    """What one pool does this run: moves with reasons, nodes that would move but may not (held:
    node -> why), and the numbers behind it."""

    must_online: int  # tide nodes online service needs within the lead time
    keep_online: int  # tide nodes it needs within lead + min_dwell (fewer may be lent only above this)
    online_now: int
    moves: list[NodeMove] = field(default_factory=list)
    held: dict[str, str] = field(default_factory=dict)
    summary: str = ""


def online_targets(needed: np.ndarray, lead_steps: int, dwell_steps: int) -> tuple[int, int]:
    """(must, keep): the most nodes needed over steps [0, lead] and over [0, lead + dwell].
    ValueError when the forecast does not reach that far (no decision from a short forecast)."""
    n = np.asarray(needed)
    if len(n) < lead_steps + dwell_steps + 1:
        raise ValueError(f"forecast of {len(n)} steps does not cover lead + min_dwell "
                         f"({lead_steps} + {dwell_steps} steps)")
    return int(n[: lead_steps + 1].max()), int(n[: lead_steps + dwell_steps + 1].max())


def plan_pool(nodes: Sequence[TideNode], needed_tide: np.ndarray, *, lead_steps: int, dwell_steps: int,
              max_moves: int, now: float, min_dwell_seconds: float, return_slack: int = 0,
              needed_now: int | None = None, hold_after_return: float = 0.0) -> PoolPlan:
    """The moves of one pool's tide nodes. `needed_tide[i]`: tide nodes online service needs at
    step i (total needed minus the reserved online nodes; negative counts as 0). Hand-back wins over
    dwell (online service first); lending respects it. Candidates: fewest pods to evict, then name.
    Hysteresis: a shortfall of at most `return_slack` nodes is waited out unless `needed_now` (tide
    nodes the requests measured now need; None: unknown, so no waiting) is within the slack of
    the online side. `hold_after_return` (seconds): no node is lent while one handed back that
    recently serves online (the hand-back said the need was higher; lending another node undoes it: a drain
    and a refill for one wiggle of the need)."""
    if return_slack < 0:
        raise ValueError(f"return_slack {return_slack} must be >= 0")
    must, keep = online_targets(np.maximum(np.asarray(needed_tide), 0), lead_steps, dwell_steps)
    online = [n for n in nodes if not n.lent]
    lent = [n for n in nodes if n.lent]
    plan = PoolPlan(must, keep, len(online))
    if 0 < must - len(online) <= return_slack and needed_now is not None and needed_now < len(online) - return_slack:
        plan.summary = (f"forecast short by {must - len(online)} tide node(s), within the return slack of "
                        f"{return_slack}; need now {needed_now} of {len(online)} online: waiting")
    elif len(online) < must:
        short = must - len(online)
        why = f"forecast needs {must} tide node(s) online within the lead time, {len(online)} are"
        for n in sorted(lent, key=lambda x: (x.batch_pods, x.name))[:short]:
            if len(plan.moves) < max_moves:
                plan.moves.append(NodeMove(n.name, RETURN, f"{why}; {n.batch_pods} batch pod(s) to evict"))
            else:
                plan.held[n.name] = f"return: rate limit of {max_moves} moves a run ({why})"
        if short > len(lent):
            plan.summary = f"short of {short - len(lent)} tide node(s) even with all handed back"
    elif len(online) > keep and any(n.moved_at is not None and now - n.moved_at < hold_after_return for n in online):
        plan.summary = (f"{len(online) - keep} tide node(s) spare, but one was handed back under "
                        f"{hold_after_return:g} s ago: holding")
    elif len(online) > keep:
        spare = len(online) - keep
        why = f"forecast needs {keep} tide node(s) online over lead + min_dwell, {len(online)} are"
        for n in sorted(online, key=lambda x: (x.online_pods, x.name)):
            if spare == 0:
                break
            if n.blocked:
                plan.held[n.name] = f"lend: {n.blocked}"
                continue
            if n.moved_at is not None and now - n.moved_at < min_dwell_seconds:
                plan.held[n.name] = f"lend: moved {int(now - n.moved_at)} s ago, under min_dwell"
                continue
            spare -= 1
            if len(plan.moves) < max_moves:
                plan.moves.append(NodeMove(n.name, LEND, f"{why}; {n.online_pods} online pod(s) to drain"))
            else:
                plan.held[n.name] = f"lend: rate limit of {max_moves} moves a run ({why})"
    if not plan.summary:
        plan.summary = (f"{len(online)} tide node(s) online, {len(lent)} lent; need {must} within lead, "
                        f"{keep} within lead + min_dwell; {len(plan.moves)} move(s)")
    return plan


def forecast_margin(errors: Sequence[np.ndarray], quantile: float, min_count: int) -> np.ndarray:
    """Per lead bucket, the `quantile` of the forecaster's own past errors (actual - forecast, in the
    forecast's units): one margin that covers what the forecast missed at that lead, in place of a
    fixed forecast quantile and headroom stacked on each other. NaN for a bucket with fewer than
    `min_count` errors: no margin is read from a handful of errors (the caller falls back)."""
    if not 0 < quantile < 1:
        raise ValueError(f"quantile {quantile} must be between 0 and 1")
    out = np.full(len(errors), np.nan)
    for i, e in enumerate(errors):
        e = np.asarray(e, dtype=float)
        e = e[np.isfinite(e)]
        if len(e) >= max(min_count, 1):
            out[i] = float(np.quantile(e, quantile))
    return out
