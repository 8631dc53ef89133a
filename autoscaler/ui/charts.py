"""A workload resource's plot on the live page: per-pod usage over the last week and the day-ahead
forecast band over the next day, with the request in force and the recommendation, as inline SVG
(no image files, no script: the page's Content-Security-Policy allows neither).

Both are hourly maxima (168 + 24 points a plot, whatever the step): a week of 5-minute steps is
2016 points, more than a 900-pixel plot can show."""
from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from html import escape
from typing import Callable

import numpy as np

from autoscaler.logic.vpa import hourly_maxima
from autoscaler.ui.snapshot import PER_UNIT, UNIT, ChartInputs
from contracts.quantity import GIB

HOUR, DAY = 3600, 86400
WEEK = 7 * DAY
W, H, LEFT, RIGHT, TOP, BOTTOM = 900, 240, 64, 12, 10, 28
USAGE, BAND, MEDIAN, REQUEST, TARGET = "#444444", "#9ecae1", "#1f77b4", "#d62728", "#2ca02c"


@dataclass
class Chart:
    resource: str
    unit: str  # cores or GiB
    past: list[tuple[float, float]]  # (epoch seconds, usage per pod): hourly maxima of the last week
    future: list[tuple[float, float, float, float]]  # (epoch seconds, low, median, high) per pod, hourly
    band: str  # the quantiles the band spans, e.g. "q0.5-q0.95"
    request: float | None
    target: float
    now: float


def chart(inputs: ChartInputs, key: str, container: str, resource: str, replicas: int,
          request: int | None, target: int) -> Chart | None:
    """The plot of one container resource of workload `key`; None when the run had no series for it."""
    sid = inputs.series.get(key, {}).get((container, resource))
    if sid is None or sid not in inputs.history.series:
        return None
    per_unit = 1.0 if resource == "cpu" else float(GIB)  # history: cores, bytes
    pods = float(max(1, replicas))
    now = inputs.now.value / 1e9
    y = inputs.history.series[sid]
    t = y.index.asi8 // 10**9
    lo, hi = np.searchsorted(t, now - WEEK, side="right"), np.searchsorted(t, now, side="right")
    pt, pv = hourly_maxima(t[lo:hi], y.to_numpy(dtype=float)[lo:hi] / pods / per_unit, HOUR)
    future: list[tuple[float, float, float, float]] = []
    band = ""
    fc = inputs.forecasts.get(sid)
    if fc is not None and len(fc.quantiles):
        ft = fc.index.asi8 // 10**9
        sel = (ft >= now - HOUR) & (ft <= now + DAY)
        mid = int(np.argmin([abs(q - 0.5) for q in fc.quantiles]))
        cols = np.asarray(fc.values, dtype=float)[sel][:, [0, mid, len(fc.quantiles) - 1]] / pods / per_unit
        ht, hv = hourly_maxima(ft[sel], cols, HOUR)
        future = [(float(a), float(b[0]), float(b[1]), float(b[2])) for a, b in zip(ht, hv)]
        band = f"q{fc.quantiles[0]:g}-q{fc.quantiles[-1]:g}"
    return Chart(resource, UNIT[resource], [(float(a), float(b)) for a, b in zip(pt, pv)],
                 future, band, None if request is None else request / PER_UNIT[resource], target / PER_UNIT[resource], now)


def _ticks(top: float) -> list[float]:
    """About four round values from 0 to `top`."""
    raw = top / 4 if top > 0 else 1.0
    mag = 10 ** np.floor(np.log10(raw))
    step = next(m * mag for m in (1, 2, 2.5, 5, 10) if m * mag >= raw)
    return [i * step for i in range(int(top // step) + 1)]


def svg(c: Chart, title: str) -> str:
    """The plot as an inline SVG element; `title` is escaped here."""
    x0, x1 = c.now - WEEK, c.now + DAY
    values = [v for _, v in c.past] + [v for f in c.future for v in f[1:]] + [c.target] + \
        ([c.request] if c.request is not None else [])
    top = max(values) * 1.1 or 1.0

    def x(t: float) -> float:
        return LEFT + (t - x0) / (x1 - x0) * (W - LEFT - RIGHT)

    def y(v: float) -> float:
        return H - BOTTOM - v / top * (H - TOP - BOTTOM)

    parts = [f'<svg class="plot" role="img" width="{W}" height="{H}" viewBox="0 0 {W} {H}" '
             f'xmlns="http://www.w3.org/2000/svg"><title>{escape(title)}</title>',
             f'<rect x="{LEFT}" y="{TOP}" width="{W - LEFT - RIGHT}" height="{H - TOP - BOTTOM}" fill="#fff" stroke="#ccc"/>']
    for v in _ticks(top):
        parts.append(f'<line x1="{LEFT}" x2="{W - RIGHT}" y1="{y(v):.1f}" y2="{y(v):.1f}" stroke="#eee"/>'
                     f'<text x="{LEFT - 4}" y="{y(v) + 4:.1f}" text-anchor="end" font-size="11">{v:g}</text>')
    day = (int(x0) // DAY + 1) * DAY
    while day < x1:
        label = dt.datetime.fromtimestamp(day, dt.timezone.utc).strftime("%b %d")
        parts.append(f'<line x1="{x(day):.1f}" x2="{x(day):.1f}" y1="{TOP}" y2="{H - BOTTOM}" stroke="#eee"/>'
                     f'<text x="{x(day):.1f}" y="{H - 10}" text-anchor="middle" font-size="11">{label}</text>')
        day += DAY
    parts.append(f'<text x="12" y="{TOP + 12}" font-size="11">{c.unit}</text>')
    if c.future:
        upper = " ".join(f"{x(t):.1f},{y(hi):.1f}" for t, _, _, hi in c.future)
        lower = " ".join(f"{x(t):.1f},{y(lo):.1f}" for t, lo, _, _ in reversed(c.future))
        parts.append(f'<polygon class="band" points="{upper} {lower}" fill="{BAND}" stroke="none"/>')
        parts.append(_line([(t, m) for t, _, m, _ in c.future], x, y, MEDIAN, "median"))
    if c.past:
        parts.append(_line(c.past, x, y, USAGE, "usage"))
    if c.request is not None:
        parts.append(_line([(x0, c.request), (x1, c.request)], x, y, REQUEST, "request", dash=True))
    parts.append(_line([(c.now, c.target), (x1, c.target)], x, y, TARGET, "recommendation"))
    parts.append(f'<line x1="{x(c.now):.1f}" x2="{x(c.now):.1f}" y1="{TOP}" y2="{H - BOTTOM}" stroke="#888" '
                 f'stroke-dasharray="2,3"/></svg>')
    return "".join(parts)


def _line(points: list[tuple[float, float]], x: Callable[[float], float], y: Callable[[float], float],
          colour: str, cls: str, dash: bool = False) -> str:
    pts = " ".join(f"{x(t):.1f},{y(v):.1f}" for t, v in points)
    extra = ' stroke-dasharray="6,4"' if dash else ""
    return f'<polyline class="{cls}" points="{pts}" fill="none" stroke="{colour}" stroke-width="2"{extra}/>'
