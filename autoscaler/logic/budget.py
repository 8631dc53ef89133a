"""The violation budget (issue 24 item 3, serve side): how often usage may exceed the request.

A share of 5-minute steps, from the VPA's `tidewise.io/violation-budget` annotation (a number in
(0, 0.5]) or the config's `vpa.violation_budget`. A malformed annotation never grants more than a
well-formed one: it is ignored and the config's budget serves, and the reason says so. The achieved
rate is measured on the last 24 h of the workload's own history against the request in force.
Pure: text and series in, numbers out.
"""
from __future__ import annotations

import math

import numpy as np
import pandas as pd

from predictor.timestamps import epoch_ns

MAX_BUDGET = 0.5  # above half the steps over the request, a "request" no longer describes the need
RATE_WINDOW = pd.Timedelta(hours=24)


def check_budget(value: object, what: str) -> float:
    """`value` as a budget in (0, 0.5]; ValueError naming `what` otherwise."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) \
            or not 0 < value <= MAX_BUDGET:
        raise ValueError(f"{what} {value!r}: a share of 5-minute steps in (0, {MAX_BUDGET:g}]")
    return float(value)


def budget_for(annotation: str | None, default: float) -> tuple[float, str]:
    """(the budget in force, why): the annotation when well-formed, else `default`."""
    if annotation is None:
        return default, f"violation budget {default:g} (vpa.violation_budget)"
    try:
        value = check_budget(float(annotation.strip()), "annotation")
    except ValueError:
        shown = annotation[:40]
        return default, (f"violation budget {default:g} (vpa.violation_budget): the annotation's {shown!r} is "
                         f"not a number in (0, {MAX_BUDGET:g}], ignored")
    return value, f"violation budget {value:g} (annotation)"


def violation_rate(usage_total: pd.Series, replicas: int, request_units: int | None, resource: str,
                   now: pd.Timestamp) -> float | None:
    """Share of the history's steps in the 24 h before `now` whose usage per replica (the workload's
    total / today's replicas) exceeded the request in force (millicpu or bytes); None without a
    request or a finite sample there."""
    if not request_units or request_units <= 0:
        return None
    # sorted: two binary searches, not two masks over 8 days (10,000 workloads a run)
    ns, end = epoch_ns(usage_total.index), pd.Timestamp(now).value
    lo, hi = np.searchsorted(ns, [end - RATE_WINDOW.value, end], side="right")
    recent = usage_total.to_numpy(dtype=float)[lo:hi]
    recent = recent[np.isfinite(recent)]
    if len(recent) == 0:
        return None
    per_pod = recent / max(1, int(replicas)) * (1000.0 if resource == "cpu" else 1.0)
    return int(np.count_nonzero(per_pod > request_units)) / len(recent)
