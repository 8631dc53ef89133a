"""The replay report: one self-contained HTML page (plots as base64 PNG, nothing fetched) with the
scores of Tidewise and of the reference, per series and in total, and one plot per series."""
from __future__ import annotations

import html
from typing import Any, Sequence

import pandas as pd

from contracts.atomic import write_text_atomic
from reports.pages import PAGE_END, figure, image, legend, page_start, plot_blocks, table, unit_axis

SHOWN = pd.Timedelta(days=7)  # a week shows the daily tide and the weekly dip
MAX_PLOTS = 100
TRADEOFF_NOTE = ("Each reference run at other settings traces its curve (stock VPA: percentiles 0.8-0.99, one line "
                 "each, margins 1.0-1.4 along it; reactive HPA: target utilisations 0.75-0.45, scored against the "
                 "real target). A policy below the curve is better at equal cost; perfect foresight shows what is left.")


def lines_figure(title: str, lines: Sequence[tuple[str, pd.Series, dict]], unit: str, what: str = "") -> Any:
    """The last week of each (label, series, matplotlib style) line, the y axis "what, unit"
    (`reports.pages.unit_axis`: GiB axes hold bytes), a legend naming each line."""
    fig, ax = figure(2.8)
    for label, s, style in lines:
        s = s[s.index >= s.index.max() - SHOWN] if len(s) else s
        ax.plot(s.index, s.to_numpy(dtype=float), label=label, **style)
    ax.set_title(title, fontsize=9)
    unit_axis(ax, unit, what)
    ax.tick_params(labelsize=7)
    legend(ax, loc="upper left", ncol=len(lines), framealpha=0.85)  # one row: less of the data hidden
    fig.autofmt_xdate()
    return fig


def _cell(v: Any) -> str:
    if isinstance(v, float):
        return f"{v:.4f}"
    return html.escape(str(v))


def render(path: str, title: str, summary: Sequence[dict[str, Any]], per_series: Sequence[dict[str, Any]],
           plots: Sequence[tuple[str, str]], meta: str, total: int | None = None, tradeoff: str | None = None) -> None:
    """summary: rows of the totals table; per_series: one row per series; plots: (caption, png) of
    the first series (`total` of them in all); tradeoff: the trade-off figure (png), when drawn."""
    parts = page_start(title, meta)
    parts += ["<h2>Summary</h2>", table(summary, _cell)]
    if tradeoff:
        parts += ["<h2>Trade-off</h2>", f"<p>{html.escape(TRADEOFF_NOTE)}</p>", image(tradeoff, "trade-off curves")]
    parts += ["<h2>Per series</h2>", table(per_series, _cell), "<h2>Series</h2>"]
    parts += plot_blocks([(caption, png, html.escape(caption)) for caption, png in plots], total)
    parts.append(PAGE_END)
    write_text_atomic(path, "\n".join(parts))
