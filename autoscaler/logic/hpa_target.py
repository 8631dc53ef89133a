"""VPA and HPA on one workload (issue 24 item 5): keep the HPA's scale point when the CPU request moves.

An HPA scaling on CPU *utilisation* scales when a pod's usage passes target x request. When the VPA
changes the request, the scale point moves with it unless the target moves the other way: the
target that keeps it is scale_point / new_request. Within the bounds a user sets it is written with
the request; outside them the CPU request is held (the caller says why). Pure: numbers in, numbers out.
"""
from __future__ import annotations

import math


def scale_point(target_utilization: float, request: float) -> float:
    """Usage per pod at which the HPA scales: target (a fraction, 0.7) x request (any unit)."""
    return target_utilization * request


def keep_scale_point(point: float, request: float, low: float, high: float) -> float | None:
    """The target utilisation (a fraction) that keeps `point` under `request`, or None when it
    falls outside [low, high] (or the inputs are not positive finite numbers): then the request
    must be held, or the HPA would scale somewhere else."""
    if not all(math.isfinite(v) and v > 0 for v in (point, request, low, high)) or low > high:
        return None
    target = point / request
    return target if low <= target <= high else None
