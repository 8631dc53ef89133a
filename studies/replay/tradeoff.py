"""The trade-off curves of a replay (issue 12 item 6): where Tidewise sits at every cost, not at one point.

VPA: mean relative slack against violation rate; HPA: over-target share against mean replicas. The
curves are the references run at other settings, as the reference scorer traces them
(../shared/eval/bench_decisions.py): the stock VPA recommender at percentiles 0.8-0.99 x margins
1.0-1.4 (one line per percentile), the reactive HPA at target utilisations 0.75-0.45 (scored against
the real target), plus the perfect-foresight point (VPA: each hour's true maximum; HPA: replicas at
exactly the demand) and Tidewise's own points. `replay_curves` computes them on a replay's input
(the `--report` page); `scorer_curves` reads them from the scorer's --json (BENCHMARKS.md); both
draw with `plot_tradeoff`.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, Mapping

import numpy as np
import pandas as pd

from autoscaler.logic.hpa import hpa_scores, simulate_reactive_hpa
from predictor.decaying_histogram import cdf_quantiles, decaying_cdf
from reports.pages import legend

VPA_PCTS = (0.8, 0.85, 0.9, 0.95, 0.99)  # the scorer's settings
VPA_MARGINS = (1.0, 1.05, 1.1, 1.15, 1.2, 1.25, 1.3, 1.4)
HPA_TARGETS = (0.75, 0.7, 0.65, 0.6, 0.55, 0.5, 0.45)
AXES = {"vpa": ("violation rate (share of 5-min steps with usage > request)", "mean relative slack"),
        "hpa": ("mean serving replicas", "over-target share (minutes over target x 1.1)")}


@dataclass
class Curves:
    """One kind's picture: reference lines (label -> [(x, y)]) and single points (label -> (x, y))."""

    kind: str  # vpa or hpa
    lines: dict[str, list[tuple[float, float]]] = field(default_factory=dict)
    points: dict[str, tuple[float, float]] = field(default_factory=dict)


def _stock_requests(y: pd.Series, start: pd.Timestamp, end: pd.Timestamp) -> dict[float, pd.Series]:
    """Hourly decaying-histogram percentiles (24 h half-life, 8 days) at every scorer percentile."""
    rows = {}
    for t in pd.date_range(start, end, freq="1h", inclusive="left"):
        h = y[(y.index < t) & (y.index >= t - pd.Timedelta("8D"))].dropna()
        if len(h):
            ordered, cumulative = decaying_cdf(h.to_numpy(), (t - h.index).total_seconds().to_numpy() / 3600.0, 24.0)
            rows[t] = cdf_quantiles(ordered, cumulative, np.array(VPA_PCTS))
    table = pd.DataFrame.from_dict(rows, orient="index", columns=list(VPA_PCTS))
    idx = y[start:end].index
    return {p: table[p].reindex(idx, method="ffill") for p in VPA_PCTS}


def _vpa_point(usage: pd.Series, request: pd.Series) -> tuple[float, float]:
    u, r = usage.to_numpy(dtype=float), request.reindex(usage.index).to_numpy(dtype=float)
    ok = np.isfinite(u) & np.isfinite(r) & (r > 0)
    if not ok.any():
        return float("nan"), float("nan")
    return float(np.mean(u[ok] > r[ok])), float(np.mean(np.clip((r[ok] - u[ok]) / r[ok], 0, None)))


def seasonal_rule(y: pd.Series, usage: pd.Series, days: int = 7, margin: float = 1.05) -> pd.Series:
    """The model-free reference a forecasting VPA must beat (issue 24): each hour's request is the
    median of that hour's peak on the last `days` days x margin, raised to the last hour's peak x
    margin when that was higher; from the past only."""
    peaks = y.resample("1h").max()
    hours = usage.index.floor("1h").unique()
    same = np.column_stack([peaks.reindex(hours - pd.Timedelta(days=d)).to_numpy() for d in range(1, days + 1)])
    last = peaks.reindex(hours - pd.Timedelta("1h")).to_numpy()
    with np.errstate(all="ignore"):
        base = np.where(np.isfinite(same).any(axis=1), np.nanmedian(np.where(np.isfinite(same), same, np.nan), axis=1)
                        if np.isfinite(same).any() else np.nan, np.nan)
    req = np.fmax(base, last) * margin
    return pd.Series(req, hours).reindex(usage.index, method="ffill")


def day_blocks_foresight(usage: pd.Series, n: int = 3) -> pd.Series:
    """Hindsight bound of the restart regime: each UTC day's true hourly peaks in at most n blocks."""
    from autoscaler.logic.day_plan import blocks

    peaks = usage.resample("1h").max()
    out = pd.Series(np.nan, index=peaks.index)
    for _, day in peaks.groupby(peaks.index.floor("D")):
        out[day.index] = blocks(day.to_numpy(), n)
    return out.reindex(usage.index, method="ffill")


def vpa_series_curves(y: pd.Series, start: pd.Timestamp, end: pd.Timestamp, usage: pd.Series,
                      tidewise: pd.Series) -> Curves:
    """One series' VPA curves and points, (violation, slack) each."""
    stock = _stock_requests(y, start, end)
    c = Curves("vpa")
    for p in VPA_PCTS:
        c.lines[f"stock VPA p{p * 100:g} (margins 1.0-1.4)"] = [_vpa_point(usage, stock[p] * m) for m in VPA_MARGINS]
    c.points["stock VPA (p90 x1.15)"] = _vpa_point(usage, stock[0.9] * 1.15)
    c.points["perfect foresight (each hour's max)"] = _vpa_point(usage, usage.groupby(usage.index.floor("1h")).transform("max"))
    c.points["foresight, 3 changes a day"] = _vpa_point(usage, day_blocks_foresight(usage, 3))
    c.points["seasonal rule (no model)"] = _vpa_point(usage, seasonal_rule(y, usage))
    c.points["tidewise"] = _vpa_point(usage, tidewise)
    return c


def hpa_series_curves(r: Mapping[str, Any], history_before: pd.Series, target_utilization: float,
                      tolerance: float, stabilization_minutes: int, startup_minutes: int) -> Curves:
    """One series' HPA curves and points, (mean replicas, over-target share) each, from a replay
    result (`demand`, `serving`, `per`)."""
    demand, per = np.asarray(r["demand"], dtype=float), float(r["per"])
    c = Curves("hpa")
    line = []
    for tg in HPA_TARGETS:
        r0 = max(1, int(np.ceil(history_before.iloc[-12:].mean() / (per * tg))))
        serving = simulate_reactive_hpa(demand, per, r0, target_utilization=tg, tolerance=tolerance,
                                        stabilization_minutes=stabilization_minutes, startup_minutes=startup_minutes)
        line.append(hpa_scores(demand, serving, per, target_utilization, tolerance))
    c.lines["reactive HPA (targets 0.75-0.45)"] = line
    c.points["reactive HPA (target 0.7)"] = line[HPA_TARGETS.index(0.7)] if 0.7 in HPA_TARGETS else line[0]
    exact = np.maximum(1, np.ceil(np.nan_to_num(demand) / (per * target_utilization)))
    c.points["perfect foresight (replicas = demand)"] = hpa_scores(demand, exact, per, target_utilization, tolerance)
    c.points["tidewise"] = hpa_scores(demand, np.asarray(r["serving"], dtype=float), per, target_utilization, tolerance)
    return c


def mean_curves(per_series: list[Curves]) -> Curves:
    """The suite's picture: every coordinate averaged over series (as the scorer averages)."""
    out = Curves(per_series[0].kind if per_series else "vpa")
    if not per_series:
        return out
    for name in per_series[0].lines:
        out.lines[name] = [tuple(np.nanmean([c.lines[name][i] for c in per_series], axis=0))  # type: ignore[misc]
                           for i in range(len(per_series[0].lines[name]))]
    for name in per_series[0].points:
        out.points[name] = tuple(np.nanmean([c.points[name] for c in per_series], axis=0))  # type: ignore[assignment]
    return out


def scorer_curves(kind: str, policies: Mapping[str, Mapping[str, float]],
                  tidewise: Mapping[str, Mapping[str, Mapping[str, float]]]) -> Curves:
    """The curves from the reference scorer's --json `policies`, and Tidewise's points from one
    report per setting (label -> that run's `policies`, read at project_vpa / project_hpa)."""
    c = Curves(kind)
    if kind == "vpa":
        for p in VPA_PCTS:
            pts = [(v["violation"], v["slack"]) for n, v in policies.items()
                   if (m := re.fullmatch(r"vpa_frontier p([\d.]+) x([\d.]+)", n)) and float(m.group(1)) == p]
            c.lines[f"stock VPA p{p * 100:g} (margins 1.0-1.4)"] = sorted(pts)
        pairs = [("stock VPA (p90 x1.15)", "vpa_default"), ("perfect foresight (each hour's max)", "vpa_perfect_foresight")]
        c.points.update({label: (policies[n]["violation"], policies[n]["slack"]) for label, n in pairs if n in policies})
        for label, pol in tidewise.items():
            if "project_vpa" in pol:
                _add_point(c, label, (pol["project_vpa"]["violation"], pol["project_vpa"]["slack"]))
        return c
    pts = [(v["mean_replicas"], v["over_target"]) for n, v in policies.items() if n.startswith("hpa_frontier")]
    c.lines["reactive HPA (targets 0.75-0.45)"] = sorted(pts)
    pairs = [("reactive HPA (target 0.7)", "hpa_reactive"), ("perfect foresight (replicas = demand)", "hpa_perfect_foresight")]
    c.points.update({label: (policies[n]["mean_replicas"], policies[n]["over_target"]) for label, n in pairs if n in policies})
    for label, pol in tidewise.items():
        if "project_hpa" in pol:
            _add_point(c, label, (pol["project_hpa"]["mean_replicas"], pol["project_hpa"]["over_target"]))
    return c


def _add_point(c: Curves, label: str, xy: tuple[float, float]) -> None:
    """Add a point, or name it beside an equal one already there (settings that leave a kind alone)."""
    same = next((k for k, v in c.points.items() if v == xy), None)
    if same is None:
        c.points[label] = xy
    else:
        c.points[f"{same} = {label.removeprefix('tidewise ')}"] = c.points.pop(same)


MARKERS = "o^sDvP*Xh"


def plot_tradeoff(ax: Any, c: Curves, title: str) -> None:
    """Draw `c` on a matplotlib axis: reference lines grey to black, the references' own points as
    hollow markers, Tidewise's points filled in colour (labels starting with `tidewise`)."""
    shades = np.linspace(0.75, 0.1, max(1, len(c.lines)))
    for (label, pts), g in zip(c.lines.items(), shades):
        xs, ys = zip(*pts) if pts else ((), ())
        ax.plot(xs, ys, color=str(g), lw=1.0, marker=".", ms=4, label=label)
    colours = iter(["#1f77b4", "#2ca02c", "#9467bd", "#ff7f0e", "#17becf", "#8c564b"])
    for i, (label, (x, y)) in enumerate(c.points.items()):
        own = label.startswith("tidewise")
        ax.plot([x], [y], linestyle="none", marker=MARKERS[i % len(MARKERS)], ms=8 if own else 7,
                color=next(colours) if own else "#d62728", mfc=None if own else "none", label=label)
    xl, yl = AXES[c.kind]
    ax.set_xlabel(xl)
    ax.set_ylabel(yl)
    ax.set_title(title, fontsize=10)
    ax.grid(alpha=0.3)
    legend(ax)
