"""VPA and HPA on one workload, serve's side (issue 24 item 5): the HPA target utilisation to write
with a new CPU request, or a hold.

The scale point is the user's target x the pod CPU request at Tidewise's first rewrite (kept in the
HPA's annotations from then on, so later rewrites never drift from it). A new request gets the
target that keeps that point (`hpa_target.keep_scale_point`), within the user's bounds; outside them
the CPU request is held and the reason says why. Pure: numbers and annotation text in, a plan out.
"""
from __future__ import annotations

from dataclasses import dataclass

from autoscaler.logic.hpa_target import keep_scale_point, scale_point


@dataclass(frozen=True)
class ScalePlan:
    target_pct: int | None  # the averageUtilization to write with the request; None: hold the CPU request
    user_pct: int  # the user's own target utilisation (percent)
    anchor: int  # pod CPU request (millicpu) at Tidewise's first rewrite
    why: str


def _positive_int(text: str | None) -> int | None:
    try:
        value = int(str(text).strip())
    except (TypeError, ValueError):
        return None
    return value if value > 0 else None


def plan_scale_point(hpa_name: str, current_pct: int, kept: tuple[str | None, str | None], request_before: int,
                     request_new: int, bounds: tuple[float, float]) -> ScalePlan:
    """The plan for an HPA scaling on CPU utilisation at `current_pct` when the pod CPU request moves
    from `request_before` to `request_new` (millicpu); `kept`: the annotations (user's target, anchor),
    read only when both are well-formed (else this is the first rewrite: the user's target is the
    current one and the anchor the request before)."""
    user, anchor = (_positive_int(k) for k in kept)
    if user is None or anchor is None:
        user, anchor = current_pct, request_before
    point = scale_point(user / 100, anchor)
    low, high = bounds
    target = keep_scale_point(point, request_new, low, high)
    if target is None:
        need = point / request_new if request_new > 0 else float("inf")
        return ScalePlan(None, user, anchor, (
            f"HPA {hpa_name} scales on CPU utilisation at {user}% x {anchor}m = {point:.0f}m a pod: keeping that "
            f"under {request_new}m needs a target of {need:.0%}, outside vpa.hpa_target_bounds "
            f"{low:.0%}-{high:.0%}; CPU request held"))
    pct = max(1, round(target * 100))
    return ScalePlan(pct, user, anchor, (
        f"HPA {hpa_name} target {current_pct}% -> {pct}% with the request {request_new}m: its scale point stays "
        f"{user}% x {anchor}m = {point:.0f}m a pod (within {low:.0%}-{high:.0%})"))
