"""The one shared helper for Tidewise's self-contained HTML pages: style, page frame, tables and
matplotlib figures embedded as base64 PNG, so that a page opens with nothing fetched (no scripts,
fonts or CSS from outside; the same on an air-gapped laptop).

It is a package of its own so that both page writers import it and not each other: the forecast
report (`training.report`) and the offline studies (`studies`, which import nothing from training).
It holds presentation only, nothing about forecasts or decisions (tests/test_layout.py).
"""
from __future__ import annotations

import base64
import html
import io
import warnings
from typing import Any, Callable, Sequence

FIG_WIDTH = 9.0  # inches, every figure (648 px at 72 dpi): the plots of a page line up, none dwarfs another
LEGEND_SIZE = 8  # points: 6-7 pt legends were unreadable at 72 dpi
LABEL_SIZE = 8  # points: axis labels and ticks
GIB = float(2 ** 30)
UNITS = {"cpu": "cores", "memory": "GiB"}  # a series' resource -> its axis unit (memory is stored in bytes)

CSS = """
body { font-family: -apple-system, Segoe UI, Helvetica, Arial, sans-serif; margin: 1.5em; color: #222; max-width: 1400px; }
h1 { font-size: 1.5em; } h2 { font-size: 1.15em; margin-top: 1.6em; }
table { border-collapse: collapse; font-size: 0.85em; margin: 0.5em 0; }
th, td { border: 1px solid #ccc; padding: 3px 7px; text-align: right; }
th { background: #f0f0f0; } td.k { text-align: left; font-family: monospace; }
.good { color: #1a7f37; } .bad { color: #b42318; } .meta { color: #666; font-size: 0.85em; }
.plot { display: inline-block; margin: 0.4em; vertical-align: top; }
.plot p { font-size: 0.8em; margin: 0.2em 0; font-family: monospace; max-width: 640px; }
"""


def pyplot() -> Any:
    """matplotlib.pyplot on the file-only Agg backend (imported here, late: only pages need it)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def figure(height: float = 2.8, ncols: int = 1) -> tuple[Any, Any]:
    """(figure, axes): FIG_WIDTH wide and `height` inches high, `ncols` axes side by side."""
    return pyplot().subplots(1, ncols, figsize=(FIG_WIDTH, height))


def legend(ax: Any, **kwargs: Any) -> Any:
    """The axes' legend at the pages' readable size (kwargs: loc, ncol, ...)."""
    return ax.legend(fontsize=LEGEND_SIZE, **kwargs)


def _gib(v: float, _pos: Any = None) -> str:
    return f"{v / GIB:g}"


def unit_axis(ax: Any, unit: str, what: str = "") -> None:
    """Label the y axis "what, unit". unit "GiB" means the data are bytes: the ticks are put at
    round numbers of GiB and written in GiB (raw bytes, 4.29e9, read as noise)."""
    from matplotlib.ticker import FuncFormatter, MaxNLocator

    if unit == "GiB":
        class GibLocator(MaxNLocator):  # round GiB ticks: place in GiB, return bytes
            def tick_values(self, vmin: float, vmax: float) -> Any:
                return [v * GIB for v in super().tick_values(vmin / GIB, vmax / GIB)]

        ax.yaxis.set_major_locator(GibLocator(nbins=6, steps=[1, 2, 2.5, 5, 10]))
        ax.yaxis.set_major_formatter(FuncFormatter(_gib))
    ax.set_ylabel(f"{what}, {unit}" if what else unit, fontsize=LABEL_SIZE)


def readable_legends(fig: Any) -> None:
    """Raise every legend text of `fig` smaller than LEGEND_SIZE to it (a floor for every page)."""
    for leg in [ax.get_legend() for ax in fig.axes] + list(fig.legends):
        for text in leg.get_texts() if leg is not None else ():
            text.set_fontsize(max(text.get_fontsize(), LEGEND_SIZE))


def figure_png(fig: Any, dpi: int = 72) -> str:
    """A matplotlib figure as base64 PNG text, for `<img src="data:image/png;base64,...">`; the
    figure is closed (pages draw hundreds of them). Every figure leaves FIG_WIDTH wide (height
    scaled alike), laid out inside its own frame, so the PNGs of a page have one width in pixels,
    and with legends at LEGEND_SIZE at least."""
    buf = io.BytesIO()
    try:
        readable_legends(fig)
        w, h = fig.get_size_inches()
        fig.set_size_inches(FIG_WIDTH, h * FIG_WIDTH / w)
        with warnings.catch_warnings():  # "not compatible with tight_layout": it then keeps the layout
            warnings.simplefilter("ignore", UserWarning)
            fig.tight_layout()
        fig.savefig(buf, format="png", dpi=dpi)
    finally:
        pyplot().close(fig)
    return base64.b64encode(buf.getvalue()).decode("ascii")


def page_start(title: str, meta: str | None = None) -> list[str]:
    """The head of a page and its title (and a grey line under it when `meta` is given)."""
    parts = ["<!DOCTYPE html>", '<html lang="en"><head><meta charset="utf-8">',
             '<meta name="viewport" content="width=device-width, initial-scale=1">',
             f"<title>{html.escape(title)}</title><style>{CSS}</style></head><body>",
             f"<h1>{html.escape(title)}</h1>"]
    if meta:
        parts.append(f'<p class="meta">{html.escape(meta)}</p>')
    return parts


PAGE_END = "</body></html>"


def image(png: str, alt: str = "") -> str:
    """An embedded PNG (base64 text from `figure_png`)."""
    return f'<img alt="{html.escape(alt)}" src="data:image/png;base64,{png}">'


def plot_blocks(plots: Sequence[tuple[str, str, str]], total: int | None = None) -> list[str]:
    """(alt text, png, caption HTML) as inline blocks; when `total` series exist but only these
    were drawn (each PNG weighs ~40 KB), a note says how many were left out."""
    parts = [f'<div class="plot">{image(png, alt)}<p>{caption}</p></div>' for alt, png, caption in plots]
    if total is not None and total > len(plots):
        parts.append(f'<p class="meta">{total - len(plots)} more series not plotted.</p>')
    return parts


def table(rows: Sequence[dict[str, Any]], cell: Callable[[Any], str]) -> str:
    """Rows of dicts (same keys) as a table, the first column as a key column; `cell` formats a value
    as HTML (escaping it)."""
    if not rows:
        return "<p>nothing to show</p>"
    cols = list(rows[0])
    head = "".join(f"<th>{html.escape(c)}</th>" for c in cols)
    body = "".join("<tr>" + "".join(f'<td class="{"k" if i == 0 else ""}">{cell(r[c])}</td>'
                                    for i, c in enumerate(cols)) + "</tr>" for r in rows)
    return f"<table><tr>{head}</tr>{body}</table>"
