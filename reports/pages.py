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
import math
import textwrap
import warnings
from typing import Any, Callable, Sequence

FIG_WIDTH = 9.0  # inches, every figure: the plots of a page line up, none dwarfs another
DPI = 100  # 900 px wide: a 9 pt letter is 12.5 px, readable at 100% zoom (72 dpi made 7 pt text 7 px)
MIN_FONT = 9  # points: no text of a figure is smaller (ticks, labels, legends, titles, annotations)
LEGEND_SIZE = MIN_FONT
LABEL_SIZE = MIN_FONT  # points: axis labels and ticks
LEGEND_WRAP = 30  # characters: a longer legend label wraps, so a legend beside the axes stays narrow
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
.plot p { font-size: 0.8em; margin: 0.2em 0; font-family: monospace; max-width: 900px; }
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


def legend(ax: Any, handles: Sequence[Any] | None = None, labels: Sequence[str] | None = None,
           **kwargs: Any) -> Any:
    """The axes' legend outside its data: to the right of the axes, its top at the axes' top, at
    the pages' readable size, long labels wrapped (a legend inside the axes hides the points it
    lands on). `handles` and `labels` default to the axes' own (give them to gather a twin's)."""
    if handles is None or labels is None:
        handles, labels = ax.get_legend_handles_labels()
    wrapped = [textwrap.fill(str(label), LEGEND_WRAP) for label in labels]
    return ax.legend(handles, wrapped, fontsize=LEGEND_SIZE, loc="upper left", bbox_to_anchor=(1.01, 1.0),
                     borderaxespad=0.0, **kwargs)


def legend_over_data(ax: Any) -> bool:
    """Whether the axes' legend (if any) overlaps the axes' data area, as drawn now."""
    leg = ax.get_legend()
    if leg is None:
        return False
    renderer = ax.figure.canvas.get_renderer()
    return bool(leg.get_window_extent(renderer).overlaps(ax.get_window_extent(renderer)))


def outside_legends(fig: Any) -> None:
    """Move every legend of `fig` that lies over its axes to their right (a floor for every page)."""
    for ax in fig.axes:
        leg = ax.get_legend()
        if leg is not None and legend_over_data(ax):
            legend(ax, leg.legend_handles, [t.get_text() for t in leg.get_texts()])


def readable_text(fig: Any) -> None:
    """Raise every text of `fig` (ticks, labels, titles, legends, annotations) to MIN_FONT at least."""
    from matplotlib.text import Text

    for ax in fig.axes:  # ticks are made again at each draw, at their axis' own size: raise that too
        for name, axis in (("x", ax.xaxis), ("y", ax.yaxis)):
            if any(t.get_fontsize() < MIN_FONT for t in axis.get_ticklabels(which="both")):
                ax.tick_params(axis=name, which="both", labelsize=MIN_FONT)
    for text in fig.findobj(Text):
        if text.get_text() and text.get_fontsize() < MIN_FONT:
            text.set_fontsize(MIN_FONT)


TICK_STEPS_H = (1, 2, 3, 6, 12, 24, 48, 72, 96, 168, 336, 672)  # hours between time ticks: the first that
MAX_TIME_TICKS = 5  # leaves at most this many (a "Mon 30 Nov" label is ~75 px; an axes beside a legend ~470 px)


def time_ticks(start: Any, end: Any, tz: str, most: int = MAX_TIME_TICKS) -> list[Any]:
    """Tick times between `start` and `end` (datetimes) on the clock of `tz`: at most `most`, a
    round number of hours apart, on whole hours, and on local midnights once a day apart or more."""
    import pandas as pd

    a, b = pd.Timestamp(start).tz_convert(tz), pd.Timestamp(end).tz_convert(tz)
    hours = max((b - a) / pd.Timedelta(hours=1), 1.0)
    step = next((h for h in TICK_STEPS_H if hours / h <= most), TICK_STEPS_H[-1])
    if step >= 24:  # local midnights (a daylight-saving day is 23 or 25 h long)
        days = pd.date_range(a.normalize(), b, freq=pd.DateOffset(days=step // 24))
        return [t for t in days if a <= t <= b]
    first = a.ceil(f"{step}h", ambiguous=False, nonexistent="shift_forward")
    return list(pd.date_range(first, b, freq=f"{step}h"))


def time_axis(ax: Any, tz: str = "UTC", what: str = "time") -> None:
    """A time x axis, set after the data are drawn: labelled ticks show the day and the time of day
    on the clock of `tz` (an IANA name), unlabelled ones at about 4 times their density, and the
    axis label names that clock ("time (UTC)")."""
    from zoneinfo import ZoneInfo

    import matplotlib.dates as mdates
    from matplotlib.ticker import FixedLocator

    lo, hi = (mdates.num2date(v) for v in ax.get_xlim())
    major, minor = time_ticks(lo, hi, tz), time_ticks(lo, hi, tz, 4 * MAX_TIME_TICKS)
    ax.xaxis.set_major_locator(FixedLocator([mdates.date2num(t.to_pydatetime()) for t in major]))
    ax.xaxis.set_minor_locator(FixedLocator([mdates.date2num(t.to_pydatetime()) for t in minor]))
    ax.xaxis.set_major_formatter(mdates.DateFormatter("%a %d %b\n%H:%M", tz=ZoneInfo(tz)))
    ax.set_xlabel(f"{what} ({tz})", fontsize=LABEL_SIZE)


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


def figure_png(fig: Any, dpi: int = DPI) -> str:
    """A matplotlib figure as base64 PNG text, for `<img src="data:image/png;base64,...">`; the
    figure is closed (pages draw hundreds of them). Every figure leaves FIG_WIDTH wide (height
    scaled alike), laid out inside its own frame, so the PNGs of a page have one width in pixels,
    with no text under MIN_FONT and every legend outside its axes."""
    buf = io.BytesIO()
    try:
        outside_legends(fig)
        readable_text(fig)
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


# --- numbers with their units: what a page prints -------------------------------------------------

def significant(v: float, digits: int = 3) -> str:
    """`v` to `digits` significant figures, thousands separated, no trailing zeros: 86.08 -> 86.1,
    2659.8 -> 2,660, 0.012345 -> 0.0123, 0.5 -> 0.5 (a saving of 86.0812 reads as noise past its
    third figure)."""
    if not math.isfinite(v):
        return "–"
    if v == 0:
        return "0"
    rounded = round(v, digits - 1 - math.floor(math.log10(abs(v))))
    decimals = max(0, digits - 1 - math.floor(math.log10(abs(rounded))))
    text = f"{rounded:,.{decimals}f}"
    return text.rstrip("0").rstrip(".") if "." in text else text


BINARY = (("TiB", 2.0 ** 40), ("GiB", 2.0 ** 30), ("MiB", 2.0 ** 20), ("KiB", 2.0 ** 10))


def fmt_bytes(n: float) -> str:
    """Bytes in the largest binary unit under them, to 3 figures: 1787859657 -> `1.67 GiB`."""
    if not math.isfinite(n):
        return "–"
    for unit, size in BINARY:
        if abs(n) >= size:
            return f"{significant(n / size)} {unit}"
    return f"{significant(n)} B"


def fmt_millicores(m: float) -> str:
    """Millicores as the API server reads them under a core (`850m`), as cores above: 1141 -> `1.14 cores`."""
    if not math.isfinite(m):
        return "–"
    if abs(m) < 1000:
        return f"{significant(m)}m"
    return f"{significant(m / 1000)} cores"


def fmt_amount(resource: str, value: float) -> str:
    """A series' value in its unit: cpu in cores (`1.14 cores`, `850m`), memory in bytes (`1.67 GiB`)."""
    return fmt_bytes(value) if resource == "memory" else fmt_millicores(value * 1000)


def fmt_money(v: float | None, currency: str = "", digits: int = 3) -> str:
    """Money to `digits` significant figures (2-3 is what a saving is known to), the currency after."""
    if v is None:
        return "not measured"
    text = significant(v, digits)
    return f"{text} {currency}" if currency else text
