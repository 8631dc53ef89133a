"""The scores of a replay, Tidewise against the reference it replaces: for the VPA the mean
relative slack and the violation rate of the request, for the HPA the mean replicas and the share
of minutes over the target utilisation (`autoscaler.logic.hpa.hpa_scores`)."""
from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from autoscaler.logic.hpa import hpa_scores

REFERENCE = {"vpa": "stock VPA (p90 + 15%, 24 h half-life)", "hpa": "reactive HPA"}
COLUMNS = {"vpa": ("slack", "violation"), "hpa": ("mean replicas", "over target")}


def vpa_scores(usage: pd.Series, request: pd.Series) -> tuple[float, float]:
    """(mean relative slack (request - usage) / request, negative counted as 0; violation rate)."""
    u, r = usage.to_numpy(), request.to_numpy()
    ok = ~(np.isnan(u) | np.isnan(r)) & (r > 0)
    if not ok.any():
        return float("nan"), float("nan")
    slack = np.clip((r[ok] - u[ok]) / r[ok], 0, None)
    return float(slack.mean()), float(np.mean(u[ok] > r[ok]))


def request_in_force(result: dict[str, Any]) -> pd.Series:
    """A VPA replay's target at every usage sample (the last decision before it)."""
    use = result["usage"]
    return result["decisions"].set_index("timestamp")["target"].reindex(use.index, method="ffill")


def series_scores(kind: str, key: str, r: dict[str, Any], target_utilization: float,
                  tolerance: float) -> dict[str, Any]:
    """One series' row: Tidewise's scores and the reference's (columns prefixed `ref `)."""
    if kind == "vpa":
        t, ref = vpa_scores(r["usage"], request_in_force(r)), vpa_scores(r["usage"], r["reference"])
    else:
        t = hpa_scores(r["demand"], r["serving"], r["per"], target_utilization, tolerance)
        ref = hpa_scores(r["demand"], r["reference"], r["per"], target_utilization, tolerance)
    a, b = COLUMNS[kind]
    row = {"series": key, a: t[0], b: t[1], f"ref {a}": ref[0], f"ref {b}": ref[1]}
    if kind == "vpa" and r.get("budget") is not None:  # the achieved rate (violation) against its budget
        row["budget"] = float(r["budget"])
    return row


def budget_line(per_series: list[dict[str, Any]]) -> str:
    """`N of M series over their violation budget B` (empty when no row carries a budget)."""
    rows = [r for r in per_series if "budget" in r and np.isfinite(r.get("violation", np.nan))]
    if not rows:
        return ""
    over = sum(r["violation"] > r["budget"] for r in rows)
    budgets = sorted({r["budget"] for r in rows})
    return f"{over} of {len(rows)} series over their violation budget {'/'.join(f'{b:g}' for b in budgets)}"


def scores(kind: str, result: dict[str, dict[str, Any]], target_utilization: float = 0.7,
           tolerance: float = 0.1) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(summary: Tidewise and the reference, each score averaged over the series; per-series rows).
    `target_utilization` and `tolerance` are the HPA's (unused for the VPA)."""
    rows = [series_scores(kind, key, r, target_utilization, tolerance) for key, r in result.items()]
    if not rows:
        return [], rows
    cols = COLUMNS[kind]

    def mean(c: str) -> float:
        return float(np.nanmean([r[c] for r in rows]))

    summary = [{"policy": "tidewise", **{c: mean(c) for c in cols}},
               {"policy": REFERENCE[kind], **{c: mean(f"ref {c}") for c in cols}}]
    return summary, rows
