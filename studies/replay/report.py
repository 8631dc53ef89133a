"""The replay report: one self-contained HTML page (plots as base64 PNG, nothing fetched) with the
scores of Tidewise and of the reference, per series and in total, and one plot per series."""
from __future__ import annotations

import html
from typing import Any, Sequence

import pandas as pd

from contracts.atomic import write_text_atomic
from reports.pages import PAGE_END, figure, image, legend, page_start, plot_blocks, table, time_axis, unit_axis

SHOWN = pd.Timedelta(days=7)  # a week shows the daily tide and the weekly dip
MAX_PLOTS = 100
TRADEOFF_NOTE = {  # each kind's page explains its own reference only
    "vpa": ("The stock VPA run at other settings traces its curve: percentiles 0.8-0.99, one line each, margins "
            "1.0-1.4 along it. A policy below the curve is better at equal cost; perfect foresight shows what is left."),
    "hpa": ("The reactive HPA run at other target utilisations traces its curve: 0.75-0.45, each scored against the "
            "real target. A policy below the curve is better at equal cost; perfect foresight shows what is left.")}


def lines_figure(title: str, lines: Sequence[tuple[str, pd.Series, dict]], unit: str, what: str = "") -> Any:
    """The last week of each (label, series, matplotlib style) line, the y axis "what, unit"
    (`reports.pages.unit_axis`: GiB axes hold bytes), the x axis in UTC with the time of day, a
    legend naming each line beside the plot."""
    fig, ax = figure(3.0)
    for label, s, style in lines:
        s = s[s.index >= s.index.max() - SHOWN] if len(s) else s
        ax.plot(s.index, s.to_numpy(dtype=float), label=label, **style)
    ax.set_title(title, fontsize=10, loc="left")
    unit_axis(ax, unit, what)
    time_axis(ax)
    legend(ax)
    return fig


def _cell(v: Any) -> str:
    if isinstance(v, float):
        return f"{v:.4f}"
    return html.escape(str(v))


def render(path: str, title: str, summary: Sequence[dict[str, Any]], per_series: Sequence[dict[str, Any]],
           plots: Sequence[tuple[str, str]], meta: str, total: int | None = None, tradeoff: str | None = None,
           kind: str = "vpa") -> None:
    """summary: rows of the totals table; per_series: one row per series; plots: (caption, png) of
    the first series (`total` of them in all); tradeoff: the trade-off figure (png), when drawn,
    with `kind`'s note (vpa or hpa)."""
    parts = page_start(title, meta)
    parts += ["<h2>Summary</h2>", table(summary, _cell)]
    if tradeoff:
        parts += ["<h2>Trade-off</h2>", f"<p>{html.escape(TRADEOFF_NOTE[kind])}</p>",
                  image(tradeoff, "trade-off curves")]
    parts += ["<h2>Per series</h2>", table(per_series, _cell), "<h2>Series</h2>"]
    parts += plot_blocks([(caption, png, html.escape(caption)) for caption, png in plots], total)
    parts.append(PAGE_END)
    write_text_atomic(path, "\n".join(parts))
