"""`tidewise replay vpa --hpa-target-utilization U` (issue 24 item 5): an HPA on the workload's CPU
utilisation keeps its scale point as the replayed request moves (`autoscaler.logic.hpa_target`)."""
from __future__ import annotations

import numpy as np
import pandas as pd

from autoscaler.logic.hpa_target import keep_scale_point, scale_point


def keep_hpa_scale_point(dec: pd.DataFrame, target: float, low: float, high: float) -> pd.DataFrame:
    """`dec` (a CPU resource's decisions) with an `hpa_target` column: the HPA target utilisation
    that keeps the scale point `target` x the first request (`autoscaler.logic.hpa_target`); where
    it would leave [low, high] the request is held at the last one that kept it, and the reason
    says so. Rows without a request keep NaN."""
    out = dec.copy()
    targets, hpa = out["target"].to_numpy(dtype=float).copy(), []
    point: float | None = None
    held = float("nan")
    reasons = list(out["reason"]) if "reason" in out else None
    for i, request in enumerate(targets):
        if not np.isfinite(request):
            hpa.append(np.nan)
            continue
        if point is None or not np.isfinite(held):
            point, held = scale_point(target, request), float(request)
        kept = keep_scale_point(point, request, low, high)
        if kept is None:
            targets[i] = held
            kept = point / held
            if reasons is not None:
                reasons[i] = (f"{reasons[i]}; CPU request held at {held:g}: the HPA would need target "
                              f"{point / request:.2f} to keep its scale point, outside {low:g}..{high:g}")
        else:
            held = float(request)
        hpa.append(kept)
    out["target"], out["hpa_target"] = targets, hpa
    if reasons is not None:
        out["reason"] = reasons
    return out
