"""The replay report: one self-contained HTML page (plots as base64 PNG, nothing fetched)."""
from __future__ import annotations

import html
from typing import Any, Sequence

import pandas as pd

from studies.pages import CSS, figure_png
from predictor.atomic import write_text_atomic

SHOWN = pd.Timedelta("7d")
MAX_PLOTS = 100


def plot_lines(title: str, lines: Sequence[tuple[str, pd.Series, dict]], ylabel: str) -> str:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(9, 2.8))
    for label, s, style in lines:
        s = s[s.index >= s.index.max() - SHOWN] if len(s) else s
        ax.plot(s.index, s.to_numpy(dtype=float), label=label, **style)
    ax.set_title(title, fontsize=9)
    ax.set_ylabel(ylabel, fontsize=8)
    ax.tick_params(labelsize=7)
    ax.legend(fontsize=7, loc="upper left")
    fig.autofmt_xdate()
    try:
        return figure_png(fig)
    finally:
        plt.close(fig)


def _cell(v: Any) -> str:
    if isinstance(v, float):
        return f"{v:.4f}"
    return html.escape(str(v))


def render(path: str, title: str, summary: Sequence[dict[str, Any]], per_series: Sequence[dict[str, Any]],
           plots: Sequence[tuple[str, str]], meta: str) -> None:
    """summary: rows of the totals table; per_series: one row per series; plots: (caption, png)."""
    def table(rows: Sequence[dict[str, Any]]) -> str:
        if not rows:
            return "<p>nothing to show</p>"
        cols = list(rows[0])
        head = "".join(f"<th>{html.escape(c)}</th>" for c in cols)
        body = "".join("<tr>" + "".join(f'<td class="{"k" if i == 0 else ""}">{_cell(r[c])}</td>'
                                        for i, c in enumerate(cols)) + "</tr>" for r in rows)
        return f"<table><tr>{head}</tr>{body}</table>"

    parts = ["<!DOCTYPE html>", '<html lang="en"><head><meta charset="utf-8">',
             f"<title>{html.escape(title)}</title><style>{CSS}</style></head><body>",
             f"<h1>{html.escape(title)}</h1>", f'<p class="meta">{html.escape(meta)}</p>',
             "<h2>Summary</h2>", table(summary), "<h2>Per series</h2>", table(per_series), "<h2>Series</h2>"]
    for i, (caption, png) in enumerate(plots):
        if i >= MAX_PLOTS:
            parts.append(f'<p class="meta">{len(plots) - MAX_PLOTS} more series not plotted.</p>')
            break
        parts.append(f'<div class="plot"><img alt="{html.escape(caption)}" src="data:image/png;base64,{png}">'
                     f"<p>{html.escape(caption)}</p></div>")
    parts.append("</body></html>")
    write_text_atomic(path, "\n".join(parts))
