"""The forecast report: one self-contained HTML file (plots embedded as base64 PNG, no network).

`render_report` is what `tidewise demo` and `tidewise report` call: a fleet table (when rows are
given) and one plot per series — the last days of history, the forecast median and its band, and
the profile's peak window when known. Nothing here fetches anything: no scripts, no fonts, no CSS
from outside, so the page opens the same on an air-gapped laptop.
"""
from __future__ import annotations

import html
import logging
from typing import Any, Callable, Iterable, Sequence

import numpy as np
import pandas as pd

from contracts.atomic import write_text_atomic
from predictor.history import History
from predictor.types import Forecast
from reports.pages import (PAGE_END, UNITS, figure, figure_png, legend, page_start, plot_blocks, pyplot, time_axis,
                           unit_axis)

log = logging.getLogger(__name__)

HISTORY_SHOWN = pd.Timedelta(days=7)  # a week of context shows the weekly dip and last peaks
MAX_PLOTS = 200  # beyond this the page gets heavy (~40 KB per PNG); the table still lists all

FLEET_COLUMNS = [
    ("series", "series"),
    ("class", "class"),
    ("seasonality_day", "season day"),
    ("seasonality_week", "season week"),
    ("model", "chosen model"),
    ("ran", "model that ran"),
    ("skill", "skill vs seasonal naive"),
    ("coverage", "coverage q0.95"),
    ("pinball", "pinball@0.95 (scaled)"),
]

def _peak_span(window: Any, index: pd.DatetimeIndex) -> list[tuple[pd.Timestamp, pd.Timestamp]]:
    """Daily occurrences of a profile's peak window inside `index` (window: dict with a start and
    end hour of day, e.g. {"start_hour": 13, "end_hour": 15} or {"start": "13:00", "end": "15:00"})."""
    if not isinstance(window, dict) or len(index) == 0:
        return []

    def hour(v: Any) -> float | None:
        if v is None:
            return None
        if isinstance(v, (int, float)):
            return float(v)
        try:
            t = pd.Timestamp(str(v))
            return t.hour + t.minute / 60
        except (ValueError, TypeError):
            return None

    start = hour(window.get("start_hour", window.get("start")))
    end = hour(window.get("end_hour", window.get("end")))
    if start is None or end is None:
        return []
    if end <= start:
        end += 24
    spans = []
    for day in pd.date_range(index[0].floor("D"), index[-1].ceil("D"), freq="D"):
        a, b = day + pd.Timedelta(hours=start), day + pd.Timedelta(hours=end)
        if b > index[0] and a < index[-1]:
            spans.append((a, b))
    return spans


def plot_series(key: str, y: pd.Series | None, fc: Forecast | None, profile: dict[str, Any] | None = None) -> str:
    """One PNG (base64): history, forecast median and band, peak windows shaded."""
    return figure_png(series_figure(key, y, fc, profile))


def series_figure(key: str, y: pd.Series | None, fc: Forecast | None, profile: dict[str, Any] | None = None) -> Any:
    """The matplotlib figure of `plot_series`, the y axis in the series' unit (cores, GiB), the x
    axis in UTC with the time of day, the legend beside the plot (not over the weekday peaks)."""
    fig, ax = figure(2.6)
    try:
        shown_index: list[pd.Timestamp] = []
        if y is not None and len(y):
            tail = y[y.index > y.index[-1] - HISTORY_SHOWN]
            ax.plot(tail.index, tail.to_numpy(), lw=0.8, color="#444", label="history")
            shown_index += [tail.index[0], tail.index[-1]]
        if fc is not None and len(fc.index):
            qs = list(fc.quantiles)
            lo_q = min(qs)
            hi_q = 0.95 if 0.95 in qs else max(qs)
            mid_q = 0.5 if 0.5 in qs else qs[len(qs) // 2]
            ax.fill_between(fc.index, fc.quantile(lo_q), fc.quantile(hi_q), color="#4c8bf5", alpha=0.25,
                            label=f"q{lo_q:g}–q{hi_q:g}")
            if max(qs) > hi_q:
                ax.plot(fc.index, fc.quantile(max(qs)), lw=0.6, ls="--", color="#4c8bf5", label=f"q{max(qs):g}")
            ax.plot(fc.index, fc.quantile(mid_q), lw=1.0, color="#1f4fbf", label=f"q{mid_q:g} ({fc.model})")
            shown_index += [fc.index[0], fc.index[-1]]
        if profile and shown_index:
            span_index = pd.DatetimeIndex(sorted(shown_index))
            for i, (a, b) in enumerate(_peak_span(profile.get("peak_window"), span_index)):
                ax.axvspan(a, b, color="#f5a623", alpha=0.15, lw=0, label="peak window" if i == 0 else None)
        ax.set_title(key, fontsize=10, loc="left")
        resource = key.rsplit("/", 1)[-1]
        unit_axis(ax, UNITS.get(resource, "value"), resource if resource in UNITS else "")
        time_axis(ax)
        ax.grid(alpha=0.3)
        legend(ax)
        return fig
    except BaseException:
        pyplot().close(fig)
        raise


def _fmt(v: Any) -> str:
    if v is None:
        return "–"
    if isinstance(v, (float, np.floating)):
        return "–" if not np.isfinite(v) else f"{v:.3f}"
    return html.escape(str(v))


def _fleet_table(rows: Sequence[dict[str, Any]]) -> str:
    head = "".join(f"<th>{html.escape(t)}</th>" for _, t in FLEET_COLUMNS)
    body = []
    for r in rows:
        cells = []
        for c, _ in FLEET_COLUMNS:
            v = r.get(c)
            cls = "k" if c in ("series", "class", "model", "ran") else ""
            if c == "skill" and isinstance(v, (float, np.floating)) and np.isfinite(v):
                cls = "good" if v < 1 else "bad"
            tip = f' title="{html.escape(r["fallback"])}"' if c == "ran" and r.get("fallback") else ""
            text = _fmt(v) + (" (fallback)" if tip else "")
            cells.append(f'<td class="{cls}"{tip}>{text}</td>')
        body.append("<tr>" + "".join(cells) + "</tr>")
    return f"<table><thead><tr>{head}</tr></thead><tbody>{''.join(body)}</tbody></table>"


def render_html(
    history: History,
    forecasts: Iterable[Forecast],
    profiles: dict[str, dict] | None = None,
    title: str = "Tidewise forecast report",
    fleet: Sequence[dict[str, Any]] | None = None,
    meta: str | None = None,
    max_plots: int = MAX_PLOTS,
    on_plot: Callable[[], Any] | None = None,
) -> str:
    """The page; `on_plot()` is called after each plot (progress: a plot takes ~0.1 s)."""
    forecasts = list(forecasts)
    profiles = profiles or {}
    parts = page_start(title, meta)
    parts.append(f'<p class="meta">{len(forecasts)} forecasts, {len(history.series)} series of history; '
                 "band = forecast quantiles, shaded orange = the profile's peak window.</p>")
    if fleet:
        parts += ["<h2>Fleet</h2>",
                  '<p class="meta">skill = backtest pinball@0.95 of the chosen model ÷ that of daily seasonal '
                  "naive (below 1 is better); coverage = share of backtest values at or under q0.95.</p>",
                  _fleet_table(fleet)]
    parts.append("<h2>Workloads</h2>")
    plots = []
    for fc in sorted(forecasts, key=lambda f: f.series)[:max_plots]:
        prof = profiles.get(fc.series)
        img = plot_series(fc.series, history.series.get(fc.series), fc, prof)
        cap = f"{html.escape(fc.series)} — model {html.escape(fc.model)} ({html.escape(fc.version)})"
        fell = next((n for n in fc.notes if "fell back to" in n), None)
        if fell:
            cap += f" — {html.escape(fell)}"
        if prof and prof.get("class"):
            cap += f", class {html.escape(str(prof['class']))}"
        plots.append((fc.series, img, cap))
        if on_plot is not None:
            on_plot()
    parts += plot_blocks(plots, len(forecasts))
    parts.append(PAGE_END)
    return "\n".join(parts)


def render_report(
    path: str,
    history: History,
    forecasts: list[Forecast],
    profiles: dict[str, dict] | None = None,
    title: str = "Tidewise forecast report",
    fleet: Sequence[dict[str, Any]] | None = None,
    meta: str | None = None,
    max_plots: int = MAX_PLOTS,
    on_plot: Callable[[], Any] | None = None,
) -> None:
    """Write `path` (atomically): the self-contained HTML report, one plot per forecast series."""
    write_text_atomic(path, render_html(history, forecasts, profiles, title, fleet, meta, max_plots, on_plot))
    log.info("report: %d series -> %s", len(forecasts), path)
